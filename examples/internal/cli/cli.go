// Package cli is what the example programs share on the command line: the
// flags every one takes (--quiet, --sync-timeout, --duration), its exit
// statuses, the wait for the first sync, and output that --quiet silences.
//
// Every example behaves alike:
//   - --help prints the flags on standard output and exits 0;
//   - a bad flag or argument prints why on standard error and exits 2;
//   - Ctrl-C (SIGINT) or SIGTERM, at any time, and the end of --duration
//     once the first sync is done, are normal stops: the program prints
//     the summary so far and exits 0;
//   - any other failure, such as a first sync not done within
//     --sync-timeout, prints why on standard error and exits 1;
//   - --quiet prints only the final summary and fatal errors.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/listwatch/mirror"
)

// Exit statuses of every example.
const (
	ExitOK      = 0 // done, --help, or stopped by a signal or --duration
	ExitFailure = 1 // failed: the error is printed on standard error
	ExitUsage   = 2 // a bad flag or argument
)

// RunFunc is an example's program: it parses args, writes its output to
// out and returns nil when it ends normally, an interruption included.
// It returns flag.ErrHelp after printing the usage for --help, and a
// *UsageError for a bad flag or argument.
type RunFunc func(ctx context.Context, args []string, out io.Writer) error

// Main runs run with the command line's arguments, standard output and a
// context that ends on SIGINT or SIGTERM, then exits with the status Run
// returns.
func Main(name string, run RunFunc) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := Run(ctx, name, run, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Run calls run and returns the exit status for what it returned: ExitOK
// for nil or flag.ErrHelp, ExitUsage for a *UsageError, ExitFailure for
// any other error. It prints an error on stderr, prefixed with name.
func Run(ctx context.Context, name string, run RunFunc, args []string, stdout, stderr io.Writer) int {
	err := run(ctx, args, stdout)
	var usage *UsageError
	switch {
	case err == nil || errors.Is(err, flag.ErrHelp):
		return ExitOK
	case errors.As(err, &usage):
		fmt.Fprintf(stderr, "%s: %v\nrun '%s --help' for the flags\n", name, err, name)
		return ExitUsage
	default:
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return ExitFailure
	}
}

// UsageError is a bad flag or argument.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Usagef returns a *UsageError that says what is wrong with the flags.
func Usagef(format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...)}
}

// Flags are the flags every example takes.
type Flags struct {
	Quiet       bool          // --quiet: print only the summary and fatal errors
	SyncTimeout time.Duration // --sync-timeout: bound on the first sync; 0: none
	Duration    time.Duration // --duration: bound on the whole run; 0: none
}

// NewFlagSet returns a flag set for the program name with f's flags on it;
// until is what the run lasts without --duration, such as "until
// interrupted".
func NewFlagSet(name, until string, f *Flags) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.BoolVar(&f.Quiet, "quiet", false, "print only the summary and fatal errors")
	fs.DurationVar(&f.SyncTimeout, "sync-timeout", 30*time.Second, "fail if the first sync has not completed in this long (0: wait as long as it takes)")
	fs.DurationVar(&f.Duration, "duration", 0, "stop after this long, the first sync included (0: "+until+")")
	return fs
}

// Parse parses args with fs. For --help it prints the usage on out and
// returns flag.ErrHelp; a bad flag, or an argument that is not a flag,
// yields a *UsageError.
func Parse(fs *flag.FlagSet, args []string, out io.Writer) error {
	fs.SetOutput(io.Discard) // Run prints what is wrong
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(out)
		fmt.Fprintf(out, "Usage of %s:\n", fs.Name())
		fs.PrintDefaults()
		return flag.ErrHelp
	case err != nil:
		return &UsageError{Err: err}
	case fs.NArg() > 0:
		return Usagef("unexpected arguments %q", fs.Args())
	}
	return nil
}

// errDurationOver ends the context of a run whose --duration is over.
var errDurationOver = errors.New("--duration over")

// Context returns ctx bounded by --duration, if set.
func (f *Flags) Context(ctx context.Context) (context.Context, context.CancelFunc) {
	if f.Duration <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeoutCause(ctx, f.Duration, errDurationOver)
}

// Logger returns the logger to give the informers and loops: nil, for
// slog.Default(), or with --quiet one that discards everything.
func (f *Flags) Logger() *slog.Logger {
	if f.Quiet {
		return slog.New(slog.DiscardHandler)
	}
	return nil
}

// SyncError is a first sync that did not complete within --sync-timeout
// or --duration. Err says which, and the mirror's last failure, if any.
type SyncError struct{ Err error }

func (e *SyncError) Error() string { return e.Err.Error() }
func (e *SyncError) Unwrap() error { return e.Err }

// Freshener is an informer, for the last failure it reported.
type Freshener interface{ Freshness() mirror.Freshness }

// WaitForSync waits until w has synced, printing what the wait is at every
// second. It returns nil once w has synced; a *SyncError naming inf's last
// failure when --sync-timeout or --duration is over first; w's error if it
// gives up (mirror.ErrPermanent); and ctx's error when ctx is cancelled,
// an interruption.
func (f *Flags) WaitForSync(ctx context.Context, p *Printer, inf Freshener, w mirror.SyncWaiter) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the wait below if a timeout comes first
	synced := make(chan error, 1)
	go func() { synced <- w.WaitForSync(wctx) }()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var expired <-chan time.Time
	if f.SyncTimeout > 0 {
		t := time.NewTimer(f.SyncTimeout)
		defer t.Stop()
		expired = t.C
	}
	start := time.Now()
	for {
		select {
		case err := <-synced:
			if err == nil || !errors.Is(context.Cause(ctx), errDurationOver) {
				return err
			}
			return notSynced(inf, fmt.Errorf("not synced within --duration %v: %w", f.Duration, ctx.Err()))
		case <-tick.C:
			p.Printf("waiting for the first sync: %v so far; %s", time.Since(start).Round(time.Second), lastFailure(inf))
		case <-expired:
			return notSynced(inf, fmt.Errorf("not synced within --sync-timeout %v", f.SyncTimeout))
		}
	}
}

func notSynced(inf Freshener, err error) error {
	if last := inf.Freshness().Err; last != nil {
		return &SyncError{Err: fmt.Errorf("%w; last failure: %w", err, last)}
	}
	return &SyncError{Err: fmt.Errorf("%w; no failure reported yet", err)}
}

func lastFailure(inf Freshener) string {
	if last := inf.Freshness().Err; last != nil {
		return "last failure: " + last.Error()
	}
	return "no failure reported yet"
}

// Finish ends a run that returned err (nil if it ran to its end). A run
// whose ctx ended, by an interruption or by --duration, stopped normally:
// Finish prints why and then the summary, and returns nil, unless err is
// a *SyncError (the first sync was not done in time), which it returns.
// Otherwise it returns err.
func (f *Flags) Finish(ctx context.Context, err error, p *Printer, summary func()) error {
	var notSynced *SyncError
	switch {
	case errors.As(err, &notSynced) || ctx.Err() == nil:
		return err
	case errors.Is(context.Cause(ctx), errDurationOver):
		p.Printf("stopped: --duration %v over", f.Duration)
	default:
		p.Printf("interrupted")
	}
	summary()
	return nil
}

// Printer serialises the output of the handlers and the main goroutine,
// a line at a time.
type Printer struct {
	mu    sync.Mutex
	out   io.Writer
	quiet bool
}

// Printer returns a Printer to out that --quiet silences but for
// summaries.
func (f *Flags) Printer(out io.Writer) *Printer { return &Printer{out: out, quiet: f.Quiet} }

// Printf prints a line, unless --quiet: a change, a reported error, the
// progress of a run.
func (p *Printer) Printf(format string, args ...any) {
	if !p.quiet {
		p.Summary(format, args...)
	}
}

// Summary prints a line, even with --quiet: what a run did.
func (p *Printer) Summary(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.out, format+"\n", args...)
}
