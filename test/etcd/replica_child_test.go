package etcd

// Replicas of a sharded controller, each in a process of its own.
//
// A replica is this test binary run again with replicaEnv set to its
// replicaConfig (see TestMain): a controller over the keys under
// <root>keys/ that mirrors them with an informer, is one member of the
// shard group kept under <root>group/ (etcdmirror.ShardBackend), and
// reconciles the keys of its shards with a sharded reconcile.Loop. Its
// Reconcile waits Work (honouring its context), then, unless the config
// says not to, writes the value it saw to <root>status/<name> through the
// adapter's fenced path (etcdmirror.FencedTxn), deleting it for a key
// that is gone. Every call is appended to the replica's history file as
// one JSON line (a callRecord), in one write, so that a killed replica
// leaves whole lines behind.
//
// A replica runs until SIGTERM or SIGINT (its member drains and leaves
// the group: a graceful leave) or until its standard input, a pipe the
// parent holds, closes; a SIGKILL leaves its lease to etcd.

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
	"syscall"
	"time"

	"github.com/listwatch/mirror"
	etcdmirror "github.com/listwatch/mirror/adapters/etcd"
	"github.com/listwatch/mirror/reconcile"
	"github.com/listwatch/mirror/shard"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// replicaEnv holds a replica's configuration, as JSON.
const replicaEnv = "MIRROR_TEST_ETCD_REPLICA"

// replicaConfig is what a replica process runs.
type replicaConfig struct {
	Name     string // the member's Name: its IDs are Name-<hex>
	Endpoint string // etcd's, or a proxy's in front of it
	Root     string // keys under Root+"keys/", claims under Root+"group/"
	History  string // the file the calls are appended to

	TTL, RenewDeadline, RetryPeriod time.Duration // zero: the defaults
	Work                            time.Duration // each call's wait
	Workers                         int
	NoWrite                         bool // calls write nothing (the scale runs)
	// Gate, if set, is a key: calls wait until it exists (the scale
	// runs start every replica's work at once).
	Gate string
}

func (c replicaConfig) keysPrefix() string  { return c.Root + "keys/" }
func (c replicaConfig) groupPrefix() string { return c.Root + "group/" }

// statusKey is where the replica writes what it saw of key.
func (c replicaConfig) statusKey(key string) string {
	return c.Root + "status/" + strings.TrimPrefix(key, c.keysPrefix())
}

// Outcomes of a call's fenced write (callRecord.Write).
const (
	writeNone     = ""         // none sent: the call's context ended first
	writeAccepted = "accepted" // etcd applied it
	writeRefused  = "refused"  // etcd refused it: the claim was superseded
	writeFailed   = "failed"   // no answer, or another error
)

// callRecord is one Reconcile call of a replica, a line of its history.
// Times are wall-clock Unix nanoseconds, comparable across the replicas
// of one machine.
type callRecord struct {
	Key     string `json:"key"`
	Replica string `json:"replica"`
	Start   int64  `json:"start"`
	End     int64  `json:"end"`
	Shard   int    `json:"shard"`
	Token   int64  `json:"token"`
	Seen    string `json:"seen"`   // the value the call read from the cache
	Exists  bool   `json:"exists"` // whether the key was in the cache
	Write   string `json:"write,omitempty"`
	WriteAt int64  `json:"write_at,omitempty"` // when the write was sent
	Rev     int64  `json:"rev,omitempty"`      // an accepted write's revision
	Err     string `json:"err,omitempty"`      // a failed write's error
}

// historyFile appends records to a file, one write per line.
type historyFile struct {
	mu sync.Mutex
	f  *os.File
}

func (h *historyFile) add(r callRecord) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err = h.f.Write(append(b, '\n'))
	return err
}

// runReplica runs the replica raw configures (a replicaConfig in JSON) and
// returns the process's exit code: 0 after a signal or the end of standard
// input, 1 on a failure.
func runReplica(raw string) int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "replica:", err)
		return 1
	}
	var cfg replicaConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		return fail(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel() // the parent is gone
	}()
	if err := replica(ctx, cfg); err != nil {
		return fail(err)
	}
	return 0
}

// replica runs one replica until ctx ends.
func replica(ctx context.Context, cfg replicaConfig) error {
	f, err := os.OpenFile(cfg.History, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	hist := &historyFile{f: f}
	client, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{cfg.Endpoint},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return err
	}
	defer client.Close()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("replica", cfg.Name)

	member := shard.NewMember(etcdmirror.NewShardBackend(client, cfg.groupPrefix(), etcdmirror.Options{}), shard.MemberOptions{
		Name: cfg.Name, TTL: cfg.TTL, RenewDeadline: cfg.RenewDeadline, RetryPeriod: cfg.RetryPeriod,
		ErrorHandler: func(error) {}, // the faults make them by design
		Logger:       log,
	})
	inf := etcdmirror.NewInformer(etcdmirror.New(client, cfg.keysPrefix(), etcdmirror.Options{}), etcdmirror.InformerOptions[[]byte]{Logger: log})
	gate := openGate(ctx, client, cfg.Gate)
	shards := member.Options().Shards
	loop := reconcile.New(reconcile.Func[string](func(ctx context.Context, key string) (reconcile.Result, error) {
		select {
		case <-gate:
		case <-ctx.Done():
			return reconcile.Result{}, ctx.Err()
		}
		r := callRecord{Key: key, Replica: cfg.Name, Start: time.Now().UnixNano(), Shard: shard.Of(reconcile.KeyHash(key), shards)}
		if tok, ok := shard.TokenFrom(ctx); ok {
			r.Token = tok.Value
		}
		if o, ok := inf.GetByKey(key); ok {
			r.Seen, r.Exists = string(o.Value), true
		}
		err := wait(ctx, cfg.Work)
		if err == nil && !cfg.NoWrite {
			op := clientv3.OpDelete(cfg.statusKey(key))
			if r.Exists {
				op = clientv3.OpPut(cfg.statusKey(key), r.Seen)
			}
			r.WriteAt = time.Now().UnixNano()
			var resp *clientv3.TxnResponse
			resp, err = etcdmirror.FencedTxn(ctx, client, nil, op)
			switch {
			case err == nil:
				r.Write, r.Rev = writeAccepted, resp.Header.Revision
			case errors.Is(err, shard.ErrFenced):
				r.Write, err = writeRefused, nil // the shard moved on: its new owner does it
			default:
				r.Write, r.Err = writeFailed, err.Error()
			}
		}
		r.End = time.Now().UnixNano()
		if herr := hist.add(r); herr != nil {
			return reconcile.Result{}, reconcile.Terminal(herr)
		}
		return reconcile.Result{}, err
	}), reconcile.Options{Name: cfg.Name, Workers: cfg.Workers, Shards: member, Logger: log, ErrorHandler: func(error) {}})
	if _, err := reconcile.Watch(loop, inf, mirror.HandlerOptions{}); err != nil {
		return err
	}

	errs := make(chan error, 3)
	var wg sync.WaitGroup
	wg.Go(func() { errs <- inf.Run(ctx) })
	wg.Go(func() { errs <- member.Run(ctx) })
	wg.Go(func() { errs <- loop.Run(ctx) })
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			all = append(all, err)
		}
	}
	return errors.Join(all...)
}

// wait waits d or until ctx ends, and returns ctx's error if it did.
func wait(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// openGate returns a channel closed once key exists in etcd (at once for
// an empty key), or never if ctx ends first.
func openGate(ctx context.Context, c *clientv3.Client, key string) <-chan struct{} {
	open := make(chan struct{})
	if key == "" {
		close(open)
		return open
	}
	go func() {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		defer cancel()
		for ctx.Err() == nil {
			resp, err := c.Get(wctx, key)
			if err != nil {
				_ = wait(ctx, 100*time.Millisecond)
				continue
			}
			if len(resp.Kvs) > 0 {
				close(open)
				return
			}
			for wr := range c.Watch(wctx, key, clientv3.WithRev(resp.Header.Revision+1)) {
				if len(wr.Events) > 0 {
					close(open)
					return
				}
			}
		}
	}()
	return open
}
