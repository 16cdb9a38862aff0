package k8s

import (
	"fmt"
	"os"
	"sync"
)

// mainTB stands in for a *testing.T where none exists: the shared cluster
// outlives the test that starts it, so the server's helpers get this
// instead, which runs its cleanups when TestMain calls cleanup. It drops
// logs, and turns a fatal error into a panic that run recovers.
type mainTB struct {
	mu       sync.Mutex
	cleanups []func()
	failed   bool
}

// mainTBFatal is what a fatal error panics with.
type mainTBFatal struct{ msg string }

// run calls f and returns its results, or the fatal error it hit.
func (tb *mainTB) run(f func(*mainTB) (*cluster, error)) (c *cluster, err error) {
	defer func() {
		if r := recover(); r != nil {
			fatal, ok := r.(mainTBFatal)
			if !ok {
				panic(r)
			}
			c, err = nil, fmt.Errorf("%s", fatal.msg)
		}
	}()
	return f(tb)
}

// cleanup runs the cleanups, last registered first.
func (tb *mainTB) cleanup() {
	for {
		tb.mu.Lock()
		n := len(tb.cleanups)
		if n == 0 {
			tb.mu.Unlock()
			return
		}
		f := tb.cleanups[n-1]
		tb.cleanups = tb.cleanups[:n-1]
		tb.mu.Unlock()
		f()
	}
}

func (tb *mainTB) Cleanup(f func()) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.cleanups = append(tb.cleanups, f)
}

func (tb *mainTB) Error(args ...any) { tb.report(fmt.Sprint(args...)) }
func (tb *mainTB) Errorf(format string, args ...any) {
	tb.report(fmt.Sprintf(format, args...))
}

func (tb *mainTB) report(msg string) {
	tb.mu.Lock()
	tb.failed = true
	tb.mu.Unlock()
	fmt.Fprintln(os.Stderr, "shared cluster:", msg)
}

func (tb *mainTB) Fail() {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.failed = true
}

func (tb *mainTB) FailNow()                     { tb.Fatal("FailNow") }
func (tb *mainTB) Fatal(args ...any)            { panic(mainTBFatal{fmt.Sprint(args...)}) }
func (tb *mainTB) Fatalf(f string, args ...any) { panic(mainTBFatal{fmt.Sprintf(f, args...)}) }
func (tb *mainTB) Skip(args ...any)             { tb.Fatal(args...) }
func (tb *mainTB) Skipf(f string, args ...any)  { tb.Fatalf(f, args...) }
func (tb *mainTB) SkipNow()                     { tb.Fatal("SkipNow") }
func (tb *mainTB) Skipped() bool                { return false }
func (tb *mainTB) Helper()                      {}
func (tb *mainTB) Log(...any)                   {}
func (tb *mainTB) Logf(string, ...any)          {}
func (tb *mainTB) Attr(string, string)          {}
func (tb *mainTB) Name() string                 { return "Shared" }
func (tb *mainTB) Chdir(string)                 { tb.Fatal("Chdir is not supported") }
func (tb *mainTB) Setenv(string, string)        { tb.Fatal("Setenv is not supported") }

func (tb *mainTB) Failed() bool {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	return tb.failed
}

// TempDir returns a new directory, removed by cleanup.
func (tb *mainTB) TempDir() string {
	dir, err := os.MkdirTemp("", "mirror-k8s-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
