package mirror

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/listwatch/mirror/internal/textcap"
)

// Queue errors.
var (
	// ErrClosed is returned by Pop and PopBatch once the queue is closed.
	ErrClosed = errors.New("mirror: queue closed")

	// ErrRequeue, wrapped in a Pop process function's error, asks the
	// queue to put the popped item back; Pop returns that error.
	ErrRequeue = errors.New("mirror: requeue")
)

// KeyError reports that a key function failed for an object, which is
// skipped. Its message names the object's type and size, never its
// contents.
type KeyError struct {
	// Object is the object whose key could not be computed; Error leaves
	// it out.
	Object any
	// Err is the key function's error, or a *PanicError if it panicked.
	Err error
}

// Error implements error.
func (e *KeyError) Error() string {
	return "mirror: no key for " + describe(e.Object) + ": " + causeText(e.Err)
}

// Unwrap returns the key function's error.
func (e *KeyError) Unwrap() error { return e.Err }

// KeyFunc computes the key of an object. It must depend only on the
// object's identity (its name, its etcd key), never on its contents. One
// that fails or panics on an object fails that object only.
type KeyFunc[K comparable, T any] func(obj T) (K, error)

// keyOf applies f and wraps a failure in a *KeyError.
func keyOf[K comparable, T any](f KeyFunc[K, T], obj T) (K, error) {
	k, err := f(obj)
	if err != nil {
		var zero K
		return zero, &KeyError{Object: obj, Err: err}
	}
	return k, nil
}

// Bounds on the text of errors and log lines. Objects never appear in
// them (describe names an object by its type and size); what users supply
// as text (a key function's error message, a panic's value, a source's
// name for an object) is cut to these lengths, since it may embed an
// object: no error or log line of ours grows with the objects.
const (
	// maxCauseText bounds the text an error takes from a user's error.
	maxCauseText = 1024
	// maxNameText bounds a key or a source's name for an object.
	maxNameText = 256
	// maxReportText bounds the whole message of an error the core
	// reports.
	maxReportText = 2048
	// maxLogErrText and maxLogStack bound, escaped, the error and the
	// stack in a log line: with the rest of the line, it stays under
	// 4 KB. The frames nearest a panic come first, and tell where it was.
	maxLogErrText = 1792
	maxLogStack   = 1280
)

// describe names obj for an error by its Go type and size, without its
// contents: "[]uint8 of 1572864 bytes", "*pkg.Pod (size unknown)".
func describe(obj any) string {
	switch v := obj.(type) {
	case nil:
		return "nil object"
	case []byte:
		return fmt.Sprintf("%T of %d bytes", obj, len(v))
	case string:
		return fmt.Sprintf("%T of %d bytes", obj, len(v))
	}
	return fmt.Sprintf("%T (size unknown)", obj)
}

// describeKeyed names an object whose key is key, for an error: by its
// key, type and size.
func describeKeyed(key, obj any) string {
	return "object with key " + keyText(key) + " (" + describe(obj) + ")"
}

// keyText formats a key for an error, as %v does, cut to maxNameText.
func keyText(key any) string {
	var s string
	switch k := key.(type) {
	case string:
		s = k
	default:
		s = fmt.Sprint(key) // fmt catches a panic in a String method
	}
	return textcap.Clip(s, maxNameText)
}

// causeText is err's message cut to maxCauseText ("<nil>" for nil).
func causeText(err error) string {
	if err == nil {
		return "<nil>"
	}
	return textcap.Clip(errorText(err), maxCauseText)
}

// errorText is err's message, as err.Error() gives it, unless that panics
// (a typed nil error, say): fmt catches the panic and names it, so that a
// user's broken error never panics the code reporting it.
func errorText(err error) string { return fmt.Sprint(err) }

// logText is s made fit for one log line: invalid UTF-8 and control
// characters other than newline and tab replaced, then cut where its
// escaped form (as a text or JSON log handler writes it, a newline as two
// bytes, an unprintable character as \uXXXX) would pass n bytes, so that
// no escaping can make it longer.
func logText(s string, n int) string {
	var b strings.Builder
	cost := 0
	for i, r := range s {
		c := utf8.RuneLen(r)
		switch {
		case r == '\n' || r == '\t' || r == '"' || r == '\\':
			c = 2
		case r < 0x20 || r == 0x7f || r == utf8.RuneError:
			r, c = utf8.RuneError, 3
		case !strconv.IsPrint(r):
			// A text handler quotes it as \uXXXX or \UXXXXXXXX, a JSON
			// handler U+2028 and U+2029 as \uXXXX.
			c = 6
			if r > 0xffff {
				c = 10
			}
		}
		if cost+c > n {
			b.WriteString("…[" + strconv.Itoa(len(s)-i) + " bytes cut]")
			break
		}
		cost += c
		b.WriteRune(r)
	}
	return b.String()
}

// boundedError is an error whose message is cut to maxReportText; it
// wraps the original, so errors.Is and errors.As see through it.
type boundedError struct{ err error }

func (e *boundedError) Error() string { return textcap.Clip(errorText(e.err), maxReportText) }
func (e *boundedError) Unwrap() error { return e.err }

// bounded returns err, or, if its message is longer than maxReportText
// (the errors of many objects joined, say), err wrapped so that its
// message is cut.
func bounded(err error) error {
	if err == nil || len(errorText(err)) <= maxReportText {
		return err
	}
	return &boundedError{err}
}
