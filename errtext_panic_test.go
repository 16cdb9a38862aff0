package mirror

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// nilErr is an error type whose Error dereferences its receiver, as most
// do: a typed nil of it panics when asked for its text.
type nilErr struct{ msg string }

func (e *nilErr) Error() string { return e.msg }

// panickyErr is an error whose Error method panics.
type panickyErr struct{}

func (panickyErr) Error() string { panic("Error method failed") }

// nilName is a key type whose String dereferences its receiver.
type nilName struct{ name string }

func (n *nilName) String() string { return n.name }

func TestErrorText_AKeyWhoseStringMethodPanicsDoesNotPanicTheReport(t *testing.T) {
	var text string
	require.NotPanics(t, func() { text = describeKeyed((*nilName)(nil), []byte("v")) })
	assert.Contains(t, text, "[]uint8 of 1 bytes")
}

func TestErrorText_AnErrorWhoseErrorMethodPanicsDoesNotPanicTheReport(t *testing.T) {
	tests := []struct {
		name string
		err  error
	}{
		{name: "a key function's typed nil error", err: &KeyError{Object: []byte("v"), Err: (*nilErr)(nil)}},
		{name: "a key function's error whose Error panics", err: &KeyError{Object: []byte("v"), Err: panickyErr{}}},
		{name: "a panic with a typed nil error", err: &KeyError{Object: []byte("v"), Err: panicked((*nilErr)(nil))}},
		{name: "a handler's panic with an error whose Error panics",
			err: &HandlerPanicError{Handler: "h", PanicError: PanicError{Value: panickyErr{}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var text string
			require.NotPanics(t, func() { text = tt.err.Error() })
			assert.NotEmpty(t, text)
			var buf syncBuffer
			var l logLimiter
			require.NotPanics(t, func() { l.logError(slog.New(slog.NewTextHandler(&buf, nil)), "m", tt.err) })
			assert.NotEmpty(t, buf.String())
		})
	}
}
