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
// Halfway through, the demo cuts the mirror off from etcd (it reads through
// a proxy the program owns), deletes and re-creates keys and compacts
// etcd's history meanwhile, so the mirror must list the prefix again: the
// keys it lost are reported as deletions whose final state is unknown, and
// a key deleted and created again as a deletion and then an addition.
//
// With --endpoints it mirrors a real cluster's prefix, read-only, until
// interrupted or for --duration, which includes the initial sync:
//
//	go run ./examples/etcd-mirror --endpoints https://10.0.0.1:2379 \
//	    --cacert ca.pem --cert client.pem --key client-key.pem --prefix /services/
//
// With --metrics-addr it serves the mirror's metrics for Prometheus (see
// adapters/mirrorprom) at /metrics on that address:
//
//	go run ./examples/etcd-mirror --metrics-addr localhost:9090
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

	"github.com/listwatch/mirror"
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
	metricsAddr       string
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
	fs.DurationVar(&c.duration, "duration", 0, "stop after this long, initial sync included (0: until interrupted, or the demo's end)")
	fs.BoolVar(&c.quiet, "quiet", false, "print only the summary")
	fs.StringVar(&c.metricsAddr, "metrics-addr", "", `address to serve Prometheus metrics on at /metrics, such as ":9090" (default: none)`)
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
	p := &printer{out: out, quiet: cfg.quiet}
	var metrics mirror.Metrics // nil: none
	if cfg.metricsAddr != "" {
		m, stop, err := serveMetrics(cfg.metricsAddr, p)
		if err != nil {
			return err
		}
		defer stop() // once the mirror has stopped
		metrics = m
	}
	if cfg.endpoints == "" {
		return runDemo(ctx, cfg, metrics, p)
	}
	return runCluster(ctx, cfg, metrics, p)
}

// runCluster mirrors a real cluster's prefix until ctx ends.
func runCluster(ctx context.Context, cfg config, metrics mirror.Metrics, p *printer) error {
	tlsConfig, err := clientTLS(cfg)
	if err != nil {
		return err
	}
	client, err := newClient(strings.Split(cfg.endpoints, ","), tlsConfig)
	if err != nil {
		return err
	}
	defer client.Close()

	m := newMirror(client, cfg.prefix, metrics, p)
	defer m.start(ctx)()
	start := time.Now()
	if err := m.waitForSync(ctx, p); err != nil {
		return err
	}
	p.printf("synced %s in %v", plural(m.inf.Len(), "key"), time.Since(start).Round(time.Millisecond))
	<-ctx.Done()
	m.summary(p)
	return nil
}

// runDemo starts an etcd of its own, writes demo data and mirrors it.
// When ctx ends (Ctrl-C, --duration) it stops, prints the summary so far
// and reports success: nothing went wrong.
func runDemo(ctx context.Context, cfg config, metrics mirror.Metrics, p *printer) error {
	srv, err := startEmbedded(ctx)
	if err != nil {
		return interrupted(ctx, err, p)
	}
	defer srv.close()
	p.printf("started an embedded etcd at %s (data in %s)", srv.endpoint, srv.dir)
	// The mirror reads through a proxy, so that the demo can cut it off.
	cut, err := startProxy(srv.host)
	if err != nil {
		return err
	}
	defer cut.close()
	writer, err := newClient([]string{srv.endpoint}, nil)
	if err != nil {
		return err
	}
	defer writer.Close()
	client, err := newClient([]string{cut.endpoint()}, nil)
	if err != nil {
		return err
	}
	defer client.Close()

	d := &demoWriter{client: writer, prefix: cfg.prefix}
	if err := d.seed(ctx, cfg.seed); err != nil {
		return interrupted(ctx, err, p)
	}
	p.printf("seeded %s under %s", plural(cfg.seed, "key"), cfg.prefix)

	m := newMirror(client, cfg.prefix, metrics, p)
	defer m.start(ctx)()
	if err := m.demo(ctx, d, cfg.changes, cut, p); err != nil {
		if ctx.Err() != nil {
			p.printf("interrupted")
			m.summary(p)
			return nil
		}
		return err
	}
	return nil
}

// demo waits for the initial sync, writes half the demo's changes, cuts
// the mirror off for an outage, writes the other half, waits until the
// mirror has them all, prints the summary and checks the mirror against
// etcd.
func (m *mirrorState) demo(ctx context.Context, d *demoWriter, changes int, cut *proxy, p *printer) error {
	start := time.Now()
	if err := m.waitForSync(ctx, p); err != nil {
		return err
	}
	p.printf("synced %s in %v", plural(m.inf.Len(), "key"), time.Since(start).Round(time.Millisecond))
	for _, step := range []func() (int64, error){
		func() (int64, error) { return d.run(ctx, changes/2, p) },
		// Once the mirror has caught up, so that what it learns from
		// the relist is what happened while it was cut off.
		func() (int64, error) { return d.outage(ctx, cut, p) },
		func() (int64, error) { return d.run(ctx, changes-changes/2, p) },
	} {
		rev, err := step()
		if err != nil {
			return err
		}
		if err := m.waitFor(ctx, rev); err != nil {
			return err
		}
	}
	m.summary(p)
	return m.verify(ctx, d.client, d.prefix, p)
}

// interrupted returns nil, saying so, if err came with the end of ctx,
// and err otherwise.
func interrupted(ctx context.Context, err error, p *printer) error {
	if ctx.Err() != nil {
		p.printf("interrupted")
		return nil
	}
	return err
}

// newClient connects to etcd. It does not wait for a connection: the
// mirror reports and retries what fails.
func newClient(endpoints []string, tlsConfig *tls.Config) (*clientv3.Client, error) {
	client, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		TLS:         tlsConfig,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("connect to etcd: %w", err)
	}
	return client, nil
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
