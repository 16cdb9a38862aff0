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
// The first sync must complete within --sync-timeout (30s by default): if
// it does not (server unreachable, bucket missing, permission refused),
// the program says why and exits with status 1. Ctrl-C or SIGTERM is a
// normal stop: the program prints the summary so far and exits with
// status 0.
//
// Values are JSON objects such as {"name": "api", "zone": "eu", "port": 443}.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/listwatch/mirror"
	natsmirror "github.com/listwatch/mirror/adapters/nats"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "nats-mirror:", err)
		os.Exit(1)
	}
}

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
	duration           time.Duration
	syncTimeout        time.Duration
	quiet              bool
}

func parseFlags(args []string, out io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("nats-mirror", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&c.url, "url", "", "NATS server URL(s) to mirror a bucket of, read-only; empty starts an embedded nats-server with demo data")
	fs.StringVar(&c.creds, "creds", "", "credentials file for the server (with --url)")
	fs.StringVar(&c.bucket, "bucket", "demo", "key-value bucket to mirror")
	fs.IntVar(&c.seed, "seed", 1000, "demo: keys written before the mirror starts")
	fs.IntVar(&c.changes, "changes", 200, "demo: changes written while the mirror runs")
	fs.DurationVar(&c.duration, "duration", 0, "stop after this long, initial sync included (0: until interrupted, or the demo's end)")
	fs.DurationVar(&c.syncTimeout, "sync-timeout", 30*time.Second, "fail if the initial sync has not completed in this long (0: wait as long as it takes)")
	fs.BoolVar(&c.quiet, "quiet", false, "print only the summary")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if c.url == "" && c.creds != "" {
		return c, errors.New("--creds needs --url: the demo's server has no users")
	}
	return c, nil
}

// printer serialises output from the handler and the main goroutine.
type printer struct {
	mu    sync.Mutex
	out   io.Writer
	quiet bool
}

func (p *printer) event(format string, args ...any) {
	if !p.quiet {
		p.printf(format, args...)
	}
}

func (p *printer) printf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.out, format+"\n", args...)
}

// errDurationOver is the cause of the end of run's context when
// --duration is over.
var errDurationOver = errors.New("--duration over")

func run(ctx context.Context, args []string, out io.Writer) error {
	cfg, err := parseFlags(args, out)
	if errors.Is(err, flag.ErrHelp) {
		return nil // the usage is printed
	}
	if err != nil {
		return err
	}
	if cfg.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, cfg.duration, errDurationOver)
		defer cancel()
	}
	p := &printer{out: out, quiet: cfg.quiet}
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
	m := startMirror(ctx, js, cfg.bucket, p)
	defer m.stop()
	if err := m.waitForSync(ctx, cfg.syncTimeout); err != nil {
		return err
	}
	p.printf("synced: %d keys", m.inf.Len())
	<-ctx.Done()
	m.summary()
	return nil
}

// mirrorRun is a running informer of a bucket, with the counts of what its
// handler was told.
type mirrorRun struct {
	lw   *natsmirror.ListWatcher[Service]
	inf  *mirror.Informer[string, object]
	reg  *mirror.Registration
	p    *printer
	stop func()

	mu                              sync.Mutex
	adds, updates, deletes, errored int
	lastErr                         error
	seen                            map[string]string // key -> name of the last value told
}

// startMirror starts an informer of bucket that prints what it is told.
func startMirror(ctx context.Context, js jetstream.JetStream, bucket string, p *printer) *mirrorRun {
	m := &mirrorRun{p: p, seen: map[string]string{}}
	m.lw = natsmirror.NewTyped(js, bucket, decodeService, natsmirror.Options{})
	m.inf = natsmirror.NewInformer(m.lw, natsmirror.InformerOptions[Service]{
		ErrorHandler: func(err error) {
			m.mu.Lock()
			m.errored++
			m.lastErr = err
			m.mu.Unlock()
			p.event("error: %v", err)
		},
	})
	m.reg, _ = m.inf.AddEventHandler(mirror.HandlerFuncs[object]{
		AddFunc: func(o object, initial bool) {
			m.count(&m.adds, o.Key, o.Value.Name)
			if !initial {
				p.event("add    %s rev %d: %s in %s, port %d", o.Key, o.Revision, o.Value.Name, o.Value.Zone, o.Value.Port)
			}
		},
		UpdateFunc: func(old, o object) {
			m.count(&m.updates, o.Key, o.Value.Name)
			p.event("update %s rev %d: port %d -> %d", o.Key, o.Revision, old.Value.Port, o.Value.Port)
		},
		DeleteFunc: func(o object, unknown bool) {
			m.count(&m.deletes, o.Key, "")
			p.event("delete %s (last at rev %d, final state unknown: %t)", o.Key, o.Revision, unknown)
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

// waitForSync waits until the mirror has its first list, for at most
// timeout (0: no bound), and says why it failed if it did not.
func (m *mirrorRun) waitForSync(ctx context.Context, timeout time.Duration) error {
	sctx := ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		sctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	start := time.Now()
	if err := mirror.WaitForCacheSync(sctx, m.reg); err != nil {
		if ctx.Err() != nil {
			return nil // interrupted: not a failure
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.lastErr != nil {
			return fmt.Errorf("initial sync: %w (last error: %v)", err, m.lastErr)
		}
		return fmt.Errorf("initial sync: %w", err)
	}
	m.p.event("initial sync of bucket %q took %v", m.lw.Bucket(), time.Since(start).Round(time.Millisecond))
	return nil
}

// summary prints what the mirror did.
func (m *mirrorRun) summary() {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.lw.Stats()
	m.p.printf("summary: %d keys mirrored; handler told %d adds, %d updates, %d deletes; %d errors reported; %d lists, %d watches, %d expired",
		m.inf.Len(), m.adds, m.updates, m.deletes, m.errored, st.Lists, st.Watches, st.Expired)
}
