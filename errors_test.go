package mirror

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// bigValueLW serves one list of []byte values, with the failures to
// decode in skipped, and then a watch that brings the events in watch and
// stays open.
type bigValueLW struct {
	items   [][]byte
	skipped []error
	watch   []source.Event[[]byte]
}

func (lw *bigValueLW) List(ctx context.Context, opts source.ListOptions) (source.ListResult[[]byte], error) {
	return source.ListResult[[]byte]{Items: lw.items, Skipped: lw.skipped, ResourceVersion: "1"}, nil
}

func (lw *bigValueLW) Watch(ctx context.Context, opts source.WatchOptions) (source.Watcher[[]byte], error) {
	return &sliceWatcher{events: lw.watch}, nil
}

// sliceWatcher plays its events, then blocks until its context ends.
type sliceWatcher struct{ events []source.Event[[]byte] }

func (w *sliceWatcher) Next(ctx context.Context) (source.Event[[]byte], error) {
	if len(w.events) > 0 {
		ev := w.events[0]
		w.events = w.events[1:]
		return ev, nil
	}
	<-ctx.Done()
	return source.Event[[]byte]{}, ctx.Err()
}

func (w *sliceWatcher) Stop() {}

// lineBuffer collects log output, safe for concurrent use.
type lineBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lineBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lineBuffer) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Split(strings.TrimSpace(l.b.String()), "\n")
}

func TestErrorsAndLogs_NameTheObjectWithoutItsContentsAndStayShort(t *testing.T) {
	const size = 1536 * 1024
	// secret fills the values no error has a reason to quote; leaky those
	// whose user error (or panic) quotes them, which is cut.
	secret := func(name string) []byte {
		return append([]byte(name+":"), bytes.Repeat([]byte("SECRET-"), size/7)...)
	}
	leaky := func(name string) []byte {
		return append([]byte(name+":"), bytes.Repeat([]byte("LEAKY-\x00\n"), size/8)...)
	}
	keyFunc := func(v []byte) (string, error) {
		name, _, _ := bytes.Cut(v, []byte(":"))
		switch {
		case bytes.HasPrefix(name, []byte("nokey")):
			return "", errors.New("no name field")
		case bytes.HasPrefix(name, []byte("panickey")):
			panic(v)
		case bytes.HasPrefix(name, []byte("quotekey")):
			return "", fmt.Errorf("no name in %q", v)
		}
		return string(name), nil
	}
	indexers := Indexers[[]byte]{"by-kind": func(v []byte) ([]string, error) {
		switch {
		case bytes.HasPrefix(v, []byte("noindex")):
			return nil, errors.New("no kind field")
		case bytes.HasPrefix(v, []byte("quoteindex")):
			return nil, fmt.Errorf("no kind in %s", v)
		}
		return []string{"k"}, nil
	}}
	transform := func(v []byte) ([]byte, error) {
		switch {
		case bytes.HasPrefix(v, []byte("notransform")):
			return nil, errors.New("cannot trim")
		case bytes.HasPrefix(v, []byte("panictransform")):
			panic(fmt.Sprintf("cannot trim %s", v))
		}
		return v, nil
	}
	newLW := func() *bigValueLW {
		return &bigValueLW{
			items: [][]byte{
				secret("nokey"), secret("panickey"), secret("noindex"), secret("notransform"),
				leaky("quotekey"), leaky("quoteindex"), leaky("panictransform"),
			},
			skipped: []error{
				&ObjectError{Key: "undecodable", ResourceVersion: "1", Err: errors.New("invalid character 'S'")},
				&ObjectError{Key: "quotedecode", ResourceVersion: "1", Err: fmt.Errorf("invalid value %q", leaky("v"))},
			},
			watch: []source.Event[[]byte]{
				{Type: source.Error, ResourceVersion: "2", Err: &ObjectError{Key: string(leaky("longkey")), ResourceVersion: "2", Err: errors.New("bad")}},
			},
		}
	}
	tests := []struct {
		name string
		// handler says whether an ErrorHandler takes the errors; without
		// one, they are logged.
		handler bool
	}{
		{name: "errors reported", handler: true},
		{name: "errors logged"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var logs lineBuffer
				var mu sync.Mutex
				var errs []error
				opts := InformerOptions[string, []byte]{
					KeyFunc:   keyFunc,
					Indexers:  indexers,
					Transform: transform,
					Logger:    slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
				}
				if tt.handler {
					opts.ErrorHandler = func(err error) {
						mu.Lock()
						defer mu.Unlock()
						errs = append(errs, err)
					}
				}
				inf := NewInformer(newLW(), opts)
				ctx, cancel := context.WithCancel(t.Context())
				done := make(chan struct{})
				go func() {
					defer close(done)
					_ = inf.Run(ctx)
				}()
				require.NoError(t, inf.WaitForSync(ctx))
				synctest.Wait()
				cancel()
				<-done

				var texts []string
				if tt.handler {
					for _, err := range errs {
						texts = append(texts, err.Error())
					}
				} else {
					for _, l := range logs.lines() {
						if strings.Contains(l, `"level":"WARN"`) || strings.Contains(l, `"level":"ERROR"`) {
							texts = append(texts, l)
						}
					}
				}
				require.NotEmpty(t, texts)
				for _, text := range texts {
					assert.LessOrEqual(t, len(text), 4096, "a short message: %.200s", text)
					assert.False(t, strings.Contains(text, "SECRET"), "no contents: %.200s", text)
				}
				for _, l := range logs.lines() {
					assert.LessOrEqual(t, len(l), 4096, "a short log line: %.200s", l)
				}
				// Every failure is there, named by its key, or by its type
				// and size where the key is not known.
				all := strings.Join(texts, "\n")
				for _, want := range []string{
					"no key for []uint8 of 1572864 bytes: no name field",
					"no key for []uint8 of 1572867 bytes: panic: []uint8 of 1572867 bytes",
					`index "by-kind" failed for object with key noindex ([]uint8 of 1572866 bytes): no kind field`,
					"transform object with key notransform: cannot trim",
					"transform object with key panictransform: panic: cannot trim",
					"no name in",
					"no kind in quoteindex",
					`object "undecodable" skipped: invalid character 'S'`,
					`object "quotedecode" skipped: invalid value`,
					`object "longkey:LEAKY`,
				} {
					if !tt.handler {
						want = strings.ReplaceAll(want, `"`, `\"`) // JSON-escaped
					}
					assert.True(t, strings.Contains(all, want), "reports %s", want)
				}
				assert.True(t, strings.Contains(all, "bytes cut]"), "a long cause is cut, and says so")
			})
		})
	}
}

func TestErrors_KeepTheObjectForErrorsAs(t *testing.T) {
	obj := []byte("SECRET")
	tests := []struct {
		name string
		err  error
		get  func(err error) any
		text string
	}{
		{
			name: "KeyError",
			err:  &KeyError{Object: obj, Err: errors.New("no name")},
			get: func(err error) any {
				var e *KeyError
				require.ErrorAs(t, err, &e)
				return e.Object
			},
			text: "mirror: no key for []uint8 of 6 bytes: no name",
		},
		{
			name: "IndexError with its key",
			err:  &IndexError{Index: "by-kind", Key: "ns/a", Object: obj, Err: errors.New("no kind")},
			get: func(err error) any {
				var e *IndexError
				require.ErrorAs(t, err, &e)
				return e.Object
			},
			text: `mirror: index "by-kind" failed for object with key ns/a ([]uint8 of 6 bytes): no kind`,
		},
		{
			name: "IndexError of a query, key unknown",
			err:  &IndexError{Index: "by-kind", Object: "SECRET", Err: &PanicError{Value: obj}},
			get: func(err error) any {
				var e *PanicError
				require.ErrorAs(t, err, &e)
				return e.Value
			},
			text: `mirror: index "by-kind" failed for string of 6 bytes: panic: []uint8 of 6 bytes`,
		},
		{
			name: "transform error, key unknown",
			err:  transformObjectError(tobj{"a", "SECRET"}, &PanicError{Value: obj}),
			get: func(err error) any {
				var e *PanicError
				require.ErrorAs(t, err, &e)
				return e.Value
			},
			text: "mirror: transform mirror.tobj (size unknown): panic: []uint8 of 6 bytes",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wrapped := fmt.Errorf("reported: %w", tt.err)
			assert.Equal(t, tt.text, tt.err.Error())
			assert.NotNil(t, tt.get(wrapped), "errors.As reaches the object")
		})
	}
}
