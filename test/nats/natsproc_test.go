package nats_test

// A nats-server in a child process, for the benchmarks: their client-side
// CPU time and allocations must be the mirror's own, not the server's.
//
// The child is this test binary run again: TestMain finds childEnv set to
// the store directory and runs an embedded server (JetStream on, loopback,
// a random port) instead of the tests. It prints readyPrefix and its URL
// once the server serves, and runs until SIGTERM or until its standard
// input, a pipe the parent holds, closes: a child never outlives the test
// process that started it.

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

const (
	// childEnv holds a child server's store directory.
	childEnv = "MIRROR_TEST_NATS_SERVER"
	// readyPrefix starts the line a child prints once it serves, followed
	// by its URL.
	readyPrefix = "nats-server ready at "
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(childEnv); dir != "" {
		os.Exit(runChildServer(dir))
	}
	os.Exit(m.Run())
}

// runChildServer runs a server storing in dir until SIGTERM, SIGINT or the
// end of standard input, and returns the process's exit code.
func runChildServer(dir string) int {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true,
		StoreDir: dir, NoLog: true, NoSigs: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, "nats-server:", err)
		return 1
	}
	srv.Start()
	if !srv.ReadyForConnections(30 * time.Second) {
		fmt.Fprintln(os.Stderr, "nats-server: not ready in 30s")
		return 1
	}
	fmt.Printf("%snats://127.0.0.1:%d\n", readyPrefix, srv.Addr().(*net.TCPAddr).Port)
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop <- syscall.SIGTERM
	}()
	<-stop
	srv.Shutdown()
	srv.WaitForShutdown()
	return 0
}

// startServerProc starts a server in a child process and returns its URL.
// The child is stopped when the test or benchmark ends.
func startServerProc(tb testing.TB) string {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+tb.TempDir())
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if url, ok := strings.CutPrefix(sc.Text(), readyPrefix); ok {
				ready <- url
				break
			}
		}
		close(ready)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case url, ok := <-ready:
		if !ok {
			tb.Fatal("nats-server child exited before it was ready")
		}
		return url
	case <-time.After(30 * time.Second):
		tb.Fatal("nats-server child not ready in 30s")
		return ""
	}
}
