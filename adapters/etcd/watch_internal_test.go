package etcd

import (
	"context"
	"errors"
	"io"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func startFakeWatch(t *testing.T, fw *fakeWatcher, lwOpts Options, opts source.WatchOptions) source.Watcher[KV] {
	t.Helper()
	lw := New(fakeClient(nil, fw), "/p/", lwOpts)
	w, err := lw.Watch(t.Context(), opts)
	require.NoError(t, err)
	t.Cleanup(w.Stop)
	return w
}

// result is what one Next returned, and when.
type result struct {
	ev  source.Event[KV]
	err error
	at  time.Time
}

// drain calls w.Next until it fails, and sends what each call returned.
func drain(t *testing.T, w source.Watcher[KV]) <-chan result {
	results := make(chan result, 16)
	go func() {
		for {
			ev, err := w.Next(t.Context())
			results <- result{ev, err, time.Now()}
			if err != nil {
				return
			}
		}
	}()
	return results
}

// The documented bound (see Options.ProgressInterval): a watch that hears
// nothing ends between two and two and a quarter intervals after etcd's
// last message, whether its member takes the progress requests and never
// answers (paused) or the client holds them while it reconnects (killed),
// and whether or not it has to start again behind the store first.
func TestWatcher_SilentMemberEndsWithUnavailableWithinTwoIntervals(t *testing.T) {
	const interval = time.Second
	for _, tc := range []struct {
		name string
		rv   string
		// quiet makes the member stop answering in its way.
		quiet func(fw *fakeWatcher)
		// eventAt, if positive, is when etcd sends its last message, an
		// event, after the start.
		eventAt time.Duration
	}{
		{name: "paused", quiet: func(*fakeWatcher) {}},
		{name: "paused after an event", quiet: func(*fakeWatcher) {}, eventAt: 1300 * time.Millisecond},
		{name: "paused, watch ahead of the store", rv: "5", quiet: (*fakeWatcher).memberGone},
		{name: "killed", quiet: (*fakeWatcher).stall},
		{name: "killed after an event", quiet: (*fakeWatcher).stall, eventAt: 1300 * time.Millisecond},
		{name: "killed, watch ahead of the store", rv: "5", quiet: func(fw *fakeWatcher) {
			fw.stall()
			fw.memberGone()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fw := &fakeWatcher{}
				w := startFakeWatch(t, fw, Options{ProgressInterval: interval}, source.WatchOptions{ResourceVersion: tc.rv})
				last := time.Now() // etcd accepted the watch
				results := drain(t, w)
				tc.quiet(fw)
				if tc.eventAt > 0 {
					time.Sleep(tc.eventAt)
					fw.watch(fw.watchCount() - 1).ch <- clientv3.WatchResponse{Header: header(9),
						Events: []*clientv3.Event{put("/p/a", "x", 9, 9, 1)}}
					last = time.Now()
					require.NoError(t, (<-results).err)
				}

				r := <-results
				require.ErrorIs(t, r.err, source.ErrUnavailable)
				silent := r.at.Sub(last)
				assert.GreaterOrEqual(t, silent, 2*interval, "ends only after two intervals of silence")
				assert.LessOrEqual(t, silent, 2*interval+interval/4, "ends within the documented bound")
				assert.Positive(t, fw.progressRequests(), "asked for progress")
				inFlight, late := fw.requestsInFlight()
				assert.Zero(t, inFlight, "no progress request outlives the watch")
				assert.Zero(t, late, "the client's watch ended only after the progress requests")
				_, again := w.Next(t.Context())
				assert.Equal(t, r.err, again)
			})
		})
	}
}

func TestWatcher_AsksOnceSilentForAnIntervalAndAgainEveryQuarter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fw := &fakeWatcher{}
		w := startFakeWatch(t, fw, Options{ProgressInterval: time.Second}, source.WatchOptions{})
		drain(t, w)
		time.Sleep(time.Second - time.Millisecond)
		synctest.Wait()
		assert.Zero(t, fw.progressRequests(), "no ask before an interval of silence")
		time.Sleep(time.Millisecond)
		synctest.Wait()
		assert.Equal(t, 1, fw.progressRequests())
		time.Sleep(750 * time.Millisecond)
		synctest.Wait()
		assert.Equal(t, 4, fw.progressRequests(), "asked again every quarter interval")
	})
}

func TestWatcher_NextNeverWaitsForAProgressRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fw := &fakeWatcher{}
		w := startFakeWatch(t, fw, Options{ProgressInterval: time.Second}, source.WatchOptions{})
		fw.stall() // the client is reconnecting
		results := drain(t, w)
		time.Sleep(time.Second)
		synctest.Wait()
		inFlight, _ := fw.requestsInFlight()
		require.Equal(t, 1, inFlight, "a progress request waits")

		fw.watch(0).ch <- clientv3.WatchResponse{Header: header(3), Events: []*clientv3.Event{put("/p/a", "x", 3, 3, 1)}}
		synctest.Wait() // no time passes
		require.Len(t, results, 1, "Next returned the event while the request waits")
		assert.Equal(t, "/p/a", (<-results).ev.Object.Key)

		w.Stop()
		require.ErrorIs(t, (<-results).err, io.EOF)
		inFlight, late := fw.requestsInFlight()
		assert.Zero(t, inFlight, "Stop ended the waiting request")
		assert.Zero(t, late, "the client's watch ended only after it")
		// synctest.Test fails if a goroutine of the watch is left.
	})
}

func TestWatcher_ProgressAnswersKeepWatchAliveAndBecomeBookmarks(t *testing.T) {
	answer := func(ch chan<- clientv3.WatchResponse) { ch <- clientv3.WatchResponse{Header: header(9)} }
	synctest.Test(t, func(t *testing.T) {
		fw := &fakeWatcher{answer: answer}
		w := startFakeWatch(t, fw, Options{ProgressInterval: time.Second}, source.WatchOptions{ResourceVersion: "5", AllowBookmarks: true})
		for range 2 * silentSteps {
			ev, err := w.Next(t.Context())
			require.NoError(t, err)
			assert.Equal(t, source.Event[KV]{Type: source.Bookmark, ResourceVersion: "9"}, ev)
		}
		assert.True(t, fw.watch(0).op.IsProgressNotify(), "etcd's own notifications asked for")
		assert.Equal(t, 1, fw.watchCount(), "a watch whose asks are answered is not started again")
	})
	synctest.Test(t, func(t *testing.T) {
		fw := &fakeWatcher{answer: answer}
		w := startFakeWatch(t, fw, Options{ProgressInterval: time.Second}, source.WatchOptions{ResourceVersion: "5"})
		done := make(chan error, 1)
		go func() {
			_, err := w.Next(t.Context())
			done <- err
		}()
		time.Sleep(10 * silentSteps * time.Second)
		synctest.Wait()
		require.Empty(t, done, "answered progress keeps the watch open, and without bookmarks yields nothing")
		w.Stop()
		require.ErrorIs(t, <-done, io.EOF)
	})
}

func TestWatcher_ProgressOffNeverAsks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fw := &fakeWatcher{}
		w := startFakeWatch(t, fw, Options{ProgressInterval: -1}, source.WatchOptions{})
		ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
		defer cancel()
		_, err := w.Next(ctx)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Zero(t, fw.progressRequests())
	})
}

func TestWatcher_StartsJustAfterListRevision(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fw := &fakeWatcher{}
		w := startFakeWatch(t, fw, Options{}, source.WatchOptions{ResourceVersion: "5"})
		wt := fw.watch(0)
		assert.Equal(t, int64(6), wt.op.Rev())
		assert.False(t, wt.op.IsPrevKV(), "previous values not asked for by default")
		assert.False(t, wt.op.IsProgressNotify())
		wt.ch <- clientv3.WatchResponse{Header: header(6), Events: []*clientv3.Event{put("/p/a", "y", 5, 6, 2)}}
		ev, err := w.Next(t.Context())
		require.NoError(t, err)
		assert.Equal(t, source.Updated, ev.Type)
		assert.Equal(t, "6", ev.ResourceVersion)
	})
	synctest.Test(t, func(t *testing.T) {
		fw := &fakeWatcher{}
		startFakeWatch(t, fw, Options{}, source.WatchOptions{})
		assert.Zero(t, fw.watch(0).op.Rev(), "from now")
	})
}

// restartAhead has w, a watch from revision 5 over fw, start again at 5,
// as it does a quarter interval after its unanswered ask, itself after an
// interval (of a second) with no answer.
func restartAhead(t *testing.T, w source.Watcher[KV], fw *fakeWatcher) (next <-chan source.Event[KV], failed <-chan error) {
	t.Helper()
	events, errs := make(chan source.Event[KV], 1), make(chan error, 1)
	go func() {
		ev, err := w.Next(t.Context())
		if err != nil {
			errs <- err
			return
		}
		events <- ev
	}()
	time.Sleep(time.Second + time.Second/4)
	synctest.Wait()
	require.Equal(t, 2, fw.watchCount())
	assert.Equal(t, int64(5), fw.watch(1).op.Rev())
	assert.Error(t, fw.watch(0).ctx.Err(), "the first watch has ended")
	return events, errs
}

func TestWatcher_UnansweredWatchAheadOfTheStoreStartsAgainAtListRevision(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fw := &fakeWatcher{}
		w := startFakeWatch(t, fw, Options{ProgressInterval: time.Second}, source.WatchOptions{ResourceVersion: "5", AllowBookmarks: true})
		events, _ := restartAhead(t, w, fw)
		assert.Equal(t, 1, fw.progressRequests(), "asked once before starting again")

		fw.watch(1).ch <- clientv3.WatchResponse{Header: header(6), Events: []*clientv3.Event{
			put("/p/a", "x", 5, 5, 1), put("/p/a", "y", 5, 6, 2),
		}}
		ev := <-events
		assert.Equal(t, "6", ev.ResourceVersion, "the event at the list's revision is dropped")

		// The new watch's answers are heard: it stays.
		fw.setAnswer(func(ch chan<- clientv3.WatchResponse) { ch <- clientv3.WatchResponse{Header: header(6)} })
		for range 2 * silentSteps {
			ev, err := w.Next(t.Context())
			require.NoError(t, err)
			assert.Equal(t, source.Bookmark, ev.Type)
		}
		assert.Equal(t, 2, fw.watchCount())
	})
}

func TestWatcher_CompactionOfOnlyTheRevisionBeforeStartsAgainJustAfterIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fw := &fakeWatcher{}
		w := startFakeWatch(t, fw, Options{ProgressInterval: time.Second}, source.WatchOptions{ResourceVersion: "5"})
		events, _ := restartAhead(t, w, fw)
		fw.watch(1).ch <- clientv3.WatchResponse{Header: header(9), CompactRevision: 6, Canceled: true}

		go func() { // the third watch exists once Next has started it
			synctest.Wait()
			fw.watch(2).ch <- clientv3.WatchResponse{Header: header(7), Events: []*clientv3.Event{put("/p/b", "x", 7, 7, 1)}}
		}()
		ev := <-events
		assert.Equal(t, source.Added, ev.Type)
		assert.Equal(t, int64(6), fw.watch(2).op.Rev())
	})
	synctest.Test(t, func(t *testing.T) {
		fw := &fakeWatcher{}
		w := startFakeWatch(t, fw, Options{ProgressInterval: time.Second}, source.WatchOptions{ResourceVersion: "5"})
		_, errs := restartAhead(t, w, fw)
		fw.watch(1).ch <- clientv3.WatchResponse{Header: header(9), CompactRevision: 7, Canceled: true}
		err := <-errs
		require.ErrorIs(t, err, source.ErrExpired)
		require.ErrorIs(t, err, rpctypes.ErrCompacted)
	})
}

func TestWatcher_StartingAgainAfterCompactionEndsWithTheCallersContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fw := &fakeWatcher{}
		w := startFakeWatch(t, fw, Options{ProgressInterval: time.Second}, source.WatchOptions{ResourceVersion: "5"})
		ctx, cancel := context.WithCancel(t.Context())
		errs := make(chan error, 1)
		go func() {
			_, err := w.Next(ctx)
			errs <- err
		}()
		time.Sleep(time.Second + time.Second/4) // unanswered: started again at 5
		synctest.Wait()
		require.Equal(t, 2, fw.watchCount())

		fw.memberGone() // from now on a watch is never accepted
		fw.watch(1).ch <- clientv3.WatchResponse{Header: header(9), CompactRevision: 6, Canceled: true}
		synctest.Wait()
		require.Equal(t, 3, fw.watchCount(), "starting again just after 5")
		cancel()
		require.ErrorIs(t, <-errs, context.Canceled)
	})
}

func TestWatcher_CanceledWatchIsClassified(t *testing.T) {
	for _, tc := range []struct {
		reason string
		want   error
	}{
		{rpctypes.ErrNoLeader.Error(), source.ErrUnavailable},
		{rpctypes.ErrFutureRev.Error(), source.ErrTooLargeResourceVersion},
		{rpctypes.ErrPermissionDenied.Error(), mirror.ErrPermanent},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fw := &fakeWatcher{}
				w := startFakeWatch(t, fw, Options{}, source.WatchOptions{})
				fw.watch(0).ch <- clientv3.WatchResponse{Header: header(3), Canceled: true, CancelReason: tc.reason}
				_, err := w.Next(t.Context())
				require.ErrorIs(t, err, tc.want)
				require.ErrorContains(t, err, tc.reason)
			})
		})
	}
}

func TestWatcher_ClosedChannelIsEOF(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fw := &fakeWatcher{}
		w := startFakeWatch(t, fw, Options{}, source.WatchOptions{})
		close(fw.watch(0).ch)
		_, err := w.Next(t.Context())
		require.ErrorIs(t, err, io.EOF)
	})
}

func TestWatcher_StopDropsPendingEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fw := &fakeWatcher{}
		w := startFakeWatch(t, fw, Options{}, source.WatchOptions{})
		fw.watch(0).ch <- clientv3.WatchResponse{Header: header(3), Events: []*clientv3.Event{
			put("/p/a", "x", 2, 2, 1), put("/p/b", "x", 3, 3, 1),
		}}
		_, err := w.Next(t.Context())
		require.NoError(t, err)
		w.Stop()
		_, err = w.Next(t.Context())
		require.ErrorIs(t, err, io.EOF)
	})
}

func TestWatcher_TimeoutIsEOFAndCallerContextIsItsError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fw := &fakeWatcher{}
		w := startFakeWatch(t, fw, Options{ProgressInterval: -1}, source.WatchOptions{Timeout: time.Minute})
		_, err := w.Next(t.Context())
		require.ErrorIs(t, err, io.EOF)
	})
	synctest.Test(t, func(t *testing.T) {
		fw := &fakeWatcher{}
		ctx, cancel := context.WithCancelCause(t.Context())
		w, err := New(fakeClient(nil, fw), "/p/", Options{}).Watch(ctx, source.WatchOptions{})
		require.NoError(t, err)
		defer w.Stop()
		boom := errors.New("boom")
		cancel(boom)
		_, err = w.Next(t.Context())
		require.ErrorIs(t, err, boom)
	})
}

func TestWatcher_EventsCarryTheirOwnRevision(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fw := &fakeWatcher{}
		w := startFakeWatch(t, fw, Options{}, source.WatchOptions{})
		fw.watch(0).ch <- clientv3.WatchResponse{Header: header(8), Events: []*clientv3.Event{
			put("/p/a", "x", 7, 7, 1), put("/p/b", "x", 7, 7, 1), put("/p/a", "y", 7, 8, 2),
		}}
		var got []string
		for range 3 {
			ev, err := w.Next(t.Context())
			require.NoError(t, err)
			got = append(got, ev.ResourceVersion)
		}
		assert.Equal(t, []string{"7", "7", "8"}, got, "a transaction's events share its revision")
	})
}

func TestWatcher_PrevValuesAsksEtcdForThem(t *testing.T) {
	for _, prev := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			fw := &fakeWatcher{}
			startFakeWatch(t, fw, Options{PrevValues: prev}, source.WatchOptions{ResourceVersion: "5"})
			assert.Equal(t, prev, fw.watch(0).op.IsPrevKV())
		})
	}
}

func del(key string, mod int64, prev *mvccpb.KeyValue) *clientv3.Event {
	return &clientv3.Event{Type: mvccpb.DELETE, Kv: &mvccpb.KeyValue{Key: []byte(key), ModRevision: mod}, PrevKv: prev}
}

func prevKV(key, value string, create, mod, version int64) *mvccpb.KeyValue {
	return &mvccpb.KeyValue{Key: []byte(key), Value: []byte(value), CreateRevision: create, ModRevision: mod, Version: version}
}

func decodeInt(_ string, v []byte) (int, error) { return strconv.Atoi(string(v)) }

func TestWatcher_DeletionCarriesTheDecodedPreviousValueOrIsKeyOnly(t *testing.T) {
	keyOnly := source.Event[Object[int]]{Type: source.Deleted, ResourceVersion: "9", Object: Object[int]{Key: "/p/a"}, KeyOnly: true}
	for _, tc := range []struct {
		name  string
		event *clientv3.Event
		want  source.Event[Object[int]]
	}{
		{"without a previous value", del("/p/a", 9, nil), keyOnly},
		{"with a previous value", del("/p/a", 9, prevKV("/p/a", "7", 3, 4, 2)), source.Event[Object[int]]{
			Type: source.Deleted, ResourceVersion: "9",
			Object: Object[int]{Key: "/p/a", Value: 7, CreateRevision: 3, ModRevision: 4, Version: 2},
		}},
		{"whose previous value fails to decode", del("/p/a", 9, prevKV("/p/a", "bad", 3, 4, 2)), keyOnly},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fw := &fakeWatcher{}
				w, err := NewTyped(fakeClient(nil, fw), "/p/", decodeInt, Options{PrevValues: true}).
					Watch(t.Context(), source.WatchOptions{ResourceVersion: "5"})
				require.NoError(t, err)
				defer w.Stop()
				fw.watch(0).ch <- clientv3.WatchResponse{Header: header(9), Events: []*clientv3.Event{tc.event}}
				ev, err := w.Next(t.Context())
				require.NoError(t, err)
				assert.Equal(t, tc.want, ev)
			})
		})
	}
}

func TestWatcher_PutThatFailsToDecodeIsOneKeyOnlyError(t *testing.T) {
	for _, tc := range []struct {
		name string
		prev *mvccpb.KeyValue
	}{
		{"without a previous value", nil},
		{"with a previous value", prevKV("/p/a", "7", 3, 4, 2)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fw := &fakeWatcher{}
				w, err := NewTyped(fakeClient(nil, fw), "/p/", decodeInt, Options{PrevValues: tc.prev != nil}).
					Watch(t.Context(), source.WatchOptions{ResourceVersion: "5"})
				require.NoError(t, err)
				defer w.Stop()
				bad := &clientv3.Event{Type: mvccpb.PUT, Kv: prevKV("/p/a", "bad", 3, 9, 3), PrevKv: tc.prev}
				good := &clientv3.Event{Type: mvccpb.PUT, Kv: prevKV("/p/b", "8", 10, 10, 1)}
				fw.watch(0).ch <- clientv3.WatchResponse{Header: header(10), Events: []*clientv3.Event{bad, good}}

				ev, err := w.Next(t.Context())
				require.NoError(t, err)
				var oe *mirror.ObjectError
				require.ErrorAs(t, ev.Err, &oe)
				assert.Equal(t, "/p/a", oe.Key)
				assert.Equal(t, "9", oe.ResourceVersion, "the put's revision")
				assert.ErrorIs(t, oe, strconv.ErrSyntax, "the decoder's error")
				ev.Err = nil
				assert.Equal(t, source.Event[Object[int]]{
					Type: source.Error, ResourceVersion: "9", Object: Object[int]{Key: "/p/a"}, KeyOnly: true,
				}, ev, "the key alone, for the mirror to evict")

				ev, err = w.Next(t.Context())
				require.NoError(t, err)
				assert.Equal(t, source.Event[Object[int]]{
					Type: source.Added, ResourceVersion: "10",
					Object: Object[int]{Key: "/p/b", Value: 8, CreateRevision: 10, ModRevision: 10, Version: 1},
				}, ev, "the next event follows, nothing in between")
			})
		})
	}
}

// A watch that etcd ends for compaction after it has handed out later
// revisions says how far it got and where etcd compacted, not only where
// it started: the client resumes its stream after a reconnection from its
// last revision, so "from rev 52" says nothing of what was lost.
func TestWatcher_CompactionErrorNamesTheRevisionReachedAndTheCompaction(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fw := &fakeWatcher{}
		w := startFakeWatch(t, fw, Options{}, source.WatchOptions{ResourceVersion: "51", AllowBookmarks: true})
		wt := fw.watch(0)
		wt.ch <- clientv3.WatchResponse{Header: header(60), Events: []*clientv3.Event{put("/p/a", "x", 60, 60, 1)}}
		wt.ch <- clientv3.WatchResponse{Header: header(204)} // a progress notification
		wt.ch <- clientv3.WatchResponse{Header: header(310), CompactRevision: 300, Canceled: true}
		for range 2 {
			_, err := w.Next(t.Context())
			require.NoError(t, err)
		}
		_, err := w.Next(t.Context())
		require.ErrorIs(t, err, source.ErrExpired)
		require.ErrorIs(t, err, rpctypes.ErrCompacted)
		assert.ErrorContains(t, err, `etcd: watch "/p/" from rev 52, reached rev 204: `)
		assert.ErrorContains(t, err, "etcd compacted at rev 300")
	})
}

// A member that stops answering ends the watch with an error that says
// so: how long etcd said nothing and what the watch waited for, not that
// etcd did not accept a watch, which reads as a refusal of a new one.
func TestWatcher_SilentMemberErrorSaysEtcdDidNotAnswer(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rv    string
		quiet func(fw *fakeWatcher)
		want  []string
	}{
		{"paused", "", func(*fakeWatcher) {}, nil},
		{"paused, watch ahead of the store", "5", (*fakeWatcher).memberGone,
			[]string{"and a new watch not accepted within 750ms"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fw := &fakeWatcher{}
				w := startFakeWatch(t, fw, Options{ProgressInterval: time.Second}, source.WatchOptions{ResourceVersion: tc.rv})
				tc.quiet(fw)
				_, err := w.Next(t.Context())
				require.ErrorIs(t, err, source.ErrUnavailable)
				for _, want := range append([]string{"etcd did not answer for 2s", "no event, no answer to progress requests"}, tc.want...) {
					assert.ErrorContains(t, err, want)
				}
			})
		})
	}
}
