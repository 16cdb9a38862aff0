// Command etcd-mirror mirrors an etcd key prefix into a typed, indexed
// cache in memory and prints every change it sees.
//
// With no flags it starts an etcd server of its own on loopback, in a
// temporary directory, seeds the prefix, writes a stream of demo changes
// (one of them a value that does not decode), waits until the mirror has
// caught up, checks the mirror against etcd and prints a summary:
//
//	go run ./examples/etcd-mirror
//
// With --endpoints it mirrors a real cluster's prefix, read-only, until
// interrupted (or for --duration):
//
//	go run ./examples/etcd-mirror --endpoints https://10.0.0.1:2379 \
//	    --cacert ca.pem --cert client.pem --key client-key.pem --prefix /services/
//
// Values are JSON objects such as {"name": "api", "zone": "eu", "port": 443}.
package main

import (
	"context"
	"crypto/tls"
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

	etcdmirror "github.com/listwatch/mirror/adapters/etcd"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "etcd-mirror:", err)
		os.Exit(1)
	}
}

// Service is the value stored under each key.
type Service struct {
	Name string `json:"name"`
	Zone string `json:"zone"`
	Port int    `json:"port"`
}

// object is what the mirror holds per key: the key, the decoded Service and
// etcd's revisions.
type object = etcdmirror.Object[Service]

type config struct {
	endpoints         string
	prefix            string
	cacert, cert, key string
	seed, changes     int
	duration          time.Duration
	quiet             bool
}

func parseFlags(args []string, out io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("etcd-mirror", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&c.endpoints, "endpoints", "", "comma-separated etcd endpoints to mirror read-only; empty starts an embedded etcd with demo data")
	fs.StringVar(&c.prefix, "prefix", "/demo/services/", "key prefix to mirror")
	fs.StringVar(&c.cacert, "cacert", "", "CA bundle to verify the servers (with --endpoints)")
	fs.StringVar(&c.cert, "cert", "", "client certificate (with --endpoints)")
	fs.StringVar(&c.key, "key", "", "client key (with --endpoints)")
	fs.IntVar(&c.seed, "seed", 5000, "demo: keys written before the mirror starts")
	fs.IntVar(&c.changes, "changes", 300, "demo: changes written while the mirror runs")
	fs.DurationVar(&c.duration, "duration", 0, "with --endpoints: stop after this long (0: until interrupted)")
	fs.BoolVar(&c.quiet, "quiet", false, "print only the summary")
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

func run(ctx context.Context, args []string, out io.Writer) error {
	cfg, err := parseFlags(args, out)
	if err != nil {
		return err
	}
	p := &printer{out: out, quiet: cfg.quiet}
	demo := cfg.endpoints == ""

	endpoints := strings.Split(cfg.endpoints, ",")
	if demo {
		srv, err := startEmbedded(ctx)
		if err != nil {
			return err
		}
		defer srv.close()
		endpoints = []string{srv.endpoint}
		p.printf("started an embedded etcd at %s (data in %s)", srv.endpoint, srv.dir)
	}
	tlsConfig, err := clientTLS(cfg)
	if err != nil {
		return err
	}
	client, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		TLS:         tlsConfig,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return fmt.Errorf("connect to etcd: %w", err)
	}
	defer client.Close()

	var d *demoWriter
	if demo {
		d = &demoWriter{client: client, prefix: cfg.prefix}
		if err := d.seed(ctx, cfg.seed); err != nil {
			return err
		}
		p.printf("seeded %d keys under %s", cfg.seed, cfg.prefix)
	}

	m := newMirror(client, cfg.prefix, p)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- m.inf.Run(runCtx) }()
	defer func() {
		cancel()
		<-done
	}()

	start := time.Now()
	if err := m.waitForSync(ctx, p); err != nil {
		return err
	}
	p.printf("synced %d keys in %v", m.inf.Len(), time.Since(start).Round(time.Millisecond))

	if demo {
		rev, err := d.run(ctx, cfg.changes, p)
		if err != nil {
			return err
		}
		if err := m.waitFor(ctx, rev); err != nil {
			return err
		}
		m.summary(p)
		return m.verify(ctx, client, cfg.prefix, p)
	}

	if cfg.duration > 0 {
		var stop context.CancelFunc
		ctx, stop = context.WithTimeout(ctx, cfg.duration)
		defer stop()
	}
	<-ctx.Done()
	m.summary(p)
	return nil
}

// clientTLS builds the client's TLS configuration from the flags, or nil.
func clientTLS(cfg config) (*tls.Config, error) {
	if cfg.cacert == "" && cfg.cert == "" && cfg.key == "" {
		return nil, nil
	}
	info := transport.TLSInfo{TrustedCAFile: cfg.cacert, CertFile: cfg.cert, KeyFile: cfg.key}
	c, err := info.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("TLS flags: %w", err)
	}
	return c, nil
}
