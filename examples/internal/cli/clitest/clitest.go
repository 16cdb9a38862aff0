// Package clitest tests the examples as their users run them: it starts an
// example's main in a process of its own, from the example's test binary,
// so that a test sees its exit status, its output and what a signal does
// to it; and it collects output that a test follows as it comes.
package clitest

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// envMain tells a test binary started by Start to run the program's main.
const envMain = "MIRROR_EXAMPLES_CLITEST_MAIN"

// Main runs main, the example's, in place of the tests when the test
// binary was started by Start, and the tests otherwise. Call it from
// TestMain.
func Main(m *testing.M, main func()) {
	if os.Getenv(envMain) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// Proc is the example's main running in a process of its own.
type Proc struct {
	cmd    *exec.Cmd
	Stdout *Output // what it wrote on standard output, as it comes
	Stderr *Output // what it wrote on standard error, as it comes
	done   chan struct{}
	err    error // of Wait, once done is closed
}

// Start starts the example's main with args in a process of its own. The
// test binary must call Main from TestMain. The process is killed when the
// test ends, if it has not exited.
func Start(t *testing.T, args ...string) *Proc {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	p := &Proc{cmd: exec.Command(exe, args...), Stdout: &Output{}, Stderr: &Output{}, done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), envMain+"=1")
	p.cmd.Stdout, p.cmd.Stderr = p.Stdout, p.Stderr
	require.NoError(t, p.cmd.Start())
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// Run runs the example's main with args in a process of its own until it
// exits, and returns its exit status and what it wrote.
func Run(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	p := Start(t, args...)
	code = p.Wait(t)
	return code, p.Stdout.String(), p.Stderr.String()
}

// Interrupt sends the process SIGINT, as Ctrl-C does.
func (p *Proc) Interrupt(t *testing.T) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT))
}

// Wait waits for the process to exit, for at most two minutes, and returns
// its exit status.
func (p *Proc) Wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(2 * time.Minute):
		require.FailNow(t, "the program did not exit", "stdout:\n%s\nstderr:\n%s", p.Stdout, p.Stderr)
	}
	var exit *exec.ExitError
	if errors.As(p.err, &exit) {
		return exit.ExitCode() // -1 if a signal ended it
	}
	require.NoError(t, p.err)
	return 0
}

// Output collects what a program writes, safe for a writer and readers at
// once. Its zero value is ready to use.
type Output struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{} // closed and replaced at every write
	read    int           // how far Until has read

	// OnLine, if set, is called with every line written, in the writer's
	// goroutine, before the write returns.
	OnLine func(line string)
}

func (o *Output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.OnLine != nil {
		for line := range strings.Lines(string(p)) {
			o.OnLine(strings.TrimSuffix(line, "\n"))
		}
	}
	o.buf.Write(p)
	if o.changed != nil {
		close(o.changed)
		o.changed = nil
	}
	return len(p), nil
}

// String returns all that was written so far.
func (o *Output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// Until waits for a line that matches re, for at most a minute, and
// returns it. It reads on from where its last call stopped: the lines
// before, matched or skipped, are not read again.
func (o *Output) Until(t *testing.T, re string) string {
	t.Helper()
	match := regexp.MustCompile(re)
	timeout := time.After(time.Minute)
	for {
		o.mu.Lock()
		for line := range strings.Lines(o.buf.String()[o.read:]) {
			if !strings.HasSuffix(line, "\n") {
				break // not whole yet
			}
			o.read += len(line)
			if line = strings.TrimSuffix(line, "\n"); match.MatchString(line) {
				o.mu.Unlock()
				return line
			}
		}
		if o.changed == nil {
			o.changed = make(chan struct{})
		}
		changed := o.changed
		o.mu.Unlock()
		select {
		case <-changed:
		case <-timeout:
			require.FailNow(t, "no line matching "+re, "output:\n%s", o)
		}
	}
}

// CancelAt returns an Output that calls cancel as soon as a line
// containing marker is written, before that write returns.
func CancelAt(marker string, cancel func()) *Output {
	return &Output{OnLine: func(line string) {
		if strings.Contains(line, marker) {
			cancel()
		}
	}}
}

// Case is a run of the program and how it must end.
type Case struct {
	Name   string
	Args   []string
	Code   int    // the exit status
	Stdout string // what standard output must contain
	Stderr string // what standard error must contain; empty for status 0
}

// RunCases runs the program once for each case, in a subtest of its
// name, and checks how it ends.
func RunCases(t *testing.T, cases []Case) {
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			code, stdout, stderr := Run(t, tc.Args...)
			require.Equal(t, tc.Code, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
			require.Contains(t, stdout, tc.Stdout)
			require.Contains(t, stderr, tc.Stderr)
			if tc.Code == 0 {
				require.Empty(t, stderr)
			}
		})
	}
}

// InterruptAt runs the program with args until it prints a line that
// matches marker, interrupts it, and checks that it says so and exits 0.
// It returns the process, for more checks of its output.
func InterruptAt(t *testing.T, marker string, args ...string) *Proc {
	t.Helper()
	p := Start(t, args...)
	p.Stdout.Until(t, marker)
	p.Interrupt(t)
	require.Equal(t, 0, p.Wait(t), "stderr:\n%s", p.Stderr)
	p.Stdout.Until(t, "^interrupted$")
	return p
}
