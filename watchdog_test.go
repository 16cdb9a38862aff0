package mirror_test

import (
	"bytes"
	"context"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/listwatch/mirror"
)

// logCapture is a slog.Handler that keeps every record, with the
// attributes its loggers were given, for tests to look at.
type logCapture struct {
	store *logStore
	attrs []slog.Attr
}

type logStore struct {
	mu   sync.Mutex
	recs []logRecord
}

// logRecord is a captured record: its level, message and attributes.
type logRecord struct {
	Level slog.Level
	Msg   string
	Attrs map[string]slog.Value
}

func newLogCapture() (*slog.Logger, *logStore) {
	s := &logStore{}
	return slog.New(&logCapture{store: s}), s
}

func (h *logCapture) Enabled(context.Context, slog.Level) bool { return true }

func (h *logCapture) Handle(_ context.Context, r slog.Record) error {
	rec := logRecord{Level: r.Level, Msg: r.Message, Attrs: map[string]slog.Value{}}
	for _, a := range h.attrs {
		rec.Attrs[a.Key] = a.Value
	}
	r.Attrs(func(a slog.Attr) bool {
		rec.Attrs[a.Key] = a.Value
		return true
	})
	h.store.mu.Lock()
	defer h.store.mu.Unlock()
	h.store.recs = append(h.store.recs, rec)
	return nil
}

func (h *logCapture) WithAttrs(as []slog.Attr) slog.Handler {
	return &logCapture{store: h.store, attrs: append(append([]slog.Attr(nil), h.attrs...), as...)}
}

func (h *logCapture) WithGroup(string) slog.Handler { return h }

// take returns and forgets the records whose message starts with prefix.
func (s *logStore) take(prefix string) []logRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out, rest []logRecord
	for _, r := range s.recs {
		if strings.HasPrefix(r.Msg, prefix) {
			out = append(out, r)
		} else {
			rest = append(rest, r)
		}
	}
	s.recs = rest
	return out
}

const stuckMsg = "mirror: handler"

// stuckFixture runs an informer whose logs are captured, with a handler
// named "slow" that waits on gate in every call, configured by opts, and
// one named "quick". Closing gate lets "slow" through for good; the test's
// cleanup does it if the test did not.
func stuckFixture(t *testing.T, opts mirror.HandlerOptions) (*fixture, *logStore, chan struct{}, *mirror.Registration) {
	logger, logs := newLogCapture()
	f := newFixture(t, func(o *mirror.InformerOptions[string, item]) {
		o.Name = "things"
		o.Logger = logger
	})
	gate := make(chan struct{})
	t.Cleanup(func() {
		select {
		case <-gate:
		default:
			close(gate)
		}
	})
	opts.Name = "slow"
	reg, err := f.inf.AddEventHandler(&recorder{gate: gate}, opts)
	require.NoError(t, err)
	_, err = f.inf.AddEventHandler(&recorder{}, mirror.HandlerOptions{Name: "quick"})
	require.NoError(t, err)
	f.start()
	f.synced()
	return f, logs, gate, reg
}

func TestInformer_StuckHandlerIsLoggedUntilItReturns(t *testing.T) {
	const period = 30 * time.Second // StuckAfter's default
	tests := []struct {
		name string
		put  func(f *fixture)
		call string // the call that sticks
	}{
		{"add", func(f *fixture) { f.src.Put(item{Name: "a", Val: 1}) }, "OnAdd"},
		{"update", func(f *fixture) {
			f.src.Put(item{Name: "a", Val: 1})
			f.src.Put(item{Name: "a", Val: 2})
		}, "OnUpdate"},
		{"delete", func(f *fixture) {
			f.src.Put(item{Name: "a", Val: 1})
			f.src.Delete("a")
		}, "OnDelete"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f, logs, gate, _ := stuckFixture(t, mirror.HandlerOptions{})
				time.Sleep(400 * time.Millisecond) // the call begins between checks
				tt.put(f)
				synctest.Wait()
				if tt.call != "OnAdd" {
					// Let the add through; the next call is the one that
					// sticks.
					gate <- struct{}{}
					synctest.Wait()
				}

				// The checks come at uneven times, as a scheduler's would.
				var last time.Duration
				for round, step := range []time.Duration{
					period + 1700*time.Millisecond,
					period - 300*time.Millisecond,
					period + 900*time.Millisecond,
				} {
					time.Sleep(step)
					synctest.Wait()
					recs := logs.take(stuckMsg)
					require.Len(t, recs, 1, "round %d: one line per StuckAfter", round)
					r := recs[0]
					assert.Equal(t, slog.LevelWarn, r.Level)
					assert.Equal(t, "mirror: handler has not returned", r.Msg)
					assert.Equal(t, "slow", r.Attrs["handler"].String())
					assert.Equal(t, "things", r.Attrs["informer"].String())
					assert.Equal(t, tt.call, r.Attrs["call"].String())
					d := r.Attrs["for"].Duration()
					assert.GreaterOrEqual(t, d, period*time.Duration(round+1), "round %d", round)
					assert.Greater(t, d, last, "round %d: the time in the call grows", round)
					last = d
					s := handlerStats(f, "slow")
					assert.GreaterOrEqual(t, s.StuckFor, d, "Stats says how long, too")
					assert.Zero(t, handlerStats(f, "quick").StuckFor)
				}

				gate <- struct{}{}
				synctest.Wait()
				recs := logs.take(stuckMsg)
				require.Len(t, recs, 1, "once, that it returned")
				assert.Equal(t, "mirror: handler returned", recs[0].Msg)
				assert.Equal(t, slog.LevelWarn, recs[0].Level)
				assert.Equal(t, "slow", recs[0].Attrs["handler"].String())
				assert.Equal(t, tt.call, recs[0].Attrs["call"].String())
				assert.GreaterOrEqual(t, recs[0].Attrs["after"].Duration(), last)
				assert.Zero(t, handlerStats(f, "slow").StuckFor)

				time.Sleep(10 * period)
				synctest.Wait()
				assert.Empty(t, logs.take(stuckMsg), "nothing more once it returned")
				close(gate)
				f.stop()
			})
		})
	}
}

func TestInformer_StuckAfterSetsWhenAHandlerIsLogged(t *testing.T) {
	tests := []struct {
		name       string
		stuckAfter time.Duration
		effective  time.Duration // zero: never
	}{
		{"zero means 30s", 0, 30 * time.Second},
		{"set", 5 * time.Second, 5 * time.Second},
		{"shorter than a check", 10 * time.Millisecond, 10 * time.Millisecond},
		{"negative means never", -1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f, logs, gate, _ := stuckFixture(t, mirror.HandlerOptions{StuckAfter: tt.stuckAfter})
				time.Sleep(300 * time.Millisecond) // the call begins between checks
				f.src.Put(item{Name: "a", Val: 1})
				synctest.Wait()
				if tt.effective == 0 {
					time.Sleep(24 * time.Hour)
					synctest.Wait()
					assert.Empty(t, logs.take(stuckMsg), "never")
				} else {
					time.Sleep(tt.effective - time.Millisecond)
					synctest.Wait()
					assert.Empty(t, logs.take(stuckMsg), "not before StuckAfter")
					// Seen at the next check, logged at the first check
					// StuckAfter after that.
					time.Sleep(2*time.Second + time.Millisecond)
					synctest.Wait()
					assert.NotEmpty(t, logs.take(stuckMsg), "by StuckAfter and two checks")
				}
				close(gate)
				f.stop()
			})
		})
	}
}

// TestInformer_RunWaitsForAStuckHandlerAndKeepsNamingIt pins what Run's
// doc says of a cancel while a handler is stuck: Run returns once the
// call does, the log names the handler meanwhile, and nothing Run
// started is left behind.
func TestInformer_RunWaitsForAStuckHandlerAndKeepsNamingIt(t *testing.T) {
	for _, removed := range []bool{false, true} {
		name := "registered"
		if removed {
			name = "removed"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f, logs, gate, reg := stuckFixture(t, mirror.HandlerOptions{StuckAfter: 10 * time.Second})
				f.src.Put(item{Name: "a", Val: 1})
				synctest.Wait()
				if removed {
					require.NoError(t, f.inf.RemoveEventHandler(reg))
				}
				f.cancel()
				synctest.Wait()
				select {
				case <-f.done:
					t.Fatal("Run returned while a handler was in a call")
				default:
				}
				require.NotEmpty(t, ourGoroutines("(*listener[...]).run("), "the stuck listener")

				// Seen at the first check, logged 10s later and every 10s.
				for _, step := range []time.Duration{11500 * time.Millisecond, 9800 * time.Millisecond, 10400 * time.Millisecond} {
					time.Sleep(step)
					synctest.Wait()
					recs := logs.take(stuckMsg)
					require.Len(t, recs, 1)
					assert.Equal(t, "mirror: handler has not returned; Run waits for it", recs[0].Msg)
					assert.Equal(t, "slow", recs[0].Attrs["handler"].String())
				}
				select {
				case <-f.done:
					t.Fatal("Run returned while a handler was in a call")
				default:
				}

				close(gate)
				require.NoError(t, <-f.done)
				synctest.Wait() // a goroutine past its wg.Done has exited
				recs := logs.take(stuckMsg)
				require.Len(t, recs, 1)
				assert.Equal(t, "mirror: handler returned", recs[0].Msg)
				assert.Empty(t, ourGoroutines("github.com/listwatch/mirror."), "no goroutine outlives Run")
			})
		})
	}
}

func handlerStats(f *fixture, name string) mirror.HandlerStats {
	for _, h := range f.inf.Stats().Handlers {
		if h.Name == name {
			return h
		}
	}
	return mirror.HandlerStats{}
}

// ourGoroutines returns the stacks of the goroutines whose stack holds
// fn, apart from the caller's own.
func ourGoroutines(fn string) []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var ours []string
	for i, g := range bytes.Split(buf, []byte("\n\n")) {
		if i > 0 && bytes.Contains(g, []byte(fn)) {
			ours = append(ours, string(g))
		}
	}
	return ours
}
