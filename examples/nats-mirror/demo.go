package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"time"

	"github.com/listwatch/mirror/examples/internal/cli"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// embedded is a nats-server run by the demo, on loopback, with JetStream
// in a temporary directory.
type embedded struct {
	opts server.Options
	srv  *server.Server
}

// startEmbedded starts a server on a free loopback port.
func startEmbedded(dir string) (*embedded, error) {
	e := &embedded{opts: server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir,
		NoLog: true, NoSigs: true,
	}}
	if err := e.start(); err != nil {
		return nil, err
	}
	e.opts.Port = e.srv.Addr().(*net.TCPAddr).Port // a restart keeps it
	return e, nil
}

func (e *embedded) start() error {
	opts := e.opts
	srv, err := server.NewServer(&opts)
	if err != nil {
		return err
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return fmt.Errorf("nats-server not ready in 10s")
	}
	e.srv = srv
	return nil
}

func (e *embedded) stop() {
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
}

func (e *embedded) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", e.opts.Port) }

// runDemo runs the demo against an embedded server: seed, mirror, change,
// restart, change again, check.
func runDemo(ctx context.Context, cfg config, p *cli.Printer) error {
	dir, err := os.MkdirTemp("", "nats-mirror-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	srv, err := startEmbedded(dir)
	if err != nil {
		return err
	}
	defer func() { srv.stop() }()
	p.Printf("embedded nats-server at %s", srv.url())

	connect := func(name string) (*nats.Conn, jetstream.JetStream, error) {
		nc, err := nats.Connect(srv.url(), nats.Name(name), nats.MaxReconnects(-1),
			nats.ReconnectWait(50*time.Millisecond), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
		if err != nil {
			return nil, nil, err
		}
		js, err := jetstream.New(nc)
		return nc, js, err
	}
	wnc, wjs, err := connect("nats-mirror demo writer")
	if err != nil {
		return err
	}
	defer wnc.Close()
	kv, err := wjs.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: cfg.bucket, History: 5})
	if err != nil {
		return err
	}
	mnc, mjs, err := connect("nats-mirror")
	if err != nil {
		return err
	}
	defer mnc.Close()
	w := &writer{kv: kv, rng: rand.New(rand.NewPCG(1, 2))}
	for i := range cfg.seed {
		if err := w.put(ctx, fmt.Sprintf("svc.%05d", i), i); err != nil {
			return cfg.Finish(ctx, err, p, func() { p.Summary("summary: nothing mirrored") })
		}
	}
	m := startMirror(ctx, mjs, cfg, p)
	defer m.stop()
	return cfg.Finish(ctx, demo(ctx, cfg, srv, w, m), p, m.summary)
}

// demo waits for the first sync, makes half the changes, restarts the
// server, makes the other half, waits until the mirror has them and
// checks it against the bucket.
func demo(ctx context.Context, cfg config, srv *embedded, w *writer, m *mirrorRun) error {
	if err := m.waitForSync(ctx, cfg); err != nil {
		return err
	}
	p, kv := m.p, w.kv

	half := cfg.changes / 2
	if err := w.changes(ctx, cfg.seed, half); err != nil {
		return err
	}
	// An outage: the server stops and starts again from its store, and
	// the mirror resumes where it was.
	p.Printf("restarting the server")
	srv.stop()
	if err := srv.start(); err != nil {
		return err
	}
	if err := w.changes(ctx, cfg.seed, cfg.changes-half); err != nil {
		return err
	}
	// A value that does not decode: reported, and kept out of the mirror.
	if _, err := w.retry(ctx, func() (uint64, error) { return kv.PutString(ctx, "svc.bad", "not json") }); err != nil {
		return err
	}
	// The last write: once the mirror has it, it has everything before.
	if err := w.put(ctx, "svc.last", -1); err != nil {
		return err
	}
	for {
		if o, ok := m.inf.GetByKey("svc.last"); ok && o.Value.Port == -1 {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := check(ctx, kv, m); err != nil {
		return err
	}
	m.summary()
	return nil
}

// writer makes the demo's changes, retrying each while the server
// restarts.
type writer struct {
	kv  jetstream.KeyValue
	rng *rand.Rand
}

func (w *writer) retry(ctx context.Context, op func() (uint64, error)) (uint64, error) {
	for {
		rev, err := op()
		if err == nil || ctx.Err() != nil {
			return rev, err
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (w *writer) put(ctx context.Context, key string, port int) error {
	v, _ := json.Marshal(Service{Name: key, Zone: [...]string{"eu", "us", "ap"}[w.rng.IntN(3)], Port: port})
	_, err := w.retry(ctx, func() (uint64, error) { return w.kv.Put(ctx, key, v) })
	return err
}

// changes makes n random changes to the keys svc.00000 to svc.<keys-1>.
func (w *writer) changes(ctx context.Context, keys, n int) error {
	for range n {
		key := fmt.Sprintf("svc.%05d", w.rng.IntN(max(keys, 1)))
		var err error
		switch r := w.rng.IntN(10); {
		case r < 6:
			err = w.put(ctx, key, 1000+w.rng.IntN(9000))
		case r < 8:
			_, err = w.retry(ctx, func() (uint64, error) { return 0, w.kv.Delete(ctx, key) })
		case r < 9:
			_, err = w.retry(ctx, func() (uint64, error) { return 0, w.kv.Purge(ctx, key) })
		default: // deleted and created again
			if _, err = w.retry(ctx, func() (uint64, error) { return 0, w.kv.Delete(ctx, key) }); err == nil {
				err = w.put(ctx, key, 1)
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// check compares the mirror with the bucket, key by key.
func check(ctx context.Context, kv jetstream.KeyValue, m *mirrorRun) error {
	want := map[string]string{}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return err
	}
	for k := range keys.Keys() {
		e, err := kv.Get(ctx, k)
		if err != nil {
			return err
		}
		if s, err := decodeService(k, e.Value()); err == nil {
			want[k] = s.Name
		}
	}
	got := map[string]string{}
	for k, o := range m.inf.All() {
		got[k] = o.Value.Name
	}
	m.mu.Lock()
	told := maps.Clone(m.seen)
	m.mu.Unlock()
	if !maps.Equal(want, got) || !maps.Equal(want, told) {
		return fmt.Errorf("the mirror (%d keys, handler told of %d) differs from the bucket (%d keys)", len(got), len(told), len(want))
	}
	m.p.Printf("check: the mirror and its handler match the bucket (%d keys)", len(want))
	return nil
}
