// Command replicas runs three replicas of one controller, each a process
// of its own, over an embedded etcd, and shows them share the work: the
// keys are divided into shards (shard.Member on the etcd adapter's
// ShardBackend), each replica reconciles the keys of the shards it holds
// (reconcile.Options.Shards), and when one is killed the others take its
// shards over once its lease ends.
//
//	go run ./examples/replicas
//
// The program starts an etcd server of its own on loopback, in a
// temporary directory, writes --keys keys under /demo/replicas/keys/, and
// starts --replicas replicas: this program again, in the role of a
// replica. Each replica's Reconcile copies a key's value to
// /demo/replicas/status/<name>, through the adapter's fenced write
// (etcd.FencedTxn), which etcd refuses once the key's shard has moved to
// another replica. The program prints how many shards each replica holds,
// waits until every key's status matches it, then changes keys while,
// --kill-after later, it kills one replica with SIGKILL; it prints when
// the killed replica's shards were taken over, waits until every key
// converged again, and exits.
//
// It behaves as every example does (see examples/internal/cli): --help
// exits 0 and a bad flag 2; Ctrl-C or SIGTERM stops it cleanly at any
// time (the replicas leave the group gracefully), with the summary and
// status 0; --duration bounds the run; --quiet prints only the summary
// and fatal errors.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/listwatch/mirror/examples/internal/cli"
	"github.com/listwatch/mirror/examples/internal/embedetcd"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// replicaEnv, when set, makes the program a replica: it holds the
// replica's configuration, as JSON.
const replicaEnv = "MIRROR_EXAMPLE_REPLICA"

func main() {
	if raw := os.Getenv(replicaEnv); raw != "" {
		os.Exit(replicaMain(raw))
	}
	cli.Main("replicas", run)
}

// root is where the demo keeps its keys, statuses and shard group.
const root = "/demo/replicas/"

type config struct {
	replicas  int
	keys      int
	ttl       time.Duration
	killAfter time.Duration
	timeout   time.Duration
	cli.Flags // --quiet, --sync-timeout, --duration
}

func parseFlags(args []string, out io.Writer) (config, error) {
	var c config
	fs := cli.NewFlagSet("replicas", "the demo's end", &c.Flags)
	fs.IntVar(&c.replicas, "replicas", 3, "replica processes to start (at least 2: one is killed)")
	fs.IntVar(&c.keys, "keys", 300, "keys to reconcile")
	fs.DurationVar(&c.ttl, "ttl", 3*time.Second, "the replicas' lease TTL (whole seconds): how long a killed replica's shards wait")
	fs.DurationVar(&c.killAfter, "kill-after", 2*time.Second, "kill one replica this long after the keys first converged")
	fs.DurationVar(&c.timeout, "demo-timeout", time.Minute, "fail if a step of the demo takes longer than this")
	if err := cli.Parse(fs, args, out); err != nil {
		return c, err
	}
	switch {
	case c.replicas < 2:
		return c, cli.Usagef("--replicas %d: at least 2", c.replicas)
	case c.keys < 1:
		return c, cli.Usagef("--keys %d: at least 1", c.keys)
	case c.ttl < time.Second || c.ttl%time.Second != 0:
		return c, cli.Usagef("--ttl %v: whole seconds, at least 1s", c.ttl)
	case c.killAfter < 0:
		return c, cli.Usagef("--kill-after %v: not negative", c.killAfter)
	}
	return c, nil
}

// demo is what the run did, for the summary.
type demo struct {
	cfg       config
	converged int           // times every key converged
	killed    string        // the replica killed, once it was
	shards    int           // the shards it held
	takeover  time.Duration // from the kill until others held them all
	takenBy   map[string]int
}

func (d *demo) summary(p *cli.Printer) func() {
	return func() {
		s := fmt.Sprintf("summary: %d replicas, %d keys", d.cfg.replicas, d.cfg.keys)
		switch {
		case d.killed == "":
			s += "; no replica killed"
		case d.takeover == 0:
			s += fmt.Sprintf("; %s killed, its %d shards not yet taken over", d.killed, d.shards)
		default:
			s += fmt.Sprintf("; %s killed, its %d shards taken over in %v (lease TTL %v)", d.killed, d.shards, d.takeover.Round(10*time.Millisecond), d.cfg.ttl)
		}
		switch d.converged {
		case 0:
			s += "; the keys never converged"
		case 1:
			s += "; every key converged before the kill"
		default:
			s += "; every key converged before and after the kill"
		}
		p.Summary("%s", s)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	cfg, err := parseFlags(args, out)
	if err != nil {
		return err
	}
	ctx, cancel := cfg.Context(ctx) // --duration
	defer cancel()
	p := cfg.Printer(out)
	d := &demo{cfg: cfg}
	var reps []*child
	stopped := false
	stopReplicas := func() { // they leave the group gracefully
		if !stopped {
			stopped = true
			for _, r := range reps {
				r.stop()
			}
		}
	}
	defer stopReplicas()
	// The replicas' last lines come before the summary.
	summary := func() { stopReplicas(); d.summary(p)() }

	srv, err := embedetcd.Start(ctx, "replicas")
	if err != nil {
		return cfg.Finish(ctx, err, p, summary)
	}
	defer srv.Close()
	p.Printf("started an embedded etcd at %s", srv.Endpoint)
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Endpoint}, Logger: zap.NewNop()})
	if err != nil {
		return fmt.Errorf("connect to etcd: %w", err)
	}
	defer client.Close()
	if err := seed(ctx, client, cfg.keys); err != nil {
		return cfg.Finish(ctx, err, p, summary)
	}
	p.Printf("wrote %d keys under %skeys/", cfg.keys, root)

	exe, err := os.Executable()
	if err != nil {
		return err
	}
	var names []string
	for i := range cfg.replicas {
		rc := replicaConfig{Name: fmt.Sprintf("replica-%d", i+1), Endpoint: srv.Endpoint, TTL: cfg.ttl, Quiet: cfg.Quiet}
		r, err := startChild(exe, rc, p)
		if err != nil {
			return cfg.Finish(ctx, err, p, summary)
		}
		reps = append(reps, r)
		names = append(names, rc.Name)
	}
	w := watcher{client: client, p: p, timeout: cfg.timeout}

	held, err := w.split(ctx, names)
	if err != nil {
		return cfg.Finish(ctx, err, p, summary)
	}
	if err := w.converged(ctx); err != nil {
		return cfg.Finish(ctx, err, p, summary)
	}
	d.converged++
	p.Printf("every key converged: its status holds its value")

	// Keys change while a replica is killed and its shards taken over.
	wctx, stopWriting := context.WithCancel(ctx)
	writes := make(chan error, 1)
	go func() { writes <- write(wctx, client, cfg.keys) }()
	stopWriter := func() error {
		stopWriting()
		if err := <-writes; err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
		return nil
	}
	select {
	case <-ctx.Done():
		_ = stopWriter()
		return cfg.Finish(ctx, ctx.Err(), p, summary)
	case <-time.After(cfg.killAfter):
	}
	victim := reps[0]
	d.killed, d.shards = victim.name, held[victim.name]
	p.Printf("kill -9 %s (pid %d), which holds %d shards", victim.name, victim.pid(), d.shards)
	killed := time.Now()
	victim.kill()
	taken, err := w.split(ctx, names[1:])
	if err != nil {
		_ = stopWriter()
		return cfg.Finish(ctx, err, p, summary)
	}
	d.takeover, d.takenBy = time.Since(killed), taken
	p.Printf("%s's %d shards taken over %v after the kill, once its lease ended", victim.name, d.shards, d.takeover.Round(10*time.Millisecond))
	if err := stopWriter(); err != nil {
		return cfg.Finish(ctx, err, p, summary)
	}
	if err := w.converged(ctx); err != nil {
		return cfg.Finish(ctx, err, p, summary)
	}
	d.converged++
	p.Printf("every key converged again, reconciled by the replicas left")
	summary()
	return nil
}

// replicaConfig is what a replica runs with.
type replicaConfig struct {
	Name     string
	Endpoint string
	TTL      time.Duration
	Quiet    bool
}

func (c replicaConfig) env() (string, error) {
	b, err := json.Marshal(c)
	return replicaEnv + "=" + string(b), err
}
