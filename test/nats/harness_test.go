package nats_test

// A real nats-server, embedded in the test process, with JetStream on a
// temporary directory, on a loopback port; and a TCP proxy in front of it
// that a test can cut, so that the mirror loses its server while a writer
// keeps it.

import (
	"context"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// testServer is an embedded nats-server that a test can stop and start
// again on the same port and store.
type testServer struct {
	t    testing.TB
	opts server.Options
	srv  *server.Server
}

// startServer starts a server with JetStream on a fresh directory and a
// random loopback port. It is shut down when the test ends.
func startServer(t testing.TB) *testServer {
	t.Helper()
	return startServerOpts(t, server.Options{})
}

// startServerOpts is startServer with opts (accounts, users) as a base.
func startServerOpts(t testing.TB, opts server.Options) *testServer {
	t.Helper()
	opts.Host = "127.0.0.1"
	opts.Port = -1
	opts.JetStream = true
	opts.StoreDir = t.TempDir()
	opts.NoLog, opts.NoSigs = true, true
	s := &testServer{t: t, opts: opts}
	s.start()
	s.opts.Port = s.srv.Addr().(*net.TCPAddr).Port // a restart keeps it
	t.Cleanup(s.stop)
	return s
}

func (s *testServer) start() {
	s.t.Helper()
	opts := s.opts
	srv, err := server.NewServer(&opts)
	require.NoError(s.t, err)
	srv.Start()
	require.True(s.t, srv.ReadyForConnections(10*time.Second), "nats-server not ready")
	s.srv = srv
}

// stop shuts the server down and waits until it has; it may be called
// again.
func (s *testServer) stop() {
	if s.srv != nil {
		s.srv.Shutdown()
		s.srv.WaitForShutdown()
		s.srv = nil
	}
}

// restart stops the server and starts it again on its port and store.
func (s *testServer) restart() {
	s.t.Helper()
	s.stop()
	s.start()
}

func (s *testServer) url() string { return "nats://127.0.0.1:" + strconv.Itoa(s.opts.Port) }

// connect connects to url, reconnecting for ever every few milliseconds,
// and closes the connection when the test ends.
func connect(t testing.TB, url string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	opts = append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(20 * time.Millisecond),
		nats.ReconnectJitter(0, 0), nats.Timeout(2 * time.Second),
		// The client prints asynchronous errors by default.
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})}, opts...)
	nc, err := nats.Connect(url, opts...)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return nc, js
}

// newBucket creates a bucket on js.
func newBucket(t testing.TB, js jetstream.JetStream, cfg jetstream.KeyValueConfig) jetstream.KeyValue {
	t.Helper()
	if cfg.Bucket == "" {
		cfg.Bucket = "mirror"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.CreateKeyValue(ctx, cfg)
	require.NoError(t, err)
	return kv
}

// proxy forwards TCP connections to a server until cut: then it closes
// every connection and refuses new ones until restored.
type proxy struct {
	t      testing.TB
	ln     net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// startProxy forwards a loopback port to target (host:port); it stops when
// the test ends.
func startProxy(t testing.TB, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &proxy{t: t, ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		_ = ln.Close()
		p.setCut(true)
		p.wg.Wait()
	})
	return p
}

func (p *proxy) url() string { return "nats://" + p.ln.Addr().String() }

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.wg.Add(2)
		p.mu.Unlock()
		go p.pipe(c, up)
		go p.pipe(up, c)
	}
}

func (p *proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	_, _ = io.Copy(dst, src)
	_ = dst.Close()
	_ = src.Close()
}

// setCut cuts the proxy (closing every connection through it) or restores
// it.
func (p *proxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for c := range p.conns {
			_ = c.Close()
		}
		clear(p.conns)
	}
}
