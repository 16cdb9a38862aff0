// Package testserver holds what starting a kube-apiserver over an embedded
// etcd needs outside a test, shared by the tests of this module and by
// cmd/benchapiserver: a stand-in for a test's TB, and the etcd.
package testserver

import (
	"fmt"
	"os"
	"sync"
)

// TB stands in for a *testing.T where none exists, such as for a server
// that outlives the test that starts it or in a command: it is the
// ktesting.TB that kube-apiserver's StartTestServer takes. It runs its
// cleanups when Close is called, drops logs, writes errors to standard
// error, and turns a fatal error (Fatal, FailNow, and Skip, which it does
// not support) into a panic that Run recovers. Its methods may be called
// from several goroutines.
type TB struct {
	name, prefix string

	mu       sync.Mutex
	cleanups []func()
	failed   bool
}

// NewTB returns a TB whose Name is name and which writes each error to
// standard error as a line that starts with prefix and a colon.
func NewTB(name, prefix string) *TB {
	return &TB{name: name, prefix: prefix}
}

// fatal is what a fatal error panics with; Run recovers it.
type fatal string

// Run calls f with tb and returns its error or, if f called Fatal,
// Fatalf, FailNow or a Skip method of tb on f's goroutine, an error with
// that call's message. Other panics pass through.
func (tb *TB) Run(f func(*TB) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			msg, ok := r.(fatal)
			if !ok {
				panic(r)
			}
			err = fmt.Errorf("%s", string(msg))
		}
	}()
	return f(tb)
}

// Close calls the functions registered with Cleanup, last registered
// first, including those they register in turn, and returns once all
// have returned. A later Cleanup registers a function for the next Close.
func (tb *TB) Close() {
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

// Cleanup registers f to be called by Close.
func (tb *TB) Cleanup(f func()) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.cleanups = append(tb.cleanups, f)
}

// Error marks tb failed and writes args, formatted as by fmt.Sprint, to
// standard error.
func (tb *TB) Error(args ...any) { tb.report(fmt.Sprint(args...)) }

// Errorf marks tb failed and writes its arguments, formatted as by
// fmt.Sprintf, to standard error.
func (tb *TB) Errorf(format string, args ...any) {
	tb.report(fmt.Sprintf(format, args...))
}

func (tb *TB) report(msg string) {
	tb.mu.Lock()
	tb.failed = true
	tb.mu.Unlock()
	fmt.Fprintln(os.Stderr, tb.prefix+":", msg)
}

// Fail marks tb failed.
func (tb *TB) Fail() {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.failed = true
}

// Failed reports whether Fail, Error or Errorf has been called.
func (tb *TB) Failed() bool {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	return tb.failed
}

// FailNow panics for Run to return an error "FailNow".
func (tb *TB) FailNow() { tb.Fatal("FailNow") }

// Fatal panics for Run to return args, formatted as by fmt.Sprint, as its
// error.
func (tb *TB) Fatal(args ...any) { panic(fatal(fmt.Sprint(args...))) }

// Fatalf panics for Run to return its arguments, formatted as by
// fmt.Sprintf, as its error.
func (tb *TB) Fatalf(format string, args ...any) { panic(fatal(fmt.Sprintf(format, args...))) }

// Skip is Fatal: there is no test to skip.
func (tb *TB) Skip(args ...any) { tb.Fatal(args...) }

// Skipf is Fatalf: there is no test to skip.
func (tb *TB) Skipf(format string, args ...any) { tb.Fatalf(format, args...) }

// SkipNow is Fatal("SkipNow"): there is no test to skip.
func (tb *TB) SkipNow() { tb.Fatal("SkipNow") }

// Skipped returns false.
func (tb *TB) Skipped() bool { return false }

// Helper does nothing.
func (tb *TB) Helper() {}

// Log drops its arguments.
func (tb *TB) Log(...any) {}

// Logf drops its arguments.
func (tb *TB) Logf(string, ...any) {}

// Attr drops its arguments.
func (tb *TB) Attr(string, string) {}

// Name returns the name given to NewTB.
func (tb *TB) Name() string { return tb.name }

// Chdir is not supported: it calls Fatal.
func (tb *TB) Chdir(string) { tb.Fatal("Chdir is not supported") }

// Setenv is not supported: it calls Fatal.
func (tb *TB) Setenv(string, string) { tb.Fatal("Setenv is not supported") }

// TempDir returns a new directory, which Close removes. If it cannot make
// one, it calls Fatal.
func (tb *TB) TempDir() string {
	dir, err := os.MkdirTemp("", "mirror-k8s-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
