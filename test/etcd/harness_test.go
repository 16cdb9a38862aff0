package etcd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// cluster is a set of etcd members running in this process, each on its own
// loopback ports and data directory.
type cluster struct {
	t       testing.TB
	members []*member
}

// member is one etcd member; it can be stopped and started again from its
// data directory.
type member struct {
	name             string
	dir              string
	peerURL, cliURL  url.URL
	initialCluster   string
	initialClustered bool // started once: later starts join the existing cluster

	mu   sync.Mutex
	etcd *embed.Etcd
	stop func() // closes etcd once; (*embed.Etcd).Close panics when called twice
}

// startCluster starts n members that form one cluster, and stops them when
// the test ends.
func startCluster(t testing.TB, n int) *cluster {
	t.Helper()
	// A port found free may be taken by someone else before etcd binds
	// it; then start again on other ports.
	for attempt := 1; ; attempt++ {
		c, err := tryStartCluster(t, n)
		if err == nil {
			return c
		}
		if attempt == 3 || !errors.Is(err, syscall.EADDRINUSE) {
			require.NoError(t, err)
		}
	}
}

func tryStartCluster(t testing.TB, n int) (*cluster, error) {
	c := &cluster{t: t}
	var initial []string
	for i := range n {
		m := &member{
			name:    fmt.Sprintf("m%d", i),
			dir:     filepath.Join(t.TempDir(), fmt.Sprintf("m%d", i)),
			peerURL: freeURL(t),
			cliURL:  freeURL(t),
		}
		initial = append(initial, m.name+"="+m.peerURL.String())
		c.members = append(c.members, m)
	}
	for _, m := range c.members {
		m.initialCluster = strings.Join(initial, ",")
	}
	// Members of a new cluster wait for each other, so start them together.
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, m := range c.members {
		wg.Go(func() { errs[i] = m.start() })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, m := range c.members {
			m.close()
		}
		return nil, err
	}
	for _, m := range c.members {
		t.Cleanup(m.close)
	}
	return c, nil
}

// start starts m from its data directory and waits until it serves.
func (m *member) start() error {
	cfg := memberConfig(m.name, m.dir, m.peerURL, m.cliURL, m.initialCluster, m.initialClustered)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return err
	}
	var once sync.Once
	stop := func() { once.Do(e.Close) }
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		stop()
		return err
	case <-time.After(30 * time.Second):
		stop()
		return fmt.Errorf("etcd member %s not ready after 30s", m.name)
	}
	m.mu.Lock()
	m.etcd, m.stop, m.initialClustered = e, stop, true
	m.mu.Unlock()
	return nil
}

// memberConfig is the configuration of every member the tests start, in
// this process or in a child (see etcdproc_test.go): name, data directory
// dir, peer and client URLs, the initial cluster ("name=peerURL,..."), and
// whether the member joins a cluster that exists already (it started once
// from dir before).
func memberConfig(name, dir string, peer, cli url.URL, initialCluster string, existing bool) *embed.Config {
	cfg := embed.NewConfig()
	cfg.Name = name
	cfg.Dir = dir
	cfg.ListenPeerUrls = []url.URL{peer}
	cfg.AdvertisePeerUrls = []url.URL{peer}
	cfg.ListenClientUrls = []url.URL{cli}
	cfg.AdvertiseClientUrls = []url.URL{cli}
	cfg.ListenMetricsUrls = nil
	cfg.InitialCluster = initialCluster
	cfg.InitialClusterToken = "mirror-test"
	cfg.ClusterState = embed.ClusterStateFlagNew
	if existing {
		cfg.ClusterState = embed.ClusterStateFlagExisting
	}
	// Short election timeouts let a member notice a lost leader quickly;
	// not so short that a busy test machine loses its leader by accident.
	cfg.TickMs = 50
	cfg.ElectionMs = 500
	cfg.UnsafeNoFsync = true
	cfg.MaxTxnOps = 1024
	// Tests that turn auth on check passwords on every client and watch
	// stream; at the default cost each check takes seconds under -race.
	cfg.BcryptCost = 4 // bcrypt.MinCost
	cfg.Logger = "zap"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	return cfg
}

// close stops m if it runs.
func (m *member) close() {
	m.mu.Lock()
	stop := m.stop
	m.etcd, m.stop = nil, nil
	m.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// endpoint is m's client URL.
func (m *member) endpoint() string { return m.cliURL.String() }

// restart starts m again from its data directory after close.
func (m *member) restart(t testing.TB) {
	t.Helper()
	require.NoError(t, m.start(), "restart %s", m.name)
}

// startEtcd starts a single-member cluster.
func startEtcd(t testing.TB) *member {
	return startCluster(t, 1).members[0]
}

// newClient returns a client of the given endpoints, closed when the test
// ends.
func newClient(t testing.TB, endpoints ...string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// freeURL returns an http URL on a loopback port that was free a moment ago.
func freeURL(t testing.TB) url.URL {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return url.URL{Scheme: "http", Host: addr}
}

// proxy forwards loopback TCP connections to a target, and can play the
// two ways a member stops serving: Cut closes every connection and refuses
// new ones, as a killed member's host does; Pause keeps every connection
// open, and accepts new ones, but forwards nothing, as a member stopped
// with SIGSTOP does (its kernel still holds the connections).
type proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	cut    bool
	paused bool
	closed bool
	resume *sync.Cond // signalled when paused or closed changes
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// newProxy starts a proxy to target (host:port) and closes it when the test
// ends.
func newProxy(t testing.TB, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &proxy{ln: ln, target: target, conns: make(map[net.Conn]struct{})}
	p.resume = sync.NewCond(&p.mu)
	p.wg.Go(p.serve)
	t.Cleanup(p.close)
	return p
}

// endpoint is the proxy's URL for a client.
func (p *proxy) endpoint() string { return "http://" + p.ln.Addr().String() }

func (p *proxy) serve() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			in.Close()
			continue
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			in.Close()
			out.Close()
			continue
		}
		p.conns[in], p.conns[out] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Go(func() { p.pipe(in, out) })
		p.wg.Go(func() { p.pipe(out, in) })
	}
}

// pipe copies src to dst until either fails, then closes both. While the
// proxy is paused, what it has read waits.
func (p *proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for p.paused && !p.closed {
				p.resume.Wait()
			}
			p.mu.Unlock()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	p.mu.Lock()
	delete(p.conns, src)
	delete(p.conns, dst)
	p.mu.Unlock()
	src.Close()
	dst.Close()
}

// Cut closes every connection and refuses new ones until Resume.
func (p *proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		c.Close()
	}
}

// Pause stops forwarding bytes, in both directions and on every
// connection, new ones included, until Resume; connections stay open.
func (p *proxy) Pause() {
	p.mu.Lock()
	p.paused = true
	p.mu.Unlock()
}

// Resume accepts and forwards again.
func (p *proxy) Resume() {
	p.mu.Lock()
	p.cut, p.paused = false, false
	p.resume.Broadcast()
	p.mu.Unlock()
}

func (p *proxy) close() {
	p.ln.Close()
	p.mu.Lock()
	p.closed = true
	p.resume.Broadcast()
	p.mu.Unlock()
	p.Cut()
	p.wg.Wait()
}

// nthKey is the key numbered i under prefix, as putN names it: prefix
// and i in eight digits, so that keys sort in their numbers' order.
func nthKey(prefix string, i int) string { return fmt.Sprintf("%s%08d", prefix, i) }

// putN writes n keys nthKey(prefix, i) with value v%d in transactions of up to
// 1000 puts, and returns the revision of the last one.
func putN(t testing.TB, c *clientv3.Client, prefix string, n int) int64 {
	t.Helper()
	ctx := context.Background()
	var rev int64
	ops := make([]clientv3.Op, 0, 1000)
	for i := 0; i < n; i += cap(ops) {
		ops = ops[:0]
		for j := i; j < min(n, i+cap(ops)); j++ {
			ops = append(ops, clientv3.OpPut(nthKey(prefix, j), fmt.Sprintf("v%d", j)))
		}
		resp, err := c.Txn(ctx).Then(ops...).Commit()
		require.NoError(t, err)
		rev = resp.Header.Revision
	}
	return rev
}
