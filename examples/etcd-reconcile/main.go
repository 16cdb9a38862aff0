// Command etcd-reconcile is a controller over an etcd prefix: it mirrors
// the prefix with an informer, and a reconcile loop renders each service
// stored under it into a file, <out>/<name>.conf, written atomically and
// removed when the key goes, printing what it did.
//
// With no flags it starts an etcd server of its own on loopback, in a
// temporary directory, writes a few services under /demo/services/,
// renders them, then changes, adds and deletes some (and writes one value
// that does not decode, whose file goes too), waits until the files are in
// step with etcd, checks them against etcd and exits:
//
//	go run ./examples/etcd-reconcile
//
// With --endpoints it renders a real cluster's prefix, read-only, until
// interrupted or for --duration:
//
//	go run ./examples/etcd-reconcile --endpoints http://10.0.0.1:2379 \
//	    --prefix /services/ --out /etc/myproxy/services
//
// Values are JSON objects such as {"zone": "eu-west", "port": 443}; a key's
// name under the prefix names its file, so it must not hold a "/". The
// loop touches only the *.conf files of --out (made if missing): at start
// it also reconciles the names of those already there, so that a file
// whose key went while the program was not running is removed. Ctrl-C or
// SIGTERM stops it cleanly at any time, with status 0.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "etcd-reconcile:", err)
		os.Exit(1)
	}
}

type config struct {
	endpoints string
	prefix    string
	out       string
	workers   int
	duration  time.Duration
	timeout   time.Duration
}

func parseFlags(args []string, out io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("etcd-reconcile", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&c.endpoints, "endpoints", "", "comma-separated etcd endpoints to read (never written); empty starts an embedded etcd with demo data")
	fs.StringVar(&c.prefix, "prefix", "/demo/services/", "key prefix to render; it should end in \"/\"")
	fs.StringVar(&c.out, "out", "", "directory to render <name>.conf files into (default: a new temporary directory)")
	fs.IntVar(&c.workers, "workers", 2, "keys reconciled at once")
	fs.DurationVar(&c.duration, "duration", 0, "stop after this long (0: until interrupted, or the demo's end)")
	fs.DurationVar(&c.timeout, "demo-timeout", 30*time.Second, "demo: fail if the files are not in step with etcd this long after a change")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if c.prefix == "" {
		return c, errors.New("--prefix must not be empty")
	}
	return c, nil
}

// printer serialises the output of the workers and the main goroutine.
type printer struct {
	mu  sync.Mutex
	out io.Writer
}

func (p *printer) printf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.out, format+"\n", args...)
}

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
		ctx, cancel = context.WithTimeout(ctx, cfg.duration)
		defer cancel()
	}
	p := &printer{out: out}
	demo := cfg.endpoints == ""
	if cfg.out == "" {
		if cfg.out, err = os.MkdirTemp("", "etcd-reconcile-out-"); err != nil {
			return err
		}
		if demo {
			// The demo's files, shown as they are written, go with its
			// etcd; --out keeps them.
			defer os.RemoveAll(cfg.out)
		}
	} else if err := os.MkdirAll(cfg.out, 0o755); err != nil {
		return err
	}
	p.printf("rendering %s* into %s", cfg.prefix, cfg.out)

	endpoints := strings.Split(cfg.endpoints, ",")
	if demo {
		srv, err := startEmbedded(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil // interrupted
			}
			return err
		}
		defer srv.close()
		p.printf("started an embedded etcd at %s", srv.endpoint)
		endpoints = []string{srv.endpoint}
	}
	client, err := clientv3.New(clientv3.Config{Endpoints: endpoints, Logger: zap.NewNop()})
	if err != nil {
		return fmt.Errorf("connect to etcd: %w", err)
	}
	defer client.Close()

	var d *demoWriter
	if demo {
		d = &demoWriter{client: client, prefix: cfg.prefix, p: p}
		if err := d.seed(ctx); err != nil {
			return stopped(ctx, err, p)
		}
	}
	c, err := newController(client, cfg, p)
	if err != nil {
		return err
	}
	defer c.start(ctx)()
	if err := c.reg.WaitForSync(ctx); err != nil {
		return stopped(ctx, err, p)
	}
	p.printf("synced %d keys", c.inf.Len())
	if !demo {
		<-ctx.Done()
		return stopped(ctx, nil, p)
	}
	return stopped(ctx, d.run(ctx, cfg, p), p)
}

// stopped ends a run with err, unless ctx ended: an interruption, or
// --duration over, is a normal stop.
func stopped(ctx context.Context, err error, p *printer) error {
	if ctx.Err() == nil {
		return err
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		p.printf("stopped: --duration over")
	} else {
		p.printf("interrupted")
	}
	return nil
}
