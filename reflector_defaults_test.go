package mirror

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReflector_LogsStartAndStopAtDebugOnly(t *testing.T) {
	tests := []struct {
		level slog.Level
		want  []string
	}{
		{level: slog.LevelInfo, want: nil},
		{level: slog.LevelDebug, want: []string{"level=DEBUG msg=\"reflector started\"", "level=DEBUG msg=\"reflector stopped\""}},
	}
	for _, tt := range tests {
		t.Run(tt.level.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var logs lineBuffer
				logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{
					Level: tt.level,
					ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
						if a.Key == slog.TimeKey {
							return slog.Attr{}
						}
						return a
					},
				}))
				g := newRig(ReflectorOptions{Logger: logger})
				g.lw.page("1", "")
				g.lw.watch()
				g.start(t)
				synctest.Wait()
				g.stopRun()

				var got []string
				for _, l := range logs.lines() {
					if strings.Contains(l, "reflector st") {
						got = append(got, l)
					}
				}
				assert.Equal(t, tt.want, got)
			})
		})
	}
}

// failingSource is a fakeLW that says whether it prefers streaming lists.
type failingSource struct {
	*fakeLW
	streaming bool
}

func (s failingSource) PrefersStreamingList() bool { return s.streaming }

func TestInformer_FirstFailureToReachTheSourceIsReportedAtOnce(t *testing.T) {
	refused := fmt.Errorf("dial tcp 127.0.0.1:2379: connect: connection refused: %w", source.ErrUnavailable)
	for _, streaming := range []bool{false, true} {
		for _, handler := range []bool{true, false} {
			name := fmt.Sprintf("streaming=%v, ErrorHandler=%v", streaming, handler)
			t.Run(name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					lw := newFakeLW()
					lw.listErr(refused)
					lw.watchErr(refused)
					var logs lineBuffer
					var mu sync.Mutex
					var errs []error
					opts := InformerOptions[string, tobj]{
						KeyFunc: tobjKey,
						Logger:  slog.New(slog.NewTextHandler(&logs, nil)),
					}
					if handler {
						opts.ErrorHandler = func(err error) {
							mu.Lock()
							defer mu.Unlock()
							errs = append(errs, err)
						}
					}
					inf := NewInformer[string, tobj](failingSource{lw, streaming}, opts)
					start := time.Now()
					runInformer(t, inf)
					synctest.Wait()
					require.Equal(t, start, time.Now(), "no time passed: the report is at once")

					f := inf.Freshness()
					require.ErrorIs(t, f.Err, source.ErrUnavailable, "Freshness().Err")
					assert.Contains(t, f.Err.Error(), "connection refused", "with the cause")
					if handler {
						mu.Lock()
						defer mu.Unlock()
						require.Len(t, errs, 1, "the ErrorHandler")
						assert.ErrorIs(t, errs[0], source.ErrUnavailable)
						assert.Contains(t, errs[0].Error(), "connection refused")
						return
					}
					lines := logs.lines()
					require.Len(t, lines, 1)
					assert.Contains(t, lines[0], "level=WARN")
					assert.Contains(t, lines[0], "connection refused")
				})
			})
		}
	}
}

func TestInformer_StreamingListWithoutItsEndSyncsThroughAPagedList(t *testing.T) {
	tests := []struct {
		name     string
		pageSize int64
		stream   []step
		// listRV is the version the paged list asks for: a consistent
		// read ("") if the cache had part of the stream.
		listRV string
		// cause is in the error reported for the stream.
		cause string
	}{
		{
			name:   "stream goes silent",
			stream: []step{addedEvent("a", "1", ""), addedEvent("b", "1", "")},
			listRV: "0",
			cause:  "after 2 objects: 10s without an event",
		},
		{
			name: "stream goes silent after slow events, the cache holding part of it",
			// Each pause is under the bound: only the silence counts.
			stream: []step{
				addedEvent("a", "1", ""),
				{after: 8 * time.Second, ev: source.Event[tobj]{Type: source.Added, Object: tobj{"b", "1"}}},
				{after: 8 * time.Second, ev: source.Event[tobj]{Type: source.Added, Object: tobj{"c", "1"}}},
			},
			pageSize: 1,
			listRV:   "",
			cause:    "after 3 objects: 10s without an event",
		},
		{
			name:   "stream goes on with changes",
			stream: []step{addedEvent("a", "1", ""), modified("a", "2", "8")},
			listRV: "0",
			cause:  "updated event before it, after 1 objects",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				lw := newFakeLW()
				stream := lw.watch(tt.stream...)
				lw.page("9", "", tobj{"a", "2"}, tobj{"b", "1"}, tobj{"c", "1"})
				lw.watch()
				var mu sync.Mutex
				var errs []error
				inf := NewInformer[string, tobj](failingSource{lw, true}, InformerOptions[string, tobj]{
					KeyFunc:   tobjKey,
					ListWatch: ListWatchOptions{PageSize: tt.pageSize},
					ErrorHandler: func(err error) {
						mu.Lock()
						defer mu.Unlock()
						errs = append(errs, err)
					},
				})
				runInformer(t, inf)

				ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
				defer cancel()
				require.NoError(t, inf.WaitForSync(ctx), "synced within a minute")
				synctest.Wait()

				assert.Equal(t, "9", inf.Freshness().ResourceVersion, "through the list")
				assert.NoError(t, inf.Freshness().Err)
				assert.Equal(t, 3, inf.cache.Len())
				assert.Equal(t, []string{tt.listRV}, lw.ListVersions())
				assert.True(t, stream.Stopped())
				calls := lw.Watches()
				require.Len(t, calls, 2)
				assert.True(t, calls[0].Opts.SendInitialEvents)
				assert.False(t, calls[1].Opts.SendInitialEvents, "a watch after the list, no streaming list again")
				mu.Lock()
				defer mu.Unlock()
				require.Len(t, errs, 1, "reported once")
				assert.ErrorIs(t, errs[0], errNoInitialEventsEnd)
				assert.ErrorContains(t, errs[0], tt.cause)
				assert.ErrorContains(t, errs[0], "using List from now on")
			})
		})
	}
}
