package etcd

// etcd's gRPC proxy in front of a cluster.
//
// `etcd grpc-proxy start` serves etcd's client API and forwards it to a
// cluster through one client of its own: ranges are forwarded (and
// serializable ones cached), and watches of the same range from the same
// revision on are coalesced into one watch on the cluster, whose events
// the proxy copies to each client's watcher. startGRPCProxyOf wires the
// same servers, from go.etcd.io/etcd/server/v3/proxy/grpcproxy, on a
// loopback port of this process; startGRPCProxyProc runs them in a child
// process of their own (this test binary again, as for members), which a
// test can pause and a benchmark can measure apart from the members.
//
// What differs from a member, as the mirror sees it (grpcproxy v3.7.3):
//   - RangeStream is not implemented: lists fall back to Range in pages.
//   - Progress requests on a watch stream are dropped, unanswered. The
//     proxy's own watch on the cluster asks for etcd's periodic progress
//     notifications, and passes them on to watches that asked for them,
//     as the mirror's do: through a proxy, a quiet prefix is told apart
//     from a silent member only if the members send those at least once
//     per Options.ProgressInterval (--watch-progress-notify-interval; 10
//     minutes by default).

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/proxy/grpcproxy"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// proxyChildEnv holds a child proxy's configuration, as JSON.
const proxyChildEnv = "MIRROR_TEST_ETCD_PROXY"

// proxyConfig is what a proxy needs: the address to serve on and the
// cluster's client URLs.
type proxyConfig struct {
	Addr      string
	Endpoints []string
}

// grpcProxy is a running gRPC proxy.
type grpcProxy struct {
	srv    *grpc.Server
	client *clientv3.Client
	addr   string
	served chan struct{}
}

// serveGRPCProxy starts a gRPC proxy of endpoints on l. Its client to the
// cluster pings each member every second and drops a connection that
// does not answer within a second, so that the proxy's watches move to
// another member when theirs stops answering (`etcd grpc-proxy start
// --dial-keepalive-time 1s --dial-keepalive-timeout 1s`).
func serveGRPCProxy(l net.Listener, endpoints []string) (*grpcProxy, error) {
	c, err := clientv3.New(clientv3.Config{
		Endpoints:            endpoints,
		DialTimeout:          5 * time.Second,
		DialKeepAliveTime:    time.Second,
		DialKeepAliveTimeout: time.Second,
		Logger:               zap.NewNop(),
	})
	if err != nil {
		return nil, err
	}
	kvp, _ := grpcproxy.NewKvProxy(c)
	watchp, _ := grpcproxy.NewWatchProxy(c.Ctx(), zap.NewNop(), c)
	leasep, _ := grpcproxy.NewLeaseProxy(c.Ctx(), c)
	srv := grpc.NewServer(grpc.MaxConcurrentStreams(math.MaxUint32))
	pb.RegisterKVServer(srv, kvp)
	pb.RegisterWatchServer(srv, watchp)
	pb.RegisterLeaseServer(srv, leasep)
	pb.RegisterMaintenanceServer(srv, grpcproxy.NewMaintenanceProxy(c))
	p := &grpcProxy{srv: srv, client: c, addr: l.Addr().String(), served: make(chan struct{})}
	go func() {
		defer close(p.served)
		_ = srv.Serve(l)
	}()
	return p, nil
}

// stop stops serving, closes the proxy's client and waits until the
// server has returned.
func (p *grpcProxy) stop() {
	p.srv.Stop()
	_ = p.client.Close()
	<-p.served
}

// Endpoint returns the proxy's client URL.
func (p *grpcProxy) Endpoint() string { return "http://" + p.addr }

// startGRPCProxyOf starts a gRPC proxy of endpoints in this process, on a
// loopback port, stopped when the test ends.
func startGRPCProxyOf(t testing.TB, endpoints ...string) *grpcProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p, err := serveGRPCProxy(l, endpoints)
	require.NoError(t, err)
	t.Cleanup(p.stop)
	return p
}

// runChildProxy runs a proxy as configured by raw, a proxyConfig in JSON,
// until SIGTERM or the end of its standard input, and returns the
// process's exit code.
func runChildProxy(raw string) int {
	var c proxyConfig
	if err := json.Unmarshal([]byte(raw), &c); err != nil {
		fmt.Fprintln(os.Stderr, "etcd proxy:", err)
		return 1
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	l, err := net.Listen("tcp", c.Addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcd proxy:", err)
		return 1
	}
	p, err := serveGRPCProxy(l, c.Endpoints)
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcd proxy:", err)
		return 1
	}
	defer p.stop()
	fmt.Println(readyLine)
	parentGone := make(chan struct{})
	go func() {
		_, _ = bufio.NewReader(os.Stdin).WriteTo(discard{})
		close(parentGone)
	}()
	select {
	case <-stop:
	case <-parentGone:
	}
	return 0
}

type discard struct{}

func (discard) Write(b []byte) (int, error) { return len(b), nil }

// procProxy is a gRPC proxy in a child process.
type procProxy struct {
	addr string
	proc *childProc
}

// Endpoint returns the proxy's client URL.
func (p *procProxy) Endpoint() string { return "http://" + p.addr }

// PID returns the child's process ID.
func (p *procProxy) PID() int { return p.proc.cmd.Process.Pid }

// Pause stops the proxy's process (SIGSTOP): its connections stay open
// and it answers nothing. Resume continues it.
func (p *procProxy) Pause() error { return p.signal(syscall.SIGSTOP, true) }

// Resume continues the proxy's process after Pause.
func (p *procProxy) Resume() error { return p.signal(syscall.SIGCONT, false) }

func (p *procProxy) signal(sig syscall.Signal, paused bool) error {
	if err := p.proc.cmd.Process.Signal(sig); err != nil {
		return err
	}
	p.proc.paused = paused
	return waitStopped(p.PID(), paused)
}

// startGRPCProxyProc starts a gRPC proxy of endpoints in a child process,
// on a loopback port, killed when the test ends.
func startGRPCProxyProc(t testing.TB, endpoints ...string) *procProxy {
	t.Helper()
	u := freeURL(t)
	cfg, err := json.Marshal(proxyConfig{Addr: u.Host, Endpoints: endpoints})
	require.NoError(t, err)
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), proxyChildEnv+"="+string(cfg))
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	p := &childProc{cmd: cmd, stdin: stdin, stderr: &lockedBuffer{}, exited: make(chan struct{})}
	cmd.Stderr = p.stderr
	require.NoError(t, cmd.Start())
	line, err := bufio.NewReader(stdout).ReadString('\n')
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = stdin.Close()
		<-p.exited
	})
	require.NoError(t, err, "proxy's stderr: %s", p.stderr.String())
	require.Equal(t, readyLine, strings.TrimSpace(line))
	return &procProxy{addr: u.Host, proc: p}
}
