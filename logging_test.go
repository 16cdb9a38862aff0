package mirror

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestLogLimiter_IdenticalErrorsAreLoggedOncePerWindowWithACount(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf syncBuffer
		logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{
			ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
				if a.Key == slog.TimeKey {
					return slog.Attr{}
				}
				return a
			},
		}))
		var l logLimiter
		refused := errors.New("connection refused")
		// The same cause, wrapped with what changes from try to try.
		for i := range 5 {
			l.logError(logger, "m", fmt.Errorf("watch from version %d: %w", i, refused))
		}
		l.logError(logger, "m", errors.New("something else"))
		time.Sleep(logRepeatWindow)
		l.logError(logger, "m", fmt.Errorf("watch from version 9: %w", refused))

		lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
		assert.Equal(t, []string{
			`level=WARN msg=m err="watch from version 0: connection refused"`,
			`level=WARN msg=m err="something else"`,
			`level=WARN msg=m err="watch from version 9: connection refused" repeated=4 over=1m0s`,
		}, lines)
	})
}

func TestLogLimiter_PanicsAreLoggedAtErrorWithTheHandlerAndStack(t *testing.T) {
	var buf syncBuffer
	var l logLimiter
	l.logError(slog.New(slog.NewTextHandler(&buf, nil)), "m",
		&HandlerPanicError{Handler: "audit", PanicError: PanicError{Value: "boom", Stack: []byte("goroutine 7 [running]:")}})
	out := buf.String()
	assert.Contains(t, out, "level=ERROR")
	assert.Contains(t, out, "handler=audit")
	assert.Contains(t, out, `stack="goroutine 7 [running]:"`)
	assert.Contains(t, out, `event handler \"audit\" panicked: boom`)
}
