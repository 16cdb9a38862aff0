package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/internal/textcap"
)

// Reconciler makes the world match the state of the object named by a key.
//
// Reconcile is called with the keys of the objects that changed, at least
// once after each change, and never for one key by two workers at once;
// it is handed a key, not a change, so it reads the object's current state
// (from an informer's cache, say) and must do the right thing whatever
// happened to the object meanwhile, its deletion included. Its ctx ends
// when the loop stops.
//
// A nil error with a zero Result means the key is done. An error means
// the key is retried after its backoff, unless it wraps ErrTerminal or
// the key has used up Options.MaxRetries. A panic is recovered and counts
// as an error (see Error.Err).
type Reconciler[K comparable] interface {
	// Reconcile makes the world match the current state of key's
	// object, or the absence of one.
	Reconcile(ctx context.Context, key K) (Result, error)
}

// Func adapts a function to a Reconciler.
type Func[K comparable] func(ctx context.Context, key K) (Result, error)

// Reconcile calls f(ctx, key).
func (f Func[K]) Reconcile(ctx context.Context, key K) (Result, error) { return f(ctx, key) }

// Result is what a successful Reconcile asks of the loop.
type Result struct {
	// RequeueAfter, if positive, has the key reconciled again after this
	// delay (unless a change queues it sooner), as a success: its retry
	// count is reset first. A periodic check of something no informer
	// watches, say. With an error, it is ignored: the error's retry wins.
	RequeueAfter time.Duration
}

// ErrTerminal marks a terminal error, one that retrying will not cure: a
// Reconcile error wrapping it is reported and the key dropped (its retry
// count reset) until a change queues the key again. Wrap an error with
// Terminal or with fmt.Errorf's %w.
//
// A source's refusal (mirror.ErrPermanent) is not terminal: a Reconcile
// error wrapping it is retried as any other.
var ErrTerminal = errors.New("reconcile: terminal error")

// Terminal returns err marked terminal: errors.Is finds both err and
// ErrTerminal in it, and its message is err's. Terminal(nil) is nil.
func Terminal(err error) error {
	if err == nil {
		return nil
	}
	return terminalError{err}
}

type terminalError struct{ err error }

func (e terminalError) Error() string        { return e.err.Error() }
func (e terminalError) Unwrap() error        { return e.err }
func (e terminalError) Is(target error) bool { return target == ErrTerminal }

// ErrStarted is returned by Loop.Run when the loop has run already, and by
// Watch once Run has been called.
var ErrStarted = errors.New("reconcile: loop already started")

// Error is what a Loop reports (see Options.ErrorHandler) when Reconcile
// fails for a key. errors.Is and errors.As see through it to Err.
type Error[K comparable] struct {
	// Loop is the loop's Options.Name.
	Loop string
	// Key is the key that failed.
	Key K
	// Err is Reconcile's error, or a *mirror.PanicError if it panicked,
	// whose Stack is set on the key's first panic only, until the key
	// succeeds or is dropped.
	Err error
	// Dropped is set when the key is not retried: Err wraps ErrTerminal,
	// or the key has failed Options.MaxRetries+1 times in a row.
	Dropped bool
	// Retries is the number of times the key had been retried, since it
	// last succeeded or was dropped, before this failure: this failure
	// is attempt Retries+1.
	Retries int
}

// Error implements error. It names the loop, the key and the attempt, and
// says whether the key will be retried.
func (e *Error[K]) Error() string {
	var what string
	switch {
	case e.gaveUp():
		what = fmt.Sprintf("gave up after %d attempts", e.Retries+1)
	case e.Dropped:
		what = fmt.Sprintf("attempt %d failed, terminal error, dropped", e.Retries+1)
	default:
		what = fmt.Sprintf("attempt %d failed, will retry", e.Retries+1)
	}
	loop := "reconcile"
	if e.Loop != "" {
		loop = fmt.Sprintf("reconcile %q", e.Loop)
	}
	return fmt.Sprintf("%s: key %s: %s: %s", loop, keyText(e.Key), what, errText(e.Err))
}

// maxKeyText caps the text of a key in a report, as the mirror's own
// errors cap theirs.
const maxKeyText = 256

// keyText formats key as %v does, cut to maxKeyText bytes.
func keyText(key any) string { return textcap.Clip(fmt.Sprint(key), maxKeyText) }

// errText is err's message, but for a panic of Reconcile (which the loop
// returns as is, not wrapped) one line naming the panic value's type and,
// for a string, an error or a number, its text, capped: never an object's
// contents.
func errText(err error) string {
	p, ok := err.(*mirror.PanicError)
	if !ok {
		// Through fmt, which names a panic of the Error method (a typed
		// nil returned as the error, say) instead of passing it on.
		return fmt.Sprint(err)
	}
	var text string
	switch v := p.Value.(type) {
	case string:
		text = v
	case error:
		text = safeErrorText(v)
	case bool, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, uintptr, float32, float64:
		text = fmt.Sprint(v)
	default:
		return fmt.Sprintf("panic (%T)", p.Value)
	}
	return fmt.Sprintf("panic (%T): %q", p.Value, textcap.Clip(text, maxPanicText))
}

// maxPanicText caps the text of a panic value in a report.
const maxPanicText = 200

// safeErrorText returns err.Error(), or "" if that panics.
func safeErrorText(err error) (text string) {
	defer func() {
		if recover() != nil {
			text = ""
		}
	}()
	return err.Error()
}

// gaveUp reports whether the key was dropped for failing too often.
func (e *Error[K]) gaveUp() bool { return e.Dropped && !errors.Is(e.Err, ErrTerminal) }

// Unwrap returns Err.
func (e *Error[K]) Unwrap() error { return e.Err }
