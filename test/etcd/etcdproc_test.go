package etcd

// etcd members in child processes.
//
// The tests of this package run etcd in their own process (harness_test.go),
// which is quick to start and easy to debug. The benchmarks cannot: their
// client-side CPU time, allocations and heap must be the mirror's own, not
// the server's. A procMember runs one etcd member in a child process, on
// loopback ports and a data directory of its own, and lets a test or a
// benchmark stop it (SIGTERM), kill it (SIGKILL), pause it (SIGSTOP), resume
// it (SIGCONT) and start it again from its data directory, the faults a real
// member meets.
//
// The child is this test binary run again: TestMain finds childEnv set to
// the member's configuration and runs an embedded member (with
// memberConfig, as in-process members are configured) instead of the tests.
// It prints readyLine once the member serves and runs until SIGTERM, or
// until its standard input, a pipe the parent holds, closes: a child never
// outlives the test process that started it, even one that crashed.
//
//	cl := startProcCluster(b, 3)       // or startEtcdProc(b) for one member
//	c := newClient(b, cl.endpoints()...)
//	require.NoError(b, cl.members[0].Pause())
//	...
//	require.NoError(b, cl.members[0].Resume())
//
// Members still running when the test ends are killed.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/server/v3/embed"
)

const (
	// childEnv holds a child member's configuration, as JSON.
	childEnv = "MIRROR_TEST_ETCD_MEMBER"
	// readyLine is what a child prints once its member serves.
	readyLine = "etcd member ready"
	// procStartTimeout bounds the start of a member, and procStopTimeout
	// the wait for a member to exit after SIGTERM.
	procStartTimeout = 30 * time.Second
	procStopTimeout  = 30 * time.Second
)

func TestMain(m *testing.M) {
	if cfg := os.Getenv(childEnv); cfg != "" {
		os.Exit(runChildMember(cfg))
	}
	if cfg := os.Getenv(proxyChildEnv); cfg != "" {
		os.Exit(runChildProxy(cfg))
	}
	if cfg := os.Getenv(replicaEnv); cfg != "" {
		os.Exit(runReplica(cfg))
	}
	code := m.Run()
	stopBenchEtcd()
	os.Exit(code)
}

// childConfig is what a child needs to run its member: memberConfig's
// arguments.
type childConfig struct {
	Name, Dir, PeerURL, ClientURL, InitialCluster string
	Existing                                      bool
	// ProgressNotify, if positive, is the member's
	// WatchProgressNotifyInterval (a process-wide setting in etcd).
	ProgressNotify time.Duration
}

// runChildMember runs one member as configured by raw, a childConfig in
// JSON, and returns the process's exit code: 0 after SIGTERM, SIGINT or
// the end of standard input, 1 if the member failed.
func runChildMember(raw string) int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "etcd member:", err)
		return 1
	}
	var c childConfig
	if err := json.Unmarshal([]byte(raw), &c); err != nil {
		return fail(err)
	}
	peer, err := url.Parse(c.PeerURL)
	if err != nil {
		return fail(err)
	}
	cli, err := url.Parse(c.ClientURL)
	if err != nil {
		return fail(err)
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	cfg := memberConfig(c.Name, c.Dir, *peer, *cli, c.InitialCluster, c.Existing)
	cfg.WatchProgressNotifyInterval = c.ProgressNotify
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fail(err)
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		return fail(err)
	case <-stop:
		return 0
	}
	fmt.Println(readyLine)
	parentGone := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(parentGone)
	}()
	select {
	case <-stop:
	case <-parentGone:
	case err := <-e.Err():
		return fail(err)
	}
	return 0
}

// procMember is one etcd member running in a child process. Its methods
// are safe for concurrent use.
type procMember struct {
	name            string
	dir             string
	peerURL, cliURL url.URL
	initialCluster  string
	progressNotify  time.Duration // see childConfig.ProgressNotify

	mu      sync.Mutex
	started bool // started once: later starts join the existing cluster
	proc    *childProc
}

// childProc is one run of a member's child process.
type childProc struct {
	cmd    *exec.Cmd
	stdin  io.Closer
	stderr *lockedBuffer
	exited chan struct{} // closed once the process has exited and been reaped
	err    error         // cmd.Wait's result, set before exited is closed
	paused bool
}

// procCluster is a set of members in child processes that form one
// cluster.
type procCluster struct {
	members []*procMember
}

// endpoints returns every member's client URL.
func (c *procCluster) endpoints() []string {
	var out []string
	for _, m := range c.members {
		out = append(out, m.Endpoint())
	}
	return out
}

// startEtcdProc starts a single-member cluster in a child process.
func startEtcdProc(t testing.TB) *procMember {
	return startProcCluster(t, 1).members[0]
}

// startProcCluster starts n members, each in a child process, that form
// one cluster, and kills those still running when the test ends.
func startProcCluster(t testing.TB, n int) *procCluster {
	t.Helper()
	return startProcClusterWith(t, n, 0)
}

// startProcClusterWith is startProcCluster with members that send
// periodic watch progress notifications every progressNotify, if
// positive.
func startProcClusterWith(t testing.TB, n int, progressNotify time.Duration) *procCluster {
	t.Helper()
	// A port found free may be taken by someone else before etcd binds
	// it; then start again on other ports.
	for attempt := 1; ; attempt++ {
		c, err := tryStartProcCluster(t, n, progressNotify)
		if err == nil {
			return c
		}
		if attempt == 3 || !strings.Contains(err.Error(), "address already in use") {
			t.Fatalf("start etcd cluster of %d in child processes: %v", n, err)
		}
	}
}

func tryStartProcCluster(t testing.TB, n int, progressNotify time.Duration) (*procCluster, error) {
	c := &procCluster{}
	var initial []string
	base := t.TempDir()
	for i := range n {
		m := &procMember{
			name:           fmt.Sprintf("p%d", i),
			dir:            filepath.Join(base, fmt.Sprintf("p%d", i)),
			peerURL:        freeURL(t),
			cliURL:         freeURL(t),
			progressNotify: progressNotify,
		}
		initial = append(initial, m.name+"="+m.peerURL.String())
		c.members = append(c.members, m)
	}
	// Members of a new cluster wait for each other, so start them together.
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, m := range c.members {
		m.initialCluster = strings.Join(initial, ",")
		wg.Go(func() { errs[i] = m.start() })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, m := range c.members {
			_ = m.Kill()
		}
		return nil, err
	}
	for _, m := range c.members {
		t.Cleanup(func() { _ = m.Kill() })
	}
	return c, nil
}

// Endpoint returns m's client URL.
func (m *procMember) Endpoint() string { return m.cliURL.String() }

// PID returns the process ID of m's child, or 0 if m is not running.
func (m *procMember) PID() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc == nil {
		return 0
	}
	return m.proc.cmd.Process.Pid
}

// start starts m's child from m's data directory and waits until the
// member serves. On failure, the error holds what the child wrote to its
// standard error.
func (m *procMember) start() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc != nil {
		return fmt.Errorf("etcd member %s: already running", m.name)
	}
	cfg, err := json.Marshal(childConfig{
		Name: m.name, Dir: m.dir, PeerURL: m.peerURL.String(), ClientURL: m.cliURL.String(),
		InitialCluster: m.initialCluster, Existing: m.started, ProgressNotify: m.progressNotify,
	})
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+string(cfg))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	p := &childProc{cmd: cmd, stdin: stdin, stderr: &lockedBuffer{}, exited: make(chan struct{})}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("etcd member %s: %w", m.name, err)
	}
	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err == nil && strings.TrimSpace(line) != readyLine {
			err = fmt.Errorf("unexpected output %q", line)
		}
		ready <- err
	}()
	timer := time.NewTimer(procStartTimeout)
	defer timer.Stop()
	select {
	case err = <-ready:
	case <-timer.C:
		err = fmt.Errorf("not ready after %v", procStartTimeout)
		_ = cmd.Process.Kill()
		<-ready // the pipe ends with the process
	}
	// The reader is done with stdout, so Wait may close it.
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	if err != nil {
		_ = cmd.Process.Kill()
		_ = stdin.Close()
		<-p.exited
		return fmt.Errorf("etcd member %s: %w; its stderr: %s", m.name, err, p.stderr.String())
	}
	m.proc, m.started = p, true
	return nil
}

// Restart starts m again from its data directory, after Stop or Kill, and
// waits until it serves.
func (m *procMember) Restart() error { return m.start() }

// Stop sends SIGTERM to m (resuming it first if it is paused) and waits
// until it has exited: etcd closes its stores and connections. It returns
// an error if m was not running or did not exit cleanly in time (it is
// then killed).
func (m *procMember) Stop() error { return m.end(syscall.SIGTERM) }

// Kill sends SIGKILL to m and waits until it has exited, as a crash would
// end it. It returns an error if m was not running.
func (m *procMember) Kill() error { return m.end(syscall.SIGKILL) }

func (m *procMember) end(sig syscall.Signal) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.proc
	if p == nil {
		return fmt.Errorf("etcd member %s: not running", m.name)
	}
	m.proc = nil
	defer p.stdin.Close()
	if p.paused && sig != syscall.SIGKILL {
		// A stopped process handles no signal but SIGKILL until it is
		// continued.
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
	}
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("etcd member %s: %v: %w", m.name, sig, err)
	}
	timer := time.NewTimer(procStopTimeout)
	defer timer.Stop()
	select {
	case <-p.exited:
	case <-timer.C:
		_ = p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("etcd member %s: still running %v after %v; killed", m.name, procStopTimeout, sig)
	}
	if sig == syscall.SIGTERM && p.err != nil {
		return fmt.Errorf("etcd member %s: %w; its stderr: %s", m.name, p.err, p.stderr.String())
	}
	return nil
}

// Pause stops m's process (SIGSTOP): its connections stay open but it
// answers nothing, as a member that hangs or is cut off without a reset.
func (m *procMember) Pause() error { return m.setPaused(true) }

// Resume continues m's process after Pause (SIGCONT).
func (m *procMember) Resume() error { return m.setPaused(false) }

func (m *procMember) setPaused(paused bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc == nil {
		return fmt.Errorf("etcd member %s: not running", m.name)
	}
	sig := syscall.SIGCONT
	if paused {
		sig = syscall.SIGSTOP
	}
	if err := m.proc.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("etcd member %s: %v: %w", m.name, sig, err)
	}
	m.proc.paused = paused
	// The signal is delivered asynchronously: a request sent just after
	// SIGSTOP could still be answered. Wait until every thread is in the
	// state asked for.
	if err := waitStopped(m.proc.cmd.Process.Pid, paused); err != nil {
		return fmt.Errorf("etcd member %s: %v: %w", m.name, sig, err)
	}
	return nil
}

// waitStopped waits until every thread of process pid is stopped by a
// signal (state T in /proc), or, if stopped is false, none is.
func waitStopped(pid int, stopped bool) error {
	deadline := time.Now().Add(procStopTimeout)
	for {
		all, none, err := threadsStopped(pid)
		switch {
		case err != nil:
			return err
		case stopped && all, !stopped && none:
			return nil
		case time.Now().After(deadline):
			return fmt.Errorf("threads not %s after %v", map[bool]string{true: "stopped", false: "running"}[stopped], procStopTimeout)
		}
		time.Sleep(time.Millisecond) // polling /proc: there is nothing to wait on
	}
}

// threadsStopped reports whether all and whether none of the threads of
// process pid are stopped by a signal.
func threadsStopped(pid int) (all, none bool, err error) {
	stats, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil || len(stats) == 0 {
		return false, false, fmt.Errorf("no threads of process %d in /proc: %v", pid, err)
	}
	all, none = true, true
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // a thread that exited meanwhile
		}
		// The state follows the command, which is in parentheses and
		// may hold spaces.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) {
			return false, false, fmt.Errorf("unexpected %s: %q", f, b)
		}
		if b[i+2] == 'T' {
			none = false
		} else {
			all = false
		}
	}
	return all, none, nil
}

// lockedBuffer is a bytes.Buffer safe for concurrent use: a child's
// standard error is written by os/exec's goroutine and read on failure.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestEtcdProc_PauseResumeKillStopRestartKeepTheData(t *testing.T) {
	m := startEtcdProc(t)
	require.NotEqual(t, os.Getpid(), m.PID(), "the member runs in a process of its own")
	c := newClient(t, m.Endpoint())
	ctx := context.Background()
	_, err := c.Put(ctx, "/proc/k", "v")
	require.NoError(t, err)
	get := func(timeout time.Duration) (string, error) {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		resp, err := c.Get(ctx, "/proc/k")
		if err != nil {
			return "", err
		}
		if len(resp.Kvs) != 1 {
			return "", fmt.Errorf("%d keys", len(resp.Kvs))
		}
		return string(resp.Kvs[0].Value), nil
	}

	require.NoError(t, m.Pause())
	_, err = get(300 * time.Millisecond)
	require.ErrorIs(t, err, context.DeadlineExceeded, "a paused member answers nothing")
	require.NoError(t, m.Resume())
	v, err := get(10 * time.Second)
	require.NoError(t, err)
	require.Equal(t, "v", v)

	require.NoError(t, m.Kill())
	require.Zero(t, m.PID())
	_, err = get(300 * time.Millisecond)
	require.Error(t, err, "a killed member answers nothing")
	require.NoError(t, m.Restart())
	v, err = get(10 * time.Second)
	require.NoError(t, err)
	require.Equal(t, "v", v, "a member killed and restarted from its data directory keeps its data")

	require.NoError(t, m.Pause())
	require.NoError(t, m.Stop(), "a paused member still stops cleanly")
	require.Error(t, m.Stop(), "a stopped member is not running")
	require.NoError(t, m.Restart())
	v, err = get(10 * time.Second)
	require.NoError(t, err)
	require.Equal(t, "v", v)
}

func TestEtcdProc_ClusterServesWithAMemberKilled(t *testing.T) {
	t.Parallel() // mostly waits for elections
	cl := startProcCluster(t, 3)
	require.NoError(t, cl.members[0].Kill())
	c := newClient(t, cl.endpoints()[1:]...)
	ctx := context.Background()
	// If the killed member led, the others elect a leader first: a put
	// meanwhile times out.
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := c.Put(ctx, "/proc/quorum", "2 of 3")
		return err == nil
	}, convergeTimeout, 10*time.Millisecond, "two of three members serve")
	require.NoError(t, cl.members[0].Restart())
	c0 := newClient(t, cl.members[0].Endpoint())
	require.Eventually(t, func() bool {
		resp, err := c0.Get(ctx, "/proc/quorum")
		return err == nil && len(resp.Kvs) == 1
	}, convergeTimeout, 10*time.Millisecond, "the restarted member catches up")
}
