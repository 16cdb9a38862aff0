// Command nats-mirror mirrors a NATS JetStream key-value bucket into a
// typed cache in memory and prints every change it sees.
//
// With no flags it starts a nats-server of its own on loopback, with
// JetStream in a temporary directory, seeds a bucket, writes a stream of
// demo changes (deletions, re-creations, purges, one value that does not
// decode), restarts the server halfway through, waits until the mirror has
// caught up, checks the mirror against the bucket and prints a summary:
//
//	go run ./examples/nats-mirror
//
// The bucket keeps a few revisions per key, so the watch that resumes
// after the restart finds everything it missed: a key deleted and created
// again is reported as a deletion then an addition. A purge removes a
// key's earlier revisions at once: a watch that has not delivered them yet
// ends, and the mirror lists the bucket again (the summary counts these as
// expired watches).
//
// With --url it mirrors a real server's bucket, read-only, until
// interrupted or for --duration, which includes the initial sync:
//
//	go run ./examples/nats-mirror --url nats://10.0.0.1:4222 --creds user.creds --bucket services
//
// It behaves as every example does (see examples/internal/cli): --help
// exits 0 and a bad flag 2; the first sync must complete within
// --sync-timeout (30s by default), or the program says why (server
// unreachable, bucket missing, permission refused) and exits 1; Ctrl-C or
// SIGTERM is a normal stop: the program prints the summary so far and
// exits 0; --quiet prints only the summary and fatal errors.
//
// Values are JSON objects such as {"name": "api", "zone": "eu", "port": 443}.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"

	"github.com/listwatch/mirror"
	natsmirror "github.com/listwatch/mirror/adapters/nats"
	"github.com/listwatch/mirror/examples/internal/cli"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func main() { cli.Main("nats-mirror", run) }

// Service is the value stored under each key.
type Service struct {
	Name string `json:"name"`
	Zone string `json:"zone"`
	Port int    `json:"port"`
}

func decodeService(_ string, v []byte) (Service, error) {
	var s Service
	err := json.Unmarshal(v, &s)
	return s, err
}

// object is what the mirror holds per key.
type object = natsmirror.Object[Service]

type config struct {
	url, creds, bucket string
	seed, changes      int
	cli.Flags          // --quiet, --sync-timeout, --duration
}

func parseFlags(args []string, out io.Writer) (config, error) {
	var c config
	fs := cli.NewFlagSet("nats-mirror", "until interrupted, or the demo's end", &c.Flags)
	fs.StringVar(&c.url, "url", "", "NATS server URL(s) to mirror a bucket of, read-only; empty starts an embedded nats-server with demo data")
	fs.StringVar(&c.creds, "creds", "", "credentials file for the server (with --url)")
	fs.StringVar(&c.bucket, "bucket", "demo", "key-value bucket to mirror")
	fs.IntVar(&c.seed, "seed", 1000, "demo: keys written before the mirror starts")
	fs.IntVar(&c.changes, "changes", 200, "demo: changes written while the mirror runs")
	if err := cli.Parse(fs, args, out); err != nil {
		return c, err
	}
	switch {
	case c.url == "" && c.creds != "":
		return c, cli.Usagef("--creds needs --url: the demo's server has no users")
	case c.seed < 0 || c.changes < 0:
		return c, cli.Usagef("--seed %d --changes %d: neither may be negative", c.seed, c.changes)
	}
	return c, nil
}

func run(ctx context.Context, args []string, out io.Writer) error {
	cfg, err := parseFlags(args, out)
	if err != nil {
		return err
	}
	ctx, cancel := cfg.Context(ctx) // --duration
	defer cancel()
	p := cfg.Printer(out)
	if cfg.url == "" {
		return runDemo(ctx, cfg, p)
	}
	opts := []nats.Option{nats.Name("nats-mirror"), nats.MaxReconnects(-1)}
	if cfg.creds != "" {
		opts = append(opts, nats.UserCredentials(cfg.creds))
	}
	nc, err := nats.Connect(cfg.url, opts...)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", cfg.url, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	m := startMirror(ctx, js, cfg, p)
	defer m.stop()
	err = m.waitForSync(ctx, cfg)
	if err == nil {
		<-ctx.Done()
	}
	return cfg.Finish(ctx, err, p, m.summary)
}

// mirrorRun is a running informer of a bucket, with the counts of what its
// handler was told.
type mirrorRun struct {
	lw   *natsmirror.ListWatcher[Service]
	inf  *mirror.Informer[string, object]
	reg  *mirror.Registration
	p    *cli.Printer
	stop func()

	mu                              sync.Mutex
	adds, updates, deletes, errored int
	seen                            map[string]string // key -> name of the last value told
}

// startMirror starts an informer of cfg.bucket that prints what it is
// told.
func startMirror(ctx context.Context, js jetstream.JetStream, cfg config, p *cli.Printer) *mirrorRun {
	m := &mirrorRun{p: p, seen: map[string]string{}}
	m.lw = natsmirror.NewTyped(js, cfg.bucket, decodeService, natsmirror.Options{})
	m.inf = natsmirror.NewInformer(m.lw, natsmirror.InformerOptions[Service]{
		Logger: cfg.Logger(), // nil, slog's default, unless --quiet
		ErrorHandler: func(err error) {
			m.mu.Lock()
			m.errored++
			m.mu.Unlock()
			p.Printf("error: %v", err)
		},
	})
	m.reg, _ = m.inf.AddEventHandler(mirror.HandlerFuncs[object]{
		AddFunc: func(o object, initial bool) {
			m.count(&m.adds, o.Key, o.Value.Name)
			if !initial {
				p.Printf("add    %s rev %d: %s in %s, port %d", o.Key, o.Revision, o.Value.Name, o.Value.Zone, o.Value.Port)
			}
		},
		UpdateFunc: func(old, o object) {
			m.count(&m.updates, o.Key, o.Value.Name)
			p.Printf("update %s rev %d: port %d -> %d", o.Key, o.Revision, old.Value.Port, o.Value.Port)
		},
		DeleteFunc: func(o object, unknown bool) {
			m.count(&m.deletes, o.Key, "")
			p.Printf("delete %s (last at rev %d, final state unknown: %t)", o.Key, o.Revision, unknown)
		},
	}, mirror.HandlerOptions{})
	ictx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = m.inf.Run(ictx)
	}()
	m.stop = func() { cancel(); <-done }
	return m
}

func (m *mirrorRun) count(n *int, key, name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	*n++
	if name == "" {
		delete(m.seen, key)
	} else {
		m.seen[key] = name
	}
}

// waitForSync waits until the mirror has its first list, within
// --sync-timeout.
func (m *mirrorRun) waitForSync(ctx context.Context, cfg config) error {
	if err := cfg.WaitForSync(ctx, m.p, m.inf, m.reg); err != nil {
		return err
	}
	m.p.Printf("synced: %d keys", m.inf.Len())
	return nil
}

// summary prints what the mirror did.
func (m *mirrorRun) summary() {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.lw.Stats()
	m.p.Summary("summary: %d keys mirrored; handler told %d adds, %d updates, %d deletes; %d errors reported; %d lists, %d watches, %d expired",
		m.inf.Len(), m.adds, m.updates, m.deletes, m.errored, st.Lists, st.Watches, st.Expired)
}
