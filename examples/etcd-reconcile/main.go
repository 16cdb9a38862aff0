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
// whose key went while the program was not running is removed.
//
// It behaves as every example does (see examples/internal/cli): --help
// exits 0 and a bad flag 2; the first sync must complete within
// --sync-timeout (30s by default), or the program says why and exits 1;
// Ctrl-C or SIGTERM stops it cleanly at any time, with the summary and
// status 0; --quiet prints only the summary and fatal errors.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/listwatch/mirror/examples/internal/cli"
	"github.com/listwatch/mirror/examples/internal/embedetcd"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func main() { cli.Main("etcd-reconcile", run) }

// requestTimeout bounds each request of the mirror to etcd: a member that
// does not answer is reported after it; the informer retries either way.
const requestTimeout = 5 * time.Second

type config struct {
	endpoints string
	prefix    string
	out       string
	workers   int
	timeout   time.Duration
	cli.Flags // --quiet, --sync-timeout, --duration
}

func parseFlags(args []string, out io.Writer) (config, error) {
	var c config
	fs := cli.NewFlagSet("etcd-reconcile", "until interrupted, or the demo's end", &c.Flags)
	fs.StringVar(&c.endpoints, "endpoints", "", "comma-separated etcd endpoints to read (never written); empty starts an embedded etcd with demo data")
	fs.StringVar(&c.prefix, "prefix", "/demo/services/", "key prefix to render; it should end in \"/\"")
	fs.StringVar(&c.out, "out", "", "directory to render <name>.conf files into (default: a new temporary directory)")
	fs.IntVar(&c.workers, "workers", 2, "keys reconciled at once")
	fs.DurationVar(&c.timeout, "demo-timeout", 30*time.Second, "demo: fail if the files are not in step with etcd this long after a change")
	if err := cli.Parse(fs, args, out); err != nil {
		return c, err
	}
	switch {
	case c.prefix == "":
		return c, cli.Usagef("--prefix must not be empty")
	case c.workers < 1:
		return c, cli.Usagef("--workers %d: at least 1", c.workers)
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
	p.Printf("rendering %s* into %s", cfg.prefix, cfg.out)

	endpoints := strings.Split(cfg.endpoints, ",")
	if demo {
		srv, err := embedetcd.Start(ctx, "etcd-reconcile")
		if err != nil {
			return cfg.Finish(ctx, err, p, func() { p.Summary("summary: nothing rendered") })
		}
		defer srv.Close()
		p.Printf("started an embedded etcd at %s", srv.Endpoint)
		endpoints = []string{srv.Endpoint}
	}
	client, err := clientv3.New(clientv3.Config{Endpoints: endpoints, Logger: zap.NewNop()})
	if err != nil {
		return fmt.Errorf("connect to etcd: %w", err)
	}
	defer client.Close()

	c, err := newController(client, cfg, p)
	if err != nil {
		return err
	}
	var d *demoWriter
	if demo {
		d = &demoWriter{client: client, prefix: cfg.prefix, p: p}
		if err := d.seed(ctx); err != nil {
			return cfg.Finish(ctx, err, p, c.summary)
		}
	}
	defer c.start(ctx)()
	if err := cfg.WaitForSync(ctx, p, c.inf, c.reg); err != nil {
		return cfg.Finish(ctx, err, p, c.summary)
	}
	p.Printf("synced %d keys", c.inf.Len())
	if !demo {
		<-ctx.Done()
		return cfg.Finish(ctx, nil, p, c.summary)
	}
	if err := d.run(ctx, cfg); err != nil {
		return cfg.Finish(ctx, err, p, c.summary)
	}
	c.summary()
	return nil
}
