package memsource_test

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/listwatch/mirror/memsource"
	"github.com/listwatch/mirror/source"
)

// Watch tests run in synctest bubbles: a Next that would block forever
// fails the test as a deadlock instead of hanging it, and a goroutine left
// behind fails it too.

func watch(t *testing.T, s *memsource.Source[obj], opts source.WatchOptions) source.Watcher[obj] {
	t.Helper()
	w, err := s.Watch(t.Context(), opts)
	require.NoError(t, err)
	t.Cleanup(w.Stop)
	return w
}

func next(t *testing.T, w source.Watcher[obj]) source.Event[obj] {
	t.Helper()
	ev, err := w.Next(t.Context())
	require.NoError(t, err)
	return ev
}

// nextAsync calls Next in a goroutine and returns where its result arrives.
type result struct {
	ev  source.Event[obj]
	err error
}

func nextAsync(ctx context.Context, w source.Watcher[obj]) <-chan result {
	ch := make(chan result, 1)
	go func() {
		ev, err := w.Next(ctx)
		ch <- result{ev, err}
	}()
	return ch
}

// requireBlocked checks that nothing arrived on ch once the bubble is idle.
func requireBlocked(t *testing.T, ch <-chan result) {
	t.Helper()
	synctest.Wait()
	select {
	case r := <-ch:
		require.FailNow(t, "Next returned while it should block", "%+v", r)
	default:
	}
}

func ev(typ source.EventType, o obj, rv int) source.Event[obj] {
	return source.Event[obj]{Type: typ, Object: o, ResourceVersion: strconv.Itoa(rv)}
}

func TestWatch_ReplaysFromAPastRevisionInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSource(memsource.Options{}) // 1
		s.Put(obj{"a", 1})                  // 2
		s.Put(obj{"b", 1})                  // 3
		s.Put(obj{"a", 2})                  // 4
		s.Delete("b")                       // 5
		s.Put(obj{"b", 2})                  // 6
		// What a watch from 1, the new source's revision, sees:
		all := []source.Event[obj]{
			ev(source.Added, obj{"a", 1}, 2),
			ev(source.Added, obj{"b", 1}, 3),
			ev(source.Updated, obj{"a", 2}, 4),
			ev(source.Deleted, obj{"b", 1}, 5), // the last state
			ev(source.Added, obj{"b", 2}, 6),
		}
		for from := 1; from <= 6; from++ {
			w := watch(t, s, source.WatchOptions{ResourceVersion: strconv.Itoa(from)})
			for _, want := range all[from-1:] {
				assert.Equal(t, want, next(t, w), "watch from %d", from)
			}
			requireBlocked(t, nextAsync(t.Context(), w))
			w.Stop()
		}
	})
}

func TestWatch_FromNowSeesOnlyLaterChanges(t *testing.T) {
	for _, rv := range []string{"", "0"} {
		t.Run(fmt.Sprintf("rv=%q", rv), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newSource(memsource.Options{})
				s.Put(obj{"a", 1})
				w := watch(t, s, source.WatchOptions{ResourceVersion: rv})
				s.Put(obj{"a", 2})
				assert.Equal(t, ev(source.Updated, obj{"a", 2}, 3), next(t, w), "rv %q", rv)
			})
		})
	}
}

func TestWatch_FutureRevisionWaitsForIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSource(memsource.Options{})
		s.Put(obj{"a", 1}) // 2
		w := watch(t, s, source.WatchOptions{ResourceVersion: "4"})
		got := nextAsync(t.Context(), w)
		s.Put(obj{"a", 2}) // 3
		s.Put(obj{"a", 3}) // 4
		requireBlocked(t, got)
		s.Put(obj{"a", 4}) // 5
		synctest.Wait()
		r := <-got
		require.NoError(t, r.err)
		assert.Equal(t, ev(source.Updated, obj{"a", 4}, 5), r.ev)
	})
}

func TestWatch_FromCompactedRevisionExpires(t *testing.T) {
	tests := []struct {
		name    string
		opts    memsource.Options
		compact int64
		from    string
		wantErr error
	}{
		{"before the compaction", memsource.Options{}, 4, "3", source.ErrExpired},
		{"at the compaction", memsource.Options{}, 4, "4", nil},
		{"before the history limit", memsource.Options{HistoryLimit: 2}, 0, "3", source.ErrExpired},
		{"at the history limit", memsource.Options{HistoryLimit: 2}, 0, "4", nil},
		{"now, after compacting everything", memsource.Options{}, 6, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSource(tt.opts)
			fill(s, 5) // revisions 2 to 6
			s.Compact(tt.compact)
			w, err := s.Watch(t.Context(), source.WatchOptions{ResourceVersion: tt.from})
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			w.Stop()
		})
	}
}

func TestWatch_SlowWatcherOvertakenByCompactionExpires(t *testing.T) {
	tests := []struct {
		name     string
		opts     memsource.Options
		overtake func(s *memsource.Source[obj])
	}{
		{"compaction", memsource.Options{}, func(s *memsource.Source[obj]) {
			fill(s, 3)
			s.Compact(3)
		}},
		{"history limit", memsource.Options{HistoryLimit: 2}, func(s *memsource.Source[obj]) { fill(s, 3) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newSource(tt.opts)
				w := watch(t, s, source.WatchOptions{})
				s.Put(obj{"a", 1})
				assert.Equal(t, "2", next(t, w).ResourceVersion, tt.name)
				tt.overtake(s) // the watcher still needs revision 3
				_, err := w.Next(t.Context())
				require.ErrorIs(t, err, source.ErrExpired, tt.name)
				_, err = w.Next(t.Context())
				require.ErrorIs(t, err, source.ErrExpired, "%s: the error is final", tt.name)
			})
		})
	}
}

func TestWatch_CutWatchesEndsOpenWatchesAsUnavailable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSource(memsource.Options{})
		blocked := watch(t, s, source.WatchOptions{})
		behind := watch(t, s, source.WatchOptions{})
		got := nextAsync(t.Context(), blocked)
		synctest.Wait()
		s.Put(obj{"a", 1})
		s.Put(obj{"a", 2})
		assert.Equal(t, ev(source.Added, obj{"a", 1}, 2), next(t, behind))
		s.CutWatches()

		r := <-got // the change may or may not have been seen before the cut
		if r.err == nil {
			r.ev, r.err = blocked.Next(t.Context())
		}
		require.ErrorIs(t, r.err, source.ErrUnavailable)
		_, err := behind.Next(t.Context())
		require.ErrorIs(t, err, source.ErrUnavailable, "pending changes are dropped with the connection")
		_, err = behind.Next(t.Context())
		require.ErrorIs(t, err, source.ErrUnavailable, "the error is final")

		later := watch(t, s, source.WatchOptions{ResourceVersion: "2"})
		assert.Equal(t, ev(source.Updated, obj{"a", 2}, 3), next(t, later), "a new watch is not affected")
	})
}

func TestWatch_BookmarkGoesOnlyToWatchersThatAllowIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSource(memsource.Options{})
		s.Put(obj{"a", 1})
		with := watch(t, s, source.WatchOptions{AllowBookmarks: true})
		without := watch(t, s, source.WatchOptions{})
		s.Put(obj{"a", 2})
		s.Bookmark()
		s.Put(obj{"a", 3})

		assert.Equal(t, ev(source.Updated, obj{"a", 2}, 3), next(t, with))
		assert.Equal(t, source.Event[obj]{Type: source.Bookmark, ResourceVersion: "3"}, next(t, with),
			"the bookmark follows the changes made before it")
		assert.Equal(t, ev(source.Updated, obj{"a", 3}, 4), next(t, with))

		assert.Equal(t, ev(source.Updated, obj{"a", 2}, 3), next(t, without))
		assert.Equal(t, ev(source.Updated, obj{"a", 3}, 4), next(t, without))
		requireBlocked(t, nextAsync(t.Context(), without))
	})
}

func TestWatch_BookmarkFollowsExactlyTheChangesBeforeIt(t *testing.T) {
	// A watcher far behind reads the history in batches; the bookmark must
	// land right after the change it was made at, wherever batches split.
	tests := []struct {
		name      string
		readFirst int // events read before the bookmark is made
	}{
		{"nothing read yet", 0},
		{"inside a batch", 1},
		{"at the bookmark", 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newSource(memsource.Options{})
				w := watch(t, s, source.WatchOptions{AllowBookmarks: true})
				for i := range 100 { // revisions 2 to 101
					s.Put(obj{"a", i})
				}
				for range tt.readFirst {
					next(t, w)
				}
				s.Bookmark() // at 101, then revisions 102 to 251
				for i := range 150 {
					s.Put(obj{"b", i})
				}
				var got []string
				for range 250 - tt.readFirst + 1 {
					e := next(t, w)
					if e.Type == source.Bookmark {
						got = append(got, "bookmark "+e.ResourceVersion)
					} else {
						got = append(got, e.ResourceVersion)
					}
				}
				want := []string{}
				for rev := tt.readFirst + 2; rev <= 251; rev++ {
					want = append(want, strconv.Itoa(rev))
					if rev == 101 {
						want = append(want, "bookmark 101")
					}
				}
				if tt.readFirst == 100 {
					want = append([]string{"bookmark 101"}, want...)
				}
				assert.Equal(t, want, got)
				requireBlocked(t, nextAsync(t.Context(), w))
			})
		})
	}
}

func TestWatch_BookmarkWakesABlockedNext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSource(memsource.Options{})
		s.Put(obj{"a", 1})
		w := watch(t, s, source.WatchOptions{AllowBookmarks: true})
		got := nextAsync(t.Context(), w)
		requireBlocked(t, got)
		s.Bookmark()
		r := <-got
		require.NoError(t, r.err)
		assert.Equal(t, source.Event[obj]{Type: source.Bookmark, ResourceVersion: "2"}, r.ev)
	})
}

func TestWatch_TimeoutEndsTheStreamWithEOF(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSource(memsource.Options{})
		const timeout = 5 * time.Minute
		w := watch(t, s, source.WatchOptions{Timeout: timeout})
		got := nextAsync(t.Context(), w)
		time.Sleep(timeout - time.Nanosecond) // advances the bubble's clock
		requireBlocked(t, got)
		s.Put(obj{"a", 1})
		r := <-got
		require.NoError(t, r.err, "the stream works until the timeout")
		got = nextAsync(t.Context(), w)
		time.Sleep(time.Nanosecond)
		r = <-got
		require.ErrorIs(t, r.err, io.EOF)
	})
}

func TestWatch_StopIsIdempotentAndWakesABlockedNext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSource(memsource.Options{})
		w := watch(t, s, source.WatchOptions{Timeout: time.Hour})
		got := nextAsync(t.Context(), w)
		requireBlocked(t, got)
		w.Stop()
		r := <-got
		require.ErrorIs(t, r.err, io.EOF)
		w.Stop()
		s.Put(obj{"a", 1})
		_, err := w.Next(t.Context())
		require.ErrorIs(t, err, io.EOF, "a stopped stream delivers nothing more")
	})
}

func TestWatch_ContextEndWakesABlockedNext(t *testing.T) {
	tests := []struct {
		name string
		// watchCtx and nextCtx pick the contexts of Watch and Next from the
		// one that is canceled and one that is not.
		watchCtx, nextCtx func(canceled, other context.Context) context.Context
	}{
		{"watch context",
			func(c, _ context.Context) context.Context { return c },
			func(_, o context.Context) context.Context { return o }},
		{"next context",
			func(_, o context.Context) context.Context { return o },
			func(c, _ context.Context) context.Context { return c }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newSource(memsource.Options{})
				ctx, cancel := context.WithCancel(t.Context())
				w, err := s.Watch(tt.watchCtx(ctx, t.Context()), source.WatchOptions{Timeout: time.Hour})
				require.NoError(t, err)
				got := nextAsync(tt.nextCtx(ctx, t.Context()), w)
				requireBlocked(t, got)
				cancel()
				r := <-got
				require.ErrorIs(t, r.err, context.Canceled, tt.name)
				s.Put(obj{"a", 1})
				_, err = w.Next(t.Context())
				require.ErrorIs(t, err, context.Canceled, "%s: the error is final", tt.name)
			})
		})
	}
}

func TestWatch_SendInitialEventsThenBookmarkThenChanges(t *testing.T) {
	tests := []struct {
		name    string
		from    string
		at      int // the revision of the initial state
		initial []obj
		changes []source.Event[obj]
	}{
		{
			name: "now", from: "", at: 5,
			initial: []obj{{"a", 2}, {"c", 1}},
			changes: []source.Event[obj]{ev(source.Added, obj{"b", 9}, 6)},
		},
		{
			name: "past revision", from: "3", at: 3,
			initial: []obj{{"c", 1}, {"d", 1}},
			changes: []source.Event[obj]{
				ev(source.Added, obj{"a", 2}, 4),
				ev(source.Deleted, obj{"d", 1}, 5),
				ev(source.Added, obj{"b", 9}, 6),
			},
		},
		{name: "first change", from: "2", at: 2, initial: []obj{{"d", 1}}, changes: []source.Event[obj]{
			ev(source.Added, obj{"c", 1}, 3),
		}},
		{name: "new source", from: "1", at: 1, initial: nil, changes: []source.Event[obj]{
			ev(source.Added, obj{"d", 1}, 2),
			ev(source.Added, obj{"c", 1}, 3),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newSource(memsource.Options{}) // 1
				s.Put(obj{"d", 1})                  // 2
				s.Put(obj{"c", 1})                  // 3
				s.Put(obj{"a", 2})                  // 4
				s.Delete("d")                       // 5
				w := watch(t, s, source.WatchOptions{ResourceVersion: tt.from, SendInitialEvents: true})
				s.Put(obj{"b", 9}) // 6
				s.Bookmark()       // not allowed: no bookmark but the initial one

				for _, o := range tt.initial {
					assert.Equal(t, ev(source.Added, o, tt.at), next(t, w), tt.name)
				}
				assert.Equal(t, source.Event[obj]{Type: source.Bookmark, ResourceVersion: strconv.Itoa(tt.at), InitialEventsEnd: true},
					next(t, w), tt.name)
				for _, want := range tt.changes {
					assert.Equal(t, want, next(t, w), tt.name)
				}
			})
		})
	}
}

func TestWatch_SendInitialEventsOutsideTheHistoryFails(t *testing.T) {
	s := newSource(memsource.Options{})
	fill(s, 4) // revisions 2 to 5
	s.Compact(3)
	for rv, wantErr := range map[string]error{"2": source.ErrExpired, "6": source.ErrTooLargeResourceVersion} {
		_, err := s.Watch(t.Context(), source.WatchOptions{ResourceVersion: rv, SendInitialEvents: true})
		require.ErrorIs(t, err, wantErr, "rv %s", rv)
	}
}

func TestWatch_ConcurrentWritersAndWatchersSeeEveryRevisionOnceInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const writers, perWriter, watchers = 4, 300, 4
		const total = writers * perWriter
		s := newSource(memsource.Options{})
		var ws []source.Watcher[obj]
		for range watchers {
			ws = append(ws, watch(t, s, source.WatchOptions{AllowBookmarks: true}))
		}

		var wg sync.WaitGroup
		for i := range writers {
			wg.Go(func() {
				for j := range perWriter {
					key := fmt.Sprintf("w%d-%d", i, j%7)
					if j%3 == 2 {
						if _, ok := s.Delete(key); ok {
							continue
						}
					}
					s.Put(obj{key, j})
				}
			})
		}
		wg.Go(func() {
			for range 20 {
				s.Bookmark()
			}
		})
		mirrors := make([]map[string]obj, watchers)
		for i, w := range ws {
			wg.Go(func() {
				m := make(map[string]obj)
				mirrors[i] = m
				last := int64(1) // the watch starts at the new source's revision
				for last < 1+total {
					e, err := w.Next(t.Context())
					if !assert.NoError(t, err) {
						return
					}
					rev, err := strconv.ParseInt(e.ResourceVersion, 10, 64)
					require.NoError(t, err)
					switch e.Type {
					case source.Bookmark:
						assert.Equal(t, last, rev, "a bookmark reports the last revision delivered")
						continue
					case source.Deleted:
						delete(m, e.Object.Key)
					default:
						m[e.Object.Key] = e.Object
					}
					if !assert.Equal(t, last+1, rev, "watcher %d", i) {
						return
					}
					last = rev
				}
			})
		}
		wg.Wait()
		require.Equal(t, int64(1+total), s.Revision())
		for i, m := range mirrors {
			assert.Equal(t, s.Snapshot(), m, "watcher %d mirrors the source", i)
		}
	})
}
