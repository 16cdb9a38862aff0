package mirror

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Errors as a source would return them: wrapped, found by errors.Is.
var (
	errBoom           = errors.New("boom")
	errSrcExpired     = fmt.Errorf("source: compacted: %w", source.ErrExpired)
	errSrcTooLarge    = fmt.Errorf("source: lagging: %w", source.ErrTooLargeResourceVersion)
	errSrcUnavailable = fmt.Errorf("source: no leader: %w", source.ErrUnavailable)
	errSrcUnsupported = fmt.Errorf("source: no streaming: %w", errors.ErrUnsupported)
)

// noJitter makes pauses exact, so tests can compare them.
const noJitter = -1

func listOpts(calls []listCall) []source.ListOptions {
	var opts []source.ListOptions
	for _, c := range calls {
		opts = append(opts, c.Opts)
	}
	return opts
}

func TestReflector_ListsFirstAtAnyVersionPagedThenReplaces(t *testing.T) {
	tests := []struct {
		name     string
		pageSize int64
		limit    int64
	}{
		{name: "page size set", pageSize: 2, limit: 2},
		{name: "default page size", pageSize: 0, limit: 5000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g := newRig(ReflectorOptions{ListWatch: ListWatchOptions{PageSize: tt.pageSize}})
				g.lw.page("10", "c1", tobj{"a", "1"}, tobj{"b", "1"})
				// Later pages carry another version: the list's version
				// is the first page's.
				g.lw.page("99", "c2", tobj{"c", "1"})
				g.lw.page("99", "", tobj{"d", "1"})
				g.start(t)
				synctest.Wait()

				assert.Equal(t, []source.ListOptions{
					{ResourceVersion: "0", Limit: tt.limit},
					{Limit: tt.limit, Continue: "c1"},
					{Limit: tt.limit, Continue: "c2"},
				}, listOpts(g.lw.Lists()))
				assert.Equal(t, []string{"replace@10 [a=1 b=1 c=1 d=1]"}, g.store.Log())
				assert.Equal(t, "10", g.r.Freshness().ResourceVersion)
				assert.Equal(t, []string{"10"}, g.lw.WatchVersions(), "watches from the list's version")
				assert.Empty(t, g.errs.Errors())
				g.stopRun()
			})
		})
	}
}

func TestReflector_RelistsAtLastSeenVersion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newRig(ReflectorOptions{})
		g.lw.page("10", "")
		g.lw.watch(addedEvent("a", "1", "11"), bookmark("12"), end(errBoom))
		g.lw.page("12", "", tobj{"a", "1"})
		g.runFor(t, time.Minute)

		assert.Equal(t, []string{"0", "12"}, g.lw.ListVersions())
		g.stopRun()
	})
}

func TestReflector_GoneVersionOnListRelistsConsistentlyAtOnce(t *testing.T) {
	tests := []struct {
		name      string
		script    func(lw *fakeLW)
		wantLists []source.ListOptions
		wantLog   []string
	}{{
		name: "first page expired",
		script: func(lw *fakeLW) {
			lw.listErr(errSrcExpired)
			lw.page("20", "", tobj{"a", "1"})
		},
		wantLists: []source.ListOptions{{ResourceVersion: "0", Limit: 2}, {ResourceVersion: "", Limit: 2}},
		wantLog:   []string{"replace@20 [a=1]"},
	}, {
		name: "continuation expired: relist from scratch",
		script: func(lw *fakeLW) {
			lw.page("10", "c1", tobj{"a", "1"}, tobj{"b", "1"})
			lw.listErr(errSrcExpired)
			lw.page("20", "", tobj{"b", "2"})
		},
		wantLists: []source.ListOptions{
			{ResourceVersion: "0", Limit: 2},
			{Limit: 2, Continue: "c1"},
			{ResourceVersion: "", Limit: 2},
		},
		wantLog: []string{"replace@20 [b=2]"},
	}, {
		name: "consistent list's continuation expired: read in one request",
		script: func(lw *fakeLW) {
			lw.listErr(errSrcExpired)
			lw.page("20", "c1", tobj{"a", "1"}, tobj{"b", "1"})
			lw.listErr(errSrcExpired)
			lw.page("30", "", tobj{"a", "1"}, tobj{"b", "1"}, tobj{"c", "1"})
		},
		wantLists: []source.ListOptions{
			{ResourceVersion: "0", Limit: 2},
			{ResourceVersion: "", Limit: 2},
			{Limit: 2, Continue: "c1"},
			{ResourceVersion: "", Limit: 0},
		},
		wantLog: []string{"replace@30 [a=1 b=1 c=1]"},
	}, {
		name: "relist at last version too large",
		script: func(lw *fakeLW) {
			lw.page("10", "")
			lw.watch(addedEvent("a", "1", "12"), end(errBoom))
			lw.listErr(errSrcTooLarge)
			lw.page("15", "", tobj{"a", "1"})
		},
		wantLists: []source.ListOptions{
			{ResourceVersion: "0", Limit: 2},
			{ResourceVersion: "12", Limit: 2},
			{ResourceVersion: "", Limit: 2},
		},
		wantLog: []string{"replace@10 []", "add a=1", "replace@15 [a=1]"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g := newRig(ReflectorOptions{ListWatch: ListWatchOptions{PageSize: 2}})
				tt.script(g.lw)
				g.runFor(t, time.Minute)

				calls := g.lw.Lists()
				require.Equal(t, tt.wantLists, listOpts(calls))
				last := calls[len(calls)-1].At
				assert.Equal(t, calls[len(calls)-2].At, last, "the relist after a gone version does not pause")
				assert.Equal(t, tt.wantLog, g.store.Log())
				errs := g.errs.Errors()
				require.NotEmpty(t, errs)
				assert.True(t, isGone(errs[len(errs)-1]), "the gone version is reported: %v", errs)
				g.stopRun()
			})
		})
	}
}

func TestReflector_GoneVersionOnConsistentListBacksOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newRig(ReflectorOptions{ListWatch: ListWatchOptions{Jitter: noJitter}})
		g.lw.listErr(errSrcExpired)
		g.lw.listErr(errSrcExpired)
		g.runFor(t, time.Second)

		calls := g.lw.Lists()
		require.Len(t, calls, 3, "consistent list refused: pause, then try again")
		assert.Equal(t, []string{"0", "", ""}, g.lw.ListVersions())
		assert.Equal(t, []time.Duration{0, 800 * time.Millisecond}, gaps(listTimes(calls)))
		g.stopRun()
	})
}

func TestReflector_TooLargeWatchRelistsConsistentlyNotInALoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newRig(ReflectorOptions{})
		g.lw.page("10", "")
		g.lw.watchErr(errSrcTooLarge)
		g.lw.page("20", "")
		g.start(t)
		synctest.Wait()

		assert.Equal(t, []string{"0", ""}, g.lw.ListVersions(), "never asks again for the version the source refused")
		assert.Equal(t, []string{"10", "20"}, g.lw.WatchVersions())
		calls := g.lw.Lists()
		assert.Equal(t, calls[0].At, calls[1].At, "relists at once")
		g.stopRun()
	})
}

func TestReflector_WatchesFromListVersionWithBookmarksAndRandomTimeout(t *testing.T) {
	tests := []struct {
		name    string
		timeout time.Duration
		min     time.Duration
	}{
		{name: "default", timeout: 0, min: 5 * time.Minute},
		{name: "set", timeout: time.Minute, min: time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g := newRig(ReflectorOptions{ListWatch: ListWatchOptions{WatchTimeout: tt.timeout}})
				g.lw.page("10", "")
				const n = 40
				for range n {
					g.lw.watch(eofAfter(2 * time.Second))
				}
				g.start(t)
				synctest.Wait()
				// Advance the fake clock through the n watches.
				time.Sleep(n * 2 * time.Second)
				synctest.Wait()

				calls := g.lw.Watches()
				require.Len(t, calls, n+1)
				timeouts := map[time.Duration]bool{}
				for _, c := range calls {
					assert.Equal(t, "10", c.Opts.ResourceVersion)
					assert.True(t, c.Opts.AllowBookmarks)
					assert.False(t, c.Opts.SendInitialEvents)
					assert.GreaterOrEqual(t, c.Opts.Timeout, tt.min)
					assert.Less(t, c.Opts.Timeout, 2*tt.min)
					timeouts[c.Opts.Timeout] = true
				}
				assert.Greater(t, len(timeouts), 1, "timeouts are random")
				g.stopRun()
			})
		})
	}
}

func TestReflector_AppliesEventsInOrderAndAdvancesVersion(t *testing.T) {
	objErr := &ObjectError{Key: "bad", Err: errors.New("cannot decode")}
	steps := []struct {
		step    step
		wantRV  string
		wantLog string // the store call it makes, if any
	}{
		{step: addedEvent("a", "1", "11"), wantRV: "11", wantLog: "add a=1"},
		{step: modified("a", "2", "12"), wantRV: "12", wantLog: "update a=2"},
		{step: bookmark("13"), wantRV: "13"},
		{step: addedEvent("b", "1", "14"), wantRV: "14", wantLog: "add b=1"},
		{step: deletedEvent("a", "2", "15"), wantRV: "15", wantLog: "delete a=2"},
		{step: errEvent("", objErr), wantRV: "15"},
		{step: errEvent("16", objErr), wantRV: "16"},
		{step: step{ev: source.Event[tobj]{Type: source.EventType(42), ResourceVersion: "17"}}, wantRV: "17"},
	}
	synctest.Test(t, func(t *testing.T) {
		g := newRig(ReflectorOptions{})
		g.lw.page("10", "")
		w := g.lw.watch()
		g.start(t)
		synctest.Wait()
		wantLog := []string{"replace@10 []"}
		for _, s := range steps {
			w.push(s.step)
			synctest.Wait()
			if s.wantLog != "" {
				wantLog = append(wantLog, s.wantLog)
			}
			assert.Equal(t, wantLog, g.store.Log(), "after %v", s.step.ev.Type)
			assert.Equal(t, s.wantRV, g.r.Freshness().ResourceVersion, "after %v", s.step.ev.Type)
		}

		errs := g.errs.Errors()
		require.Len(t, errs, 3, "two error events and one unknown event type")
		for _, err := range errs[:2] {
			var oe *ObjectError
			require.ErrorAs(t, err, &oe)
			assert.Equal(t, "bad", oe.Key)
		}
		assert.ErrorContains(t, errs[2], "unknown event type")
		assert.Len(t, g.lw.Watches(), 1, "error events do not end the watch")
		assert.Equal(t, int64(len(steps)), g.r.Stats().Events)
		g.stopRun()
	})
}

// keyOnlyStore is a recStore that takes key-only deletions apart.
type keyOnlyStore struct{ *recStore }

func (s keyOnlyStore) DeleteKeyOnly(obj tobj) error { return s.record("delete-key-only", obj) }

func TestReflector_KeyOnlyDeletionGoesToDeleteKeyOnlyWhereTheStoreHasIt(t *testing.T) {
	keyOnly := step{ev: source.Event[tobj]{Type: source.Deleted, Object: tobj{Key: "a"}, ResourceVersion: "12", KeyOnly: true}}
	for _, tc := range []struct {
		name    string
		store   func(*recStore) ReflectorStore[tobj]
		wantLog []string
	}{
		{"KeyOnlyDeleter", func(s *recStore) ReflectorStore[tobj] { return keyOnlyStore{s} },
			[]string{"replace@10 []", "delete-key-only a=", "delete b=2"}},
		{"plain store", func(s *recStore) ReflectorStore[tobj] { return s },
			[]string{"replace@10 []", "delete a=", "delete b=2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				lw, rec := newFakeLW(), newRecStore()
				r := NewReflector[tobj](lw, tc.store(rec), ReflectorOptions{})
				lw.page("10", "")
				lw.watch(keyOnly, deletedEvent("b", "2", "13"))
				ctx, cancel := context.WithCancel(t.Context())
				done := make(chan struct{})
				go func() { defer close(done); r.Run(ctx) }()
				synctest.Wait()
				assert.Equal(t, tc.wantLog, rec.Log())
				assert.Equal(t, "13", r.Freshness().ResourceVersion)
				cancel()
				<-done
			})
		})
	}
}

func TestReflector_WatchEndedNormallyRewatchesFromLastVersionAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newRig(ReflectorOptions{})
		g.lw.page("10", "")
		g.lw.watch(addedEvent("a", "1", "11"), end(io.EOF)) // short, but had an event
		g.lw.watch(eofAfter(5 * time.Minute))               // long, no event
		g.lw.watch()
		g.runFor(t, 5*time.Minute)

		calls := g.lw.Watches()
		assert.Equal(t, []string{"10", "11", "11"}, g.lw.WatchVersions())
		assert.Equal(t, []time.Duration{0, 5 * time.Minute}, gaps(watchTimes(calls)), "no pause")
		assert.Len(t, g.lw.Lists(), 1, "no relist")
		assert.Empty(t, g.errs.Errors())
		g.stopRun()
	})
}

func TestReflector_VeryShortWatchIsReportedAndBacksOff(t *testing.T) {
	tests := []struct {
		name  string
		after time.Duration
	}{
		{name: "closed at once", after: 0},
		{name: "closed after 999ms", after: 999 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g := newRig(ReflectorOptions{ListWatch: ListWatchOptions{Jitter: noJitter}})
				g.lw.page("10", "")
				g.lw.watch(eofAfter(tt.after))
				g.lw.watch()
				g.runFor(t, 2*time.Second)

				errs := g.errs.Errors()
				require.Len(t, errs, 1)
				assert.ErrorIs(t, errs[0], errVeryShortWatch)
				calls := g.lw.Watches()
				// The pause counts from the start of the watch that
				// failed: watches are at least one backoff apart.
				assert.Equal(t, []time.Duration{max(tt.after, 800*time.Millisecond)}, gaps(watchTimes(calls)))
				assert.Equal(t, []string{"10", "10"}, g.lw.WatchVersions())
				assert.Len(t, g.lw.Lists(), 1, "no relist")
				g.stopRun()
			})
		})
	}
}

func TestReflector_ExpiredWatchRelistsAtLastVersionThenConsistent(t *testing.T) {
	eachWatchFailure(t, ReflectorOptions{}, errSrcExpired, func(t *testing.T, g *reflectorRig, lastRV string) {
		g.lw.listErr(errSrcExpired) // the last version is gone for List too
		g.lw.page("20", "")
		g.start(t)
		synctest.Wait()

		assert.Equal(t, []string{"0", lastRV, ""}, g.lw.ListVersions())
		calls := g.lw.Lists()
		assert.Equal(t, []time.Duration{0, 0}, gaps(listTimes(calls)), "relists at once")
		assert.Equal(t, []string{"10", "20"}, g.lw.WatchVersions())
		require.NotEmpty(t, g.errs.Errors())
		assert.ErrorIs(t, g.errs.Errors()[0], source.ErrExpired, "the expiry is reported")
		g.stopRun()
	})
}

func TestReflector_SourceThatKeepsExpiringIsPacedByBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newRig(ReflectorOptions{ListWatch: ListWatchOptions{Jitter: noJitter}})
		for range 4 {
			g.lw.page("10", "")
			g.lw.watchErr(errSrcExpired)
		}
		g.runFor(t, time.Minute)

		calls := g.lw.Lists()
		require.Len(t, calls, 5)
		assert.Equal(t,
			[]time.Duration{0, 800 * time.Millisecond, 1600 * time.Millisecond, 3200 * time.Millisecond},
			gaps(listTimes(calls)),
			"the first expiry relists at once; an expiry with no event since the last relist pauses")
		g.stopRun()
	})
}

func TestReflector_RepeatedExpiryWithoutEventsRelistsConsistently(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newRig(ReflectorOptions{ListWatch: ListWatchOptions{Jitter: noJitter}})
		g.lw.page("10", "")
		g.lw.watchErr(errSrcExpired)
		g.lw.page("10", "") // the list at "10" still answers...
		g.lw.watchErr(errSrcExpired)
		g.lw.page("12", "") // ...but only a consistent one moves on
		g.lw.watch()
		g.runFor(t, time.Minute)

		assert.Equal(t, []string{"0", "10", ""}, g.lw.ListVersions(),
			"a second expiry with no event since the relist forgets the version")
		assert.Equal(t, []string{"10", "10", "12"}, g.lw.WatchVersions())
		g.stopRun()
	})
}

func TestReflector_UnavailableWatchPausesAndRewatchesWithoutRelist(t *testing.T) {
	eachWatchFailure(t, ReflectorOptions{ListWatch: ListWatchOptions{Jitter: noJitter}}, errSrcUnavailable, func(t *testing.T, g *reflectorRig, lastRV string) {
		g.lw.watch()
		g.runFor(t, time.Second)

		assert.Equal(t, []string{"10", lastRV}, g.lw.WatchVersions())
		assert.Equal(t, []time.Duration{800 * time.Millisecond}, gaps(watchTimes(g.lw.Watches())))
		assert.Len(t, g.lw.Lists(), 1, "no relist")
		require.Len(t, g.errs.Errors(), 1)
		assert.ErrorIs(t, g.errs.Errors()[0], source.ErrUnavailable)
		assert.Equal(t, int64(1), g.r.Stats().WatchRestarts)
		g.stopRun()
	})
}

func TestReflector_OtherWatchErrorBacksOffAndRelists(t *testing.T) {
	eachWatchFailure(t, ReflectorOptions{ListWatch: ListWatchOptions{Jitter: noJitter}}, errBoom, func(t *testing.T, g *reflectorRig, lastRV string) {
		g.lw.page("12", "")
		g.runFor(t, time.Second)

		assert.Equal(t, []string{"0", lastRV}, g.lw.ListVersions())
		assert.Equal(t, []time.Duration{800 * time.Millisecond}, gaps(listTimes(g.lw.Lists())))
		require.Len(t, g.errs.Errors(), 1)
		assert.ErrorIs(t, g.errs.Errors()[0], errBoom)
		assert.ErrorContains(t, g.errs.Errors()[0], "watch from version")
		g.stopRun()
	})
}

func TestReflector_NilWatcherWithoutErrorIsAFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newRig(ReflectorOptions{ListWatch: ListWatchOptions{Jitter: noJitter}})
		g.lw.page("10", "")
		g.lw.watches <- watchReply{} // neither a Watcher nor an error
		g.lw.page("10", "")
		g.runFor(t, time.Second)

		require.Len(t, g.errs.Errors(), 1)
		assert.ErrorIs(t, g.errs.Errors()[0], errNoWatcher)
		assert.Equal(t, []string{"0", "10"}, g.lw.ListVersions(), "backs off and relists")
		g.stopRun()
	})
}

// failLists makes the rig's source fail n lists in a row and returns the
// pauses between them once they all happened.
func failLists(t *testing.T, g *reflectorRig, n int) []time.Duration {
	for range n {
		g.lw.listErr(errBoom)
	}
	g.runFor(t, time.Hour)
	calls := g.lw.Lists()
	require.Len(t, calls, n+1)
	return gaps(listTimes(calls))
}

func TestReflector_BackoffDoublesUpToMax(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newRig(ReflectorOptions{ListWatch: ListWatchOptions{InitialBackoff: time.Second, MaxBackoff: 10 * time.Second, Jitter: noJitter}})
		pauses := failLists(t, g, 7)
		assert.Equal(t, []time.Duration{
			time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second,
			10 * time.Second, 10 * time.Second, 10 * time.Second,
		}, pauses)
		g.stopRun()
	})
}

func TestReflector_BackoffDefaultsTo800msUpTo30s(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newRig(ReflectorOptions{ListWatch: ListWatchOptions{Jitter: noJitter}})
		pauses := failLists(t, g, 8)
		assert.Equal(t, []time.Duration{
			800 * time.Millisecond, 1600 * time.Millisecond, 3200 * time.Millisecond, 6400 * time.Millisecond,
			12800 * time.Millisecond, 25600 * time.Millisecond, 30 * time.Second, 30 * time.Second,
		}, pauses)
		g.stopRun()
	})
}

func TestReflector_BackoffJitterStaysInBounds(t *testing.T) {
	tests := []struct {
		name   string
		jitter float64
		factor float64 // the jitter in effect
	}{
		{name: "default", jitter: 0, factor: 1.0},
		{name: "half", jitter: 0.5, factor: 0.5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g := newRig(ReflectorOptions{ListWatch: ListWatchOptions{InitialBackoff: time.Second, MaxBackoff: 4 * time.Second, Jitter: tt.jitter}})
				pauses := failLists(t, g, 40)
				jittered := 0
				base := time.Second / 2
				for i, p := range pauses {
					base = min(2*base, 4*time.Second)
					assert.GreaterOrEqual(t, p, base, "pause %d", i)
					assert.LessOrEqual(t, p, time.Duration(float64(base)*(1+tt.factor)), "pause %d", i)
					if p != base {
						jittered++
					}
				}
				assert.Greater(t, jittered, len(pauses)/2, "pauses are jittered")
				g.stopRun()
			})
		})
	}
}

func TestReflector_BackoffResetsAfterHealthyPeriod(t *testing.T) {
	tests := []struct {
		name      string
		healthy   time.Duration
		wantPause time.Duration
	}{
		// The watch that fails has lasted longer than its pause, so the
		// relist follows at once; the base of the pauses shows in the
		// pause after the relist fails too: reset, it is 1.6s, the
		// second step; not reset, 12.8s, after 0.8, 1.6, 3.2 and 6.4.
		{name: "healthy for BackoffReset", healthy: 2 * time.Minute, wantPause: 1600 * time.Millisecond},
		{name: "healthy for less", healthy: 2*time.Minute - time.Second, wantPause: 12800 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g := newRig(ReflectorOptions{ListWatch: ListWatchOptions{Jitter: noJitter}})
				for range 3 { // pauses of 0.8s, 1.6s, 3.2s
					g.lw.listErr(errBoom)
				}
				g.lw.page("10", "")
				g.lw.watch(step{after: tt.healthy, err: errBoom})
				g.lw.listErr(errBoom)
				g.lw.page("20", "")
				g.runFor(t, time.Hour)

				calls := g.lw.Lists()
				require.Len(t, calls, 6)
				failedAt := calls[3].At.Add(tt.healthy)
				assert.Equal(t, failedAt, calls[4].At, "the watch lasted longer than its pause")
				assert.Equal(t, tt.wantPause, calls[5].At.Sub(calls[4].At))
				g.stopRun()
			})
		})
	}
}

func TestReflector_PauseCountsFromTheStartOfTheFailedAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newRig(ReflectorOptions{ListWatch: ListWatchOptions{InitialBackoff: 10 * time.Second, Jitter: noJitter}})
		g.lw.page("10", "")
		// A watch that waited 4s before the source said it was
		// unavailable has waited 4s of its 10s pause already.
		g.lw.watch(step{after: 4 * time.Second, err: errSrcUnavailable})
		// One that failed at once waits its whole pause, now doubled.
		g.lw.watchErr(errSrcUnavailable)
		// One that outlasted its pause is followed at once.
		g.lw.watch(step{after: time.Minute, err: errSrcUnavailable})
		g.lw.watch()
		g.runFor(t, time.Hour)

		assert.Equal(t, []time.Duration{10 * time.Second, 20 * time.Second, time.Minute},
			gaps(watchTimes(g.lw.Watches())))
		assert.Len(t, g.lw.Lists(), 1, "no relist")
		g.stopRun()
	})
}

func TestReflector_WatchThatDeliversResetsBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newRig(ReflectorOptions{ListWatch: ListWatchOptions{Jitter: noJitter}})
		g.lw.page("10", "")
		for range 3 { // pauses of 0.8s, 1.6s, 3.2s
			g.lw.watchErr(errSrcUnavailable)
		}
		// This one works for a moment: the next failure is a new one,
		// not the fourth of a series.
		g.lw.watch(addedEvent("a", "1", "11"), end(errSrcUnavailable))
		g.lw.watch()
		g.runFor(t, time.Hour)

		assert.Equal(t, []time.Duration{800 * time.Millisecond, 1600 * time.Millisecond, 3200 * time.Millisecond,
			800 * time.Millisecond}, gaps(watchTimes(g.lw.Watches())))
		g.stopRun()
	})
}

func TestReflector_ResyncsEveryPeriodWhileWatching(t *testing.T) {
	tests := []struct {
		name         string
		shouldResync func() bool
		want         int
	}{
		{name: "ShouldResync nil", want: 3},
		{name: "ShouldResync true", shouldResync: func() bool { return true }, want: 3},
		{name: "ShouldResync false", shouldResync: func() bool { return false }, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g := newRig(ReflectorOptions{ResyncPeriod: 30 * time.Second, ShouldResync: tt.shouldResync})
				g.lw.page("10", "")
				g.lw.watch()
				g.runFor(t, 95*time.Second)

				assert.Equal(t, tt.want, g.store.Count("resync"))
				g.stopRun()
			})
		})
	}
}

func TestReflector_ResyncStopsWithTheWatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var asked atomic.Int64
		g := newRig(ReflectorOptions{ResyncPeriod: 30 * time.Second, ShouldResync: func() bool {
			asked.Add(1)
			return true
		}})
		g.lw.page("10", "")
		g.lw.watch(step{after: 65 * time.Second, err: errBoom})
		// The relist then hangs: no resync may happen meanwhile.
		g.runFor(t, 10*time.Minute)

		assert.Len(t, g.lw.Lists(), 2, "relisting")
		assert.Equal(t, 2, g.store.Count("resync"), "resyncs at 30s and 60s only")
		assert.Equal(t, int64(2), asked.Load())
		g.stopRun()
	})
}

func TestReflector_ResyncErrorIsReported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lw := newFakeLW()
		errs := &errLog{}
		store := &failingResyncStore{recStore: newRecStore()}
		r := NewReflector[tobj](lw, store, ReflectorOptions{ResyncPeriod: time.Minute, ErrorHandler: errs.handle})
		lw.page("10", "")
		w := lw.watch()
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { defer close(done); r.Run(ctx) }()
		synctest.Wait()
		time.Sleep(time.Minute) // advance the fake clock
		synctest.Wait()

		require.Len(t, errs.Errors(), 1)
		assert.ErrorIs(t, errs.Errors()[0], errBoom)
		assert.False(t, w.Stopped(), "the watch goes on")
		cancel()
		<-done
	})
}

type failingResyncStore struct{ *recStore }

func (s *failingResyncStore) Resync() error { return errBoom }

func TestReflector_RunReturnsPromptlyWhenContextEnds(t *testing.T) {
	tests := []struct {
		name   string
		opts   ReflectorOptions
		script func(lw *fakeLW)
	}{
		{name: "mid-list", script: func(lw *fakeLW) {}},
		{name: "mid-paged-list", script: func(lw *fakeLW) { lw.page("10", "c1", tobj{"a", "1"}) }},
		{name: "mid-Watch-call", script: func(lw *fakeLW) { lw.page("10", "") }},
		{name: "mid-watch", script: func(lw *fakeLW) { lw.page("10", ""); lw.watch(addedEvent("a", "1", "11")) }},
		{name: "mid-watch with resync", opts: ReflectorOptions{ResyncPeriod: time.Second},
			script: func(lw *fakeLW) { lw.page("10", ""); lw.watch() }},
		{name: "mid-backoff", script: func(lw *fakeLW) { lw.listErr(errBoom) }},
		{name: "mid-unavailable-pause", script: func(lw *fakeLW) { lw.page("10", ""); lw.watchErr(errSrcUnavailable) }},
		{name: "mid-very-short-watch-pause", script: func(lw *fakeLW) { lw.page("10", ""); lw.watch(end(io.EOF)) }},
		{name: "mid-streaming-list", opts: ReflectorOptions{ListWatch: ListWatchOptions{StreamingList: true}},
			script: func(lw *fakeLW) { lw.watch(addedEvent("a", "1", "5")) }},
		{name: "mid-watch after streaming list", opts: ReflectorOptions{ListWatch: ListWatchOptions{StreamingList: true}},
			script: func(lw *fakeLW) { lw.watch(addedEvent("a", "1", "5"), initialEnd("6")) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tt.opts.ListWatch.MaxBackoff = time.Hour
				tt.opts.ListWatch.InitialBackoff = time.Hour
				g := newRig(tt.opts)
				tt.script(g.lw)
				g.start(t)
				synctest.Wait()
				require.False(t, g.returned())

				g.stop()
				// synctest.Wait lets no fake time pass: Run must return
				// without waiting for any timer.
				synctest.Wait()
				assert.True(t, g.returned(), "Run returned")
				<-g.done
				// synctest.Test fails if any goroutine Run started is
				// still there.
			})
		})
	}
}

func TestReflector_RunsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newRig(ReflectorOptions{})
		g.start(t)
		synctest.Wait()
		g.r.Run(t.Context()) // returns at once: the test would deadlock otherwise
		require.Len(t, g.errs.Errors(), 1)
		assert.ErrorIs(t, g.errs.Errors()[0], ErrStarted)
		assert.Len(t, g.lw.Lists(), 1)
		g.stopRun()

		g.r.Run(t.Context()) // after the first returned: the same
		require.Len(t, g.errs.Errors(), 2)
		assert.ErrorIs(t, g.errs.Errors()[1], ErrStarted)
		assert.Len(t, g.lw.Lists(), 1)
	})
}

func TestReflector_RunStopsTheWatcher(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newRig(ReflectorOptions{})
		g.lw.page("10", "")
		w := g.lw.watch()
		g.start(t)
		synctest.Wait()
		g.stopRun()
		assert.True(t, w.Stopped())
	})
}

func TestReflector_StreamingListReplacesAtEndBookmarkAndKeepsWatching(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newRig(ReflectorOptions{ListWatch: ListWatchOptions{StreamingList: true, WatchTimeout: time.Minute}})
		objErr := &ObjectError{Key: "bad", Err: errors.New("cannot decode")}
		w := g.lw.watch(
			addedEvent("a", "1", "5"),
			bookmark("6"), // not the end: only a version
			errEvent("", objErr),
			addedEvent("b", "1", "7"),
			initialEnd("8"),
			modified("a", "2", "9"),
		)
		g.start(t)
		synctest.Wait()

		calls := g.lw.Watches()
		require.Len(t, calls, 1, "watches on the stream of the list")
		opts := calls[0].Opts
		assert.Equal(t, "", opts.ResourceVersion, "the first streaming list is consistent")
		assert.True(t, opts.SendInitialEvents)
		assert.True(t, opts.AllowBookmarks)
		assert.GreaterOrEqual(t, opts.Timeout, time.Minute)
		assert.Less(t, opts.Timeout, 2*time.Minute)
		assert.Empty(t, g.lw.Lists())
		assert.False(t, w.Stopped())

		assert.Equal(t, []string{"replace@8 [a=1 b=1]", "update a=2"}, g.store.Log())
		assert.Equal(t, "9", g.r.Freshness().ResourceVersion)
		require.Len(t, g.errs.Errors(), 1)
		assert.ErrorAs(t, g.errs.Errors()[0], &objErr)
		st := g.r.Stats()
		assert.Equal(t, ReflectorStats{Lists: 1, Watches: 1, Events: 6, Errors: 1, Skipped: 1}, st)
		g.stopRun()
	})
}

func TestReflector_StreamingListFallsBackToListWhenUnsupported(t *testing.T) {
	tests := []struct {
		name   string
		script func(lw *fakeLW)
	}{
		{name: "from Watch", script: func(lw *fakeLW) { lw.watchErr(errSrcUnsupported) }},
		{name: "from Next", script: func(lw *fakeLW) { lw.watch(end(errSrcUnsupported)) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g := newRig(ReflectorOptions{ListWatch: ListWatchOptions{StreamingList: true, Jitter: noJitter}})
				tt.script(g.lw)
				g.lw.page("10", "")
				g.lw.watch(addedEvent("a", "1", "11"), end(errBoom))
				g.lw.page("11", "")
				g.lw.watch()
				g.runFor(t, time.Second)

				assert.Equal(t, []string{"0", "11"}, g.lw.ListVersions(), "lists, and relists with List")
				calls := g.lw.Watches()
				require.Len(t, calls, 3)
				assert.True(t, calls[0].Opts.SendInitialEvents)
				assert.False(t, calls[1].Opts.SendInitialEvents)
				assert.False(t, calls[2].Opts.SendInitialEvents, "no more streaming lists")
				lists := g.lw.Lists()
				require.NotEmpty(t, lists)
				assert.Equal(t, calls[0].At, lists[0].At, "falls back at once")
				require.Len(t, g.errs.Errors(), 1, "unsupported is not a failure")
				assert.ErrorIs(t, g.errs.Errors()[0], errBoom)
				g.stopRun()
			})
		})
	}
}

func TestReflector_StreamingListCutBeforeEndIsRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newRig(ReflectorOptions{ListWatch: ListWatchOptions{StreamingList: true, Jitter: noJitter}})
		g.lw.watch(addedEvent("a", "1", "5"), end(io.EOF))
		g.lw.watch(addedEvent("a", "1", "5"), initialEnd("6"))
		g.runFor(t, time.Second)

		calls := g.lw.Watches()
		require.Len(t, calls, 2)
		assert.True(t, calls[1].Opts.SendInitialEvents)
		assert.Equal(t, []time.Duration{800 * time.Millisecond}, gaps(watchTimes(calls)))
		assert.Equal(t, []string{"replace@6 [a=1]"}, g.store.Log(), "the cut stream changed nothing")
		require.Len(t, g.errs.Errors(), 1)
		assert.ErrorIs(t, g.errs.Errors()[0], errStreamCut)
		g.stopRun()
	})
}

func TestReflector_StreamingRelistStartsAtLastVersionThenConsistent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newRig(ReflectorOptions{ListWatch: ListWatchOptions{StreamingList: true}})
		g.lw.watch(initialEnd("8"), addedEvent("a", "1", "9"), end(errSrcExpired))
		g.lw.watchErr(errSrcExpired)
		g.lw.watch(initialEnd("20"))
		g.start(t)
		synctest.Wait()

		calls := g.lw.Watches()
		require.Len(t, calls, 3)
		assert.Equal(t, []string{"", "9", ""}, g.lw.WatchVersions())
		for _, c := range calls {
			assert.True(t, c.Opts.SendInitialEvents)
		}
		assert.Equal(t, []time.Duration{0, 0}, gaps(watchTimes(calls)), "at once")
		assert.Equal(t, "20", g.r.Freshness().ResourceVersion)
		g.stopRun()
	})
}

func TestReflector_StreamingListWithChangesBeforeEndFallsBackToList(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newRig(ReflectorOptions{ListWatch: ListWatchOptions{StreamingList: true}})
		w := g.lw.watch(addedEvent("a", "1", "5"), modified("a", "2", "6"))
		g.lw.page("6", "", tobj{"a", "2"})
		g.lw.watch()
		g.start(t)
		synctest.Wait()

		assert.True(t, w.Stopped())
		assert.Equal(t, []string{"replace@6 [a=2]"}, g.store.Log(), "the stream changed nothing; the list did")
		require.Len(t, g.errs.Errors(), 1)
		assert.ErrorIs(t, g.errs.Errors()[0], errNoInitialEventsEnd)
		assert.ErrorContains(t, g.errs.Errors()[0], "updated event before it")
		calls := g.lw.Watches()
		require.Len(t, calls, 2)
		assert.False(t, calls[1].Opts.SendInitialEvents, "no more streaming lists")
		g.stopRun()
	})
}

func TestReflector_StoreErrorIsReportedAndSkipped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newRig(ReflectorOptions{})
		g.store.fail["bad"] = errors.New("no key")
		g.lw.page("10", "")
		g.lw.watch(addedEvent("bad", "1", "11"), addedEvent("good", "1", "12"))
		g.start(t)
		synctest.Wait()

		require.Len(t, g.errs.Errors(), 1)
		var ke *KeyError
		require.ErrorAs(t, g.errs.Errors()[0], &ke)
		assert.Equal(t, tobj{"bad", "1"}, ke.Object)
		assert.Equal(t, "12", g.r.Freshness().ResourceVersion)
		assert.Equal(t, []string{"replace@10 []", "add bad=1", "add good=1"}, g.store.Log())
		assert.Len(t, g.lw.Watches(), 1, "the watch goes on")
		g.stopRun()
	})
}

func TestReflector_ListSkippedObjectsAreReported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newRig(ReflectorOptions{})
		skipped := &ObjectError{Key: "bad", ResourceVersion: "9", Err: errors.New("cannot decode")}
		g.lw.lists <- listReply{res: source.ListResult[tobj]{
			Items: []tobj{{"a", "1"}}, ResourceVersion: "10", Skipped: []error{skipped},
		}}
		g.lw.watch()
		g.start(t)
		synctest.Wait()

		require.Len(t, g.errs.Errors(), 1)
		var oe *ObjectError
		require.ErrorAs(t, g.errs.Errors()[0], &oe)
		assert.Equal(t, "bad", oe.Key)
		assert.Equal(t, []string{"replace@10 [a=1]"}, g.store.Log())
		g.stopRun()
	})
}

func TestReflector_ReplaceErrorIsReportedAndWatchGoesOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newRig(ReflectorOptions{})
		g.store.replaceErr = &KeyError{Object: tobj{"bad", "1"}, Err: errBoom}
		g.lw.page("10", "", tobj{"a", "1"})
		g.lw.watch()
		g.start(t)
		synctest.Wait()

		require.Len(t, g.errs.Errors(), 1)
		assert.ErrorIs(t, g.errs.Errors()[0], errBoom)
		assert.Equal(t, "10", g.r.Freshness().ResourceVersion)
		assert.Equal(t, []string{"10"}, g.lw.WatchVersions())
		g.stopRun()
	})
}

func TestReflector_StatsCountWhatHappened(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newRig(ReflectorOptions{})
		g.lw.page("10", "")
		g.lw.watch(addedEvent("a", "1", "11"), bookmark("12"), end(io.EOF))
		g.lw.watch(end(errSrcExpired))
		g.lw.page("20", "")
		g.lw.watch()
		g.start(t)
		synctest.Wait()

		assert.Equal(t, ReflectorStats{
			Lists: 2, Relists: 1, RelistsExpired: 1,
			Watches: 3, WatchRestarts: 1, RestartsClosed: 1,
			Events: 2, Errors: 1, WatchErrors: 1,
		}, g.r.Stats())
		g.stopRun()
	})
}

func TestReflector_StatsCountRelistsAndRestartsByCauseAndErrorsByKind(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newRig(ReflectorOptions{ListWatch: ListWatchOptions{Jitter: noJitter}})
		g.lw.listErr(errBoom) // a list error
		g.lw.lists <- listReply{res: source.ListResult[tobj]{ResourceVersion: "10",
			Skipped: []error{&ObjectError{Key: "bad", ResourceVersion: "9", Err: errBoom}}}} // a skipped object
		g.lw.watch(eofAfter(0))                                        // 1: very short
		g.lw.watch(addedEvent("a", "1", "11"), end(errSrcUnavailable)) // 2: a restart after a short watch
		g.lw.watchErr(errSrcUnavailable)                               // not opened
		g.lw.watch(addedEvent("b", "1", "12"), end(io.EOF))            // 3: a restart after unavailability
		g.lw.watch(end(errBoom))                                       // 4: a restart after a normal end
		g.lw.page("20", "")                                            // a relist after an error
		g.lw.watch(end(errSrcExpired))                                 // 5
		g.lw.page("30", "")                                            // a relist after expiry
		g.lw.watch()                                                   // 6
		g.runFor(t, time.Hour)

		assert.Equal(t, ReflectorStats{
			Lists: 3, Relists: 2, RelistsExpired: 1, RelistsAfterError: 1,
			Watches: 6, WatchRestarts: 3, RestartsClosed: 1, RestartsShort: 1, RestartsUnavailable: 1,
			Events: 2, Errors: 7, ListErrors: 1, WatchErrors: 5, Skipped: 1,
		}, g.r.Stats())
		g.stopRun()
	})
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestReflector_LogsErrorsAtWarnWithoutHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf syncBuffer
		lw := newFakeLW()
		r := NewReflector[tobj](lw, newRecStore(), ReflectorOptions{
			Name:   "pods",
			Logger: slog.New(slog.NewTextHandler(&buf, nil)),
		})
		lw.listErr(errBoom)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { defer close(done); r.Run(ctx) }()
		synctest.Wait()
		cancel()
		<-done

		out := buf.String()
		assert.Contains(t, out, "level=WARN")
		assert.Contains(t, out, "reflector=pods")
		assert.Contains(t, out, `mirror: reflector \"pods\": list at version \"0\", page 1: boom`)
		assert.Equal(t, int64(1), r.Stats().Errors)
	})
}

// benchWatcher yields n Added events, then io.EOF; reset makes it yield
// them again.
type benchWatcher struct {
	i, n int
	evs  []source.Event[tobj]
}

func (w *benchWatcher) Next(context.Context) (source.Event[tobj], error) {
	if w.i == w.n {
		return source.Event[tobj]{}, io.EOF
	}
	ev := w.evs[w.i%len(w.evs)]
	w.i++
	return ev, nil
}

func (w *benchWatcher) Stop() {}

// nopStore is a ReflectorStore that does nothing.
type nopStore struct{}

func (nopStore) Add(tobj) error               { return nil }
func (nopStore) Update(tobj) error            { return nil }
func (nopStore) Delete(tobj) error            { return nil }
func (nopStore) Replace([]tobj, string) error { return nil }
func (nopStore) Resync() error                { return nil }

// BenchmarkReflector_ApplyWatchEvents measures the Reflector's own cost per
// watch event: a stream of 1024 events applied to a store that does
// nothing, without and with a periodic resync (which serialises the store
// calls with a lock).
func BenchmarkReflector_ApplyWatchEvents(b *testing.B) {
	const perStream = 1024
	w := &benchWatcher{n: perStream}
	for i := range 64 {
		w.evs = append(w.evs, source.Event[tobj]{
			Type: source.Updated, Object: tobj{fmt.Sprint("k", i), "v"}, ResourceVersion: fmt.Sprint(100 + i),
		})
	}
	for _, resync := range []time.Duration{0, time.Hour} {
		b.Run(fmt.Sprintf("resync=%v", resync > 0), func(b *testing.B) {
			r := NewReflector[tobj](nil, nopStore{}, ReflectorOptions{ResyncPeriod: resync})
			ctx := b.Context()
			b.ReportAllocs()
			for b.Loop() {
				w.i = 0
				if n, err := r.consume(ctx, w); n != perStream || err != io.EOF {
					b.Fatalf("consumed %d events, ended with %v", n, err)
				}
			}
			events := float64(b.N) * perStream
			b.ReportMetric(events/b.Elapsed().Seconds(), "events/s")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/events, "ns/event")
		})
	}
}

// A watch that fails after its events took the Reflector on is reported
// with the version it reached, not only the one it started from (an
// expiry is about the version reached), and with what the Reflector does
// next.
func TestReflector_WatchErrorNamesTheVersionReachedAndWhatComesNext(t *testing.T) {
	for _, tc := range []struct {
		err  error
		next string
	}{
		{errSrcExpired, "; listing again"},
		{errSrcUnavailable, `; watching again from version "13" after a pause`},
		{errBoom, "; listing again after a pause"},
	} {
		t.Run(tc.err.Error(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g := newRig(ReflectorOptions{ListWatch: ListWatchOptions{Jitter: noJitter}})
				g.lw.page("10", "")
				g.lw.watch(addedEvent("a", "1", "11"), modified("a", "2", "12"), bookmark("13"), end(tc.err))
				g.lw.page("20", "")
				g.lw.watch()
				g.runFor(t, time.Minute)
				require.NotEmpty(t, g.errs.Errors())
				err := g.errs.Errors()[0]
				require.ErrorIs(t, err, tc.err)
				assert.ErrorContains(t, err, `watch from version "10", reached "13": `)
				assert.Regexp(t, regexp.QuoteMeta(tc.next)+"$", err.Error())
				g.stopRun()
			})
		})
	}
}
