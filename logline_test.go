package mirror

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestLogLimiter_ALineStaysUnder4KBWhenTheErrorIsUnprintable(t *testing.T) {
	// Runes a text handler quotes as \uXXXX or \UXXXXXXXX, and a JSON
	// handler as \u2028: each takes two or three times its bytes once
	// escaped.
	texts := map[string]string{
		"private use, plane 15": strings.Repeat("\U000F0000", 1<<18),
		"private use, BMP":      strings.Repeat("\uE000", 1<<18),
		"line separator":        strings.Repeat("\u2028", 1<<18),
		"zero width space":      strings.Repeat("\u200B", 1<<18),
	}
	handlers := map[string]func(*bytes.Buffer) slog.Handler{
		"text": func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, nil) },
		"json": func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, nil) },
	}
	for tname, text := range texts {
		for hname, h := range handlers {
			t.Run(tname+"/"+hname, func(t *testing.T) {
				var buf bytes.Buffer
				var l logLimiter
				err := &HandlerPanicError{Handler: text, PanicError: PanicError{
					Value: errors.New(text), Stack: []byte(text)}}
				l.logError(slog.New(h(&buf)), "m", err)
				line := strings.TrimSuffix(buf.String(), "\n")
				assert.False(t, strings.Contains(line, "\n"), "one line")
				assert.LessOrEqual(t, len(line), 4096, "a line under 4 KB")
			})
		}
	}
}
