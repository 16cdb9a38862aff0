package mirror

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/listwatch/mirror/internal/textcap"
)

// logRepeatWindow is how long an error that was just logged is kept out of
// the log when it comes again, identical: a source that fails the same way
// on every retry, or a handler that panics on every call, would otherwise
// flood the log. The error handler, if set, still sees every one.
const logRepeatWindow = time.Minute

// maxLogKeys bounds the errors a logLimiter remembers.
const maxLogKeys = 1024

// logLimiter decides which errors reach a log: the first of a kind, then
// at most one per logRepeatWindow, saying how many were left out. It is
// safe for concurrent use.
type logLimiter struct {
	mu   sync.Mutex
	seen map[string]*logSeen
}

type logSeen struct {
	logged  time.Time // when one was last logged
	skipped int       // how many were left out since
}

// allow reports whether an error with key, coming at now, is to be
// logged, and how many like it were left out since the last one logged.
func (l *logLimiter) allow(key string, now time.Time) (ok bool, skipped int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.seen[key]
	if s == nil {
		if l.seen == nil || len(l.seen) >= maxLogKeys {
			l.seen = make(map[string]*logSeen)
		}
		l.seen[key] = &logSeen{logged: now}
		return true, 0
	}
	if now.Sub(s.logged) < logRepeatWindow {
		s.skipped++
		return false, 0
	}
	skipped = s.skipped
	s.logged, s.skipped = now, 0
	return true, skipped
}

// logError logs err, which msg introduces, unless the same error was
// logged within logRepeatWindow. A panic is logged at Error with the
// stack, and a handler's with the handler's name; everything else at Warn.
// The line is bounded whatever the error: its text and the stack are cut
// (see logText), so it stays within a few KB.
func (l *logLimiter) logError(logger *slog.Logger, msg string, err error) {
	ok, skipped := l.allow(errorKey(err), time.Now())
	if !ok {
		return
	}
	level := slog.LevelWarn
	attrs := []any{errAttr(err)}
	var hpe *HandlerPanicError
	var pe *PanicError
	if errors.As(err, &hpe) {
		attrs = append(attrs, "handler", logText(hpe.Handler, maxNameText))
	}
	if errors.As(err, &pe) {
		level = slog.LevelError
		attrs = append(attrs, "stack", logText(string(pe.Stack), maxLogStack))
	}
	if skipped > 0 {
		attrs = append(attrs, "repeated", skipped, "over", logRepeatWindow)
	}
	logger.Log(context.Background(), level, msg, attrs...)
}

// errorKey tells which errors count as the same one: those with the same
// innermost cause (wrapping adds versions and positions that change from
// one try to the next), and for a skipped object, the same object.
func errorKey(err error) string {
	var pe *HandlerPanicError
	if errors.As(err, &pe) {
		return "panic\x00" + textcap.Clip(pe.Handler, maxNameText) + "\x00" + panicText(pe.Value)
	}
	var oe *ObjectError
	if errors.As(err, &oe) {
		return "object\x00" + textcap.Clip(oe.Key, maxNameText) + "\x00" + causeText(innermost(oe.Err))
	}
	return causeText(innermost(err))
}

// errAttr is err as a log attribute, its text made fit for a log line
// (see logText).
func errAttr(err error) slog.Attr {
	return slog.String("err", logText(errorText(err), maxLogErrText))
}

// innermost follows err's causes to the last one: for an error that
// joins or wraps several, the last of them.
func innermost(err error) error {
	for {
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			next := u.Unwrap()
			if next == nil {
				return err
			}
			err = next
		case interface{ Unwrap() []error }:
			errs := u.Unwrap()
			if len(errs) == 0 {
				return err
			}
			err = errs[len(errs)-1]
		default:
			return err
		}
	}
}
