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
// A cluster with password authentication takes --user and --password, or,
// as etcdctl does, --user name:password; their defaults come from
// ETCDCTL_USER and ETCDCTL_PASSWORD, which keep the password off the
// command line.
//
// It behaves as every example does (see examples/internal/cli): --help
// exits 0 and a bad flag 2; the first sync must complete within
// --sync-timeout (30s by default), or the program says why (etcd
// unreachable, credentials refused) and exits 1, as for any other
// failure; Ctrl-C or SIGTERM is a normal stop, in either mode and at any
// time: the program prints the summary so far and exits 0; --quiet prints
// only the summary and fatal errors.
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
	"strings"
	"time"

	"github.com/listwatch/mirror"
	etcdmirror "github.com/listwatch/mirror/adapters/etcd"
	"github.com/listwatch/mirror/examples/internal/cli"
	"github.com/listwatch/mirror/examples/internal/embedetcd"
	"github.com/listwatch/mirror/examples/internal/metricsrv"
	"github.com/listwatch/mirror/source"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func main() { cli.Main("etcd-mirror", run) }

// probeTimeout bounds the read that says why authentication failed. The
// mirror itself uses the adapter's defaults: an endpoint it cannot reach
// is reported within seconds, with the cause.
const probeTimeout = time.Second

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
	user, password    string
	seed, changes     int
	metricsAddr       string
	cli.Flags         // --quiet, --sync-timeout, --duration
}

// minSeed is the fewest keys the demo seeds: its outage deletes two of
// them and re-creates a third.
const minSeed = 3

func parseFlags(args []string, out io.Writer) (config, error) {
	var c config
	fs := cli.NewFlagSet("etcd-mirror", "until interrupted, or the demo's end", &c.Flags)
	fs.StringVar(&c.endpoints, "endpoints", "", "comma-separated etcd endpoints to mirror read-only; empty starts an embedded etcd with demo data")
	fs.StringVar(&c.prefix, "prefix", "/demo/services/", "key prefix to mirror")
	fs.StringVar(&c.cacert, "cacert", "", "CA bundle to verify the servers (with --endpoints)")
	fs.StringVar(&c.cert, "cert", "", "client certificate (with --endpoints)")
	fs.StringVar(&c.key, "key", "", "client key (with --endpoints)")
	fs.StringVar(&c.user, "user", "", "user name, or name:password, for a cluster with password authentication (with --endpoints; default $ETCDCTL_USER)")
	fs.StringVar(&c.password, "password", "", "password of --user (with --endpoints; default $ETCDCTL_PASSWORD, which keeps it off the command line)")
	fs.IntVar(&c.seed, "seed", 5000, fmt.Sprintf("demo: keys written before the mirror starts (at least %d)", minSeed))
	fs.IntVar(&c.changes, "changes", 300, "demo: changes written while the mirror runs")
	fs.StringVar(&c.metricsAddr, "metrics-addr", "", `address to serve Prometheus metrics on at /metrics, such as ":9090" (default: none)`)
	if err := cli.Parse(fs, args, out); err != nil {
		return c, err
	}
	if c.prefix == "" {
		return c, cli.Usagef("--prefix must not be empty")
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if c.endpoints == "" {
		switch {
		case set["user"] || set["password"]:
			return c, cli.Usagef("--user and --password need --endpoints: the demo's etcd has no users")
		case c.seed < minSeed:
			return c, cli.Usagef("--seed %d: the demo needs at least %d keys (its outage deletes two and re-creates a third)", c.seed, minSeed)
		case c.changes < 0:
			return c, cli.Usagef("--changes %d: must not be negative", c.changes)
		}
		return c, nil
	}
	if !set["user"] {
		c.user = os.Getenv("ETCDCTL_USER")
	}
	if !set["password"] {
		c.password = os.Getenv("ETCDCTL_PASSWORD")
	}
	if name, pass, ok := strings.Cut(c.user, ":"); ok && c.password == "" {
		c.user, c.password = name, pass
	}
	switch {
	case c.user == "" && c.password != "":
		return c, cli.Usagef("--password needs --user")
	case c.user != "" && c.password == "":
		return c, cli.Usagef("--user %q needs a password: --password, $ETCDCTL_PASSWORD or --user name:password", c.user)
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
	warnAboutPrefix(cfg.prefix, p)
	var metrics mirror.Metrics // nil: none
	if cfg.metricsAddr != "" {
		m, stop, err := metricsrv.Serve(cfg.metricsAddr, p)
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

// warnAboutPrefix warns about a prefix that does not end in "/": etcd
// prefixes are byte prefixes, so "/app/config" takes in
// "/app/configuration/x" too, which is seldom what was meant.
func warnAboutPrefix(prefix string, p *cli.Printer) {
	if strings.HasSuffix(prefix, "/") {
		return
	}
	p.Printf("warning: --prefix %q does not end in \"/\", so it also mirrors keys such as %q and %q; for only the keys under it, use --prefix %q",
		prefix, prefix+"-old", prefix+"uration/x", prefix+"/")
}

// runCluster mirrors a real cluster's prefix until ctx ends.
func runCluster(ctx context.Context, cfg config, metrics mirror.Metrics, p *cli.Printer) error {
	tlsConfig, err := clientTLS(cfg)
	if err != nil {
		return err
	}
	endpoints := strings.Split(cfg.endpoints, ",")
	client, err := newClient(ctx, endpoints, tlsConfig, cfg.user, cfg.password, cfg.SyncTimeout)
	if err != nil {
		if ctx.Err() == nil {
			err = whyNoAuth(ctx, err, cfg, endpoints, tlsConfig)
		}
		return cfg.Finish(ctx, err, p, nothingMirrored(p))
	}
	defer client.Close()

	m := newMirror(client, cfg, metrics, p)
	defer m.start(ctx)()
	err = m.firstSync(ctx, cfg, p)
	if err == nil {
		<-ctx.Done()
	}
	return cfg.Finish(ctx, err, p, m.summary)
}

// runDemo starts an etcd of its own, writes demo data and mirrors it.
// When ctx ends (Ctrl-C, --duration) it stops, prints the summary so far
// and reports success: nothing went wrong.
func runDemo(ctx context.Context, cfg config, metrics mirror.Metrics, p *cli.Printer) error {
	srv, err := embedetcd.Start(ctx, "etcd-mirror")
	if err != nil {
		return cfg.Finish(ctx, err, p, nothingMirrored(p))
	}
	defer srv.Close()
	p.Printf("started an embedded etcd at %s (data in %s)", srv.Endpoint, srv.Dir)
	// The mirror reads through a proxy, so that the demo can cut it off.
	cut, err := startProxy(srv.Host)
	if err != nil {
		return err
	}
	defer cut.close()
	writer, err := newClient(ctx, []string{srv.Endpoint}, nil, "", "", 0)
	if err != nil {
		return err
	}
	defer writer.Close()
	client, err := newClient(ctx, []string{cut.endpoint()}, nil, "", "", 0)
	if err != nil {
		return err
	}
	defer client.Close()

	m := newMirror(client, cfg, metrics, p)
	d := &demoWriter{client: writer, prefix: cfg.prefix}
	if err := d.seed(ctx, cfg.seed); err != nil {
		return cfg.Finish(ctx, err, p, m.summary)
	}
	p.Printf("seeded %s under %s", plural(cfg.seed, "key"), cfg.prefix)
	defer m.start(ctx)()
	return cfg.Finish(ctx, m.demo(ctx, d, cfg, cut, p), p, m.summary)
}

// demo waits for the initial sync, writes half the demo's changes, cuts
// the mirror off for an outage, writes the other half, waits until the
// mirror has them all, prints the summary and checks the mirror against
// etcd.
func (m *mirrorState) demo(ctx context.Context, d *demoWriter, cfg config, cut *proxy, p *cli.Printer) error {
	if err := m.firstSync(ctx, cfg, p); err != nil {
		return err
	}
	changes := cfg.changes
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
	m.summary()
	return m.verify(ctx, d.client, d.prefix, p)
}

// nothingMirrored is the summary of a run stopped before its mirror was
// made.
func nothingMirrored(p *cli.Printer) func() {
	return func() { p.Summary("summary: nothing mirrored") }
}

// newClient connects to etcd, authenticating as user if it is not empty.
// It does not wait for a connection, the mirror reports and retries what
// fails, but authentication needs one: it waits up to authTimeout (no
// bound if 0) or until ctx ends.
func newClient(ctx context.Context, endpoints []string, tlsConfig *tls.Config, user, password string, authTimeout time.Duration) (*clientv3.Client, error) {
	cfg := clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: authTimeout,
		TLS:         tlsConfig,
		Username:    user,
		Password:    password,
		Logger:      zap.NewNop(),
	}
	if user != "" {
		// So that an interruption ends the wait for authentication.
		cfg.Context = ctx
	}
	client, err := clientv3.New(cfg)
	if err != nil {
		if user != "" {
			return nil, fmt.Errorf("connect to etcd as %q: %w", user, err)
		}
		return nil, fmt.Errorf("connect to etcd: %w", err)
	}
	return client, nil
}

// whyNoAuth returns err, a failure to authenticate as cfg.user, and, if
// etcd did not answer within --sync-timeout, why, as the mirror tells it:
// it reads the prefix without credentials, which needs no answer to start.
func whyNoAuth(ctx context.Context, err error, cfg config, endpoints []string, tlsConfig *tls.Config) error {
	if !errors.Is(err, context.DeadlineExceeded) {
		return err // an answer: wrong credentials, say
	}
	client, cerr := newClient(ctx, endpoints, tlsConfig, "", "", 0)
	if cerr != nil {
		return err
	}
	defer client.Close()
	lw := etcdmirror.New(client, cfg.prefix, etcdmirror.Options{RequestTimeout: probeTimeout})
	_, why := lw.List(ctx, source.ListOptions{Limit: 1})
	if !errors.Is(why, source.ErrUnavailable) {
		why = errors.New("etcd answers a read without credentials")
	}
	return fmt.Errorf("connect to etcd as %q: not authenticated within --sync-timeout %v: %w", cfg.user, cfg.SyncTimeout, why)
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
