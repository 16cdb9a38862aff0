package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/listwatch/mirror"
	etcdmirror "github.com/listwatch/mirror/adapters/etcd"
	"github.com/listwatch/mirror/reconcile"
	"github.com/listwatch/mirror/shard"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// replicaMain runs this process as the replica raw describes (a
// replicaConfig in JSON) until SIGTERM, SIGINT or the end of its standard
// input (the parent is gone), and returns its exit status.
func replicaMain(raw string) int {
	var cfg replicaConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "replica:", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	if err := runReplica(ctx, cfg); err != nil {
		fmt.Printf("%s: %v\n", cfg.Name, err)
		return 1
	}
	return 0
}

// runReplica is one replica of the controller: an informer over the keys,
// a member of the shard group, and a sharded loop that copies each key of
// its shards to its status through a fenced write.
func runReplica(ctx context.Context, cfg replicaConfig) error {
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{cfg.Endpoint}, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer client.Close()
	say := func(format string, args ...any) {
		if !cfg.Quiet {
			fmt.Printf(cfg.Name+": "+format+"\n", args...)
		}
	}
	logger := slog.New(slog.DiscardHandler)
	if !cfg.Quiet {
		logger = slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{Level: slog.LevelWarn})).With("replica", cfg.Name)
	}

	member := shard.NewMember(etcdmirror.NewShardBackend(client, root+"group/", etcdmirror.Options{}), shard.MemberOptions{
		Name:         cfg.Name,
		TTL:          cfg.TTL,
		ErrorHandler: func(err error) { logger.Debug("shard member", "err", err) },
		Logger:       logger,
	})
	inf := etcdmirror.NewInformer(etcdmirror.New(client, root+"keys/", etcdmirror.Options{}), etcdmirror.InformerOptions[[]byte]{Logger: logger})
	var reconciled, refused atomic.Int64
	loop := reconcile.New(reconcile.Func[string](func(ctx context.Context, key string) (reconcile.Result, error) {
		status := root + "status/" + strings.TrimPrefix(key, root+"keys/")
		op := clientv3.OpDelete(status)
		if o, ok := inf.GetByKey(key); ok {
			op = clientv3.OpPut(status, string(o.Value))
		}
		// The write is refused by etcd if the key's shard has moved to
		// another replica since this call was granted.
		_, err := etcdmirror.FencedTxn(ctx, client, nil, op)
		switch {
		case errors.Is(err, shard.ErrFenced):
			refused.Add(1)
			return reconcile.Result{}, nil // its new holder reconciles it
		case err != nil:
			return reconcile.Result{}, err
		}
		reconciled.Add(1)
		return reconcile.Result{}, nil
	}), reconcile.Options{Name: cfg.Name, Workers: 4, Shards: member, Logger: logger})
	if _, err := reconcile.Watch(loop, inf, mirror.HandlerOptions{}); err != nil {
		return err
	}
	held := 0
	unsubscribe := member.Subscribe(func(gained, lost []int) {
		held += len(gained) - len(lost)
		say("holds %d shards (+%d -%d)", held, len(gained), len(lost))
	})
	defer unsubscribe()

	start := time.Now()
	errs := make(chan error, 3)
	var wg sync.WaitGroup
	wg.Go(func() { errs <- inf.Run(ctx) })
	wg.Go(func() { errs <- member.Run(ctx) })
	wg.Go(func() { errs <- loop.Run(ctx) })
	wg.Wait()
	close(errs)
	say("left after %v: %d keys reconciled, %d writes refused", time.Since(start).Round(time.Second), reconciled.Load(), refused.Load())
	var all []error
	for err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			all = append(all, err)
		}
	}
	return errors.Join(all...)
}
