package nats_test

import (
	"context"
	"errors"
	"io"
	"strconv"
	"testing"
	"time"

	"github.com/listwatch/mirror"
	natsmirror "github.com/listwatch/mirror/adapters/nats"
	"github.com/listwatch/mirror/source"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// values returns the keys and values of items.
func values(items []natsmirror.KV) map[string]string {
	m := make(map[string]string, len(items))
	for _, o := range items {
		m[o.Key] = string(o.Value)
	}
	return m
}

func put(t *testing.T, kv jetstream.KeyValue, key, value string) uint64 {
	t.Helper()
	rev, err := kv.PutString(t.Context(), key, value)
	require.NoError(t, err)
	return rev
}

func TestList_ReturnsLatestValuesAtTheBucketsLastRevision(t *testing.T) {
	for _, history := range []uint8{1, 5} {
		t.Run("history "+strconv.Itoa(int(history)), func(t *testing.T) {
			ctx := testContext(t)
			srv := startServer(t)
			_, js := connect(t, srv.url())
			kv := newBucket(t, js, jetstream.KeyValueConfig{History: history})
			put(t, kv, "a", "1")
			put(t, kv, "b", "1")
			put(t, kv, "a", "2")
			put(t, kv, "c", "1")
			require.NoError(t, kv.Delete(ctx, "b"))
			put(t, kv, "d", "1")
			require.NoError(t, kv.Purge(ctx, "d"))
			last := put(t, kv, "e", "1")

			lw := natsmirror.New(js, "mirror", natsmirror.Options{})
			res, err := lw.List(ctx, source.ListOptions{})
			require.NoError(t, err)
			assert.Equal(t, map[string]string{"a": "2", "c": "1", "e": "1"}, values(res.Items))
			assert.Equal(t, strconv.FormatUint(last, 10), res.ResourceVersion)
			assert.Empty(t, res.Continue)
			for _, o := range res.Items {
				e, err := kv.Get(ctx, o.Key)
				require.NoError(t, err)
				assert.Equal(t, e.Revision(), o.Revision, o.Key)
			}
			st := lw.Stats()
			assert.Equal(t, int64(1), st.Lists)
			assert.Equal(t, int64(3), st.ListKeys)
		})
	}
}

func TestList_OfAnEmptyBucketIsAtRevisionZero(t *testing.T) {
	ctx := testContext(t)
	srv := startServer(t)
	_, js := connect(t, srv.url())
	kv := newBucket(t, js, jetstream.KeyValueConfig{})
	lw := natsmirror.New(js, "mirror", natsmirror.Options{})
	res, err := lw.List(ctx, source.ListOptions{})
	require.NoError(t, err)
	assert.Empty(t, res.Items)
	assert.Equal(t, "0", res.ResourceVersion)

	// A watch from the list's revision sees the bucket's first put.
	w, err := lw.Watch(ctx, source.WatchOptions{ResourceVersion: res.ResourceVersion})
	require.NoError(t, err)
	defer w.Stop()
	put(t, kv, "a", "1")
	ev, err := w.Next(ctx)
	require.NoError(t, err)
	assert.Equal(t, "a", ev.Object.Key)
	assert.Equal(t, "1", ev.ResourceVersion)
}

func TestList_AtAFutureRevisionIsTooLarge(t *testing.T) {
	ctx := testContext(t)
	srv := startServer(t)
	_, js := connect(t, srv.url())
	kv := newBucket(t, js, jetstream.KeyValueConfig{})
	put(t, kv, "a", "1")
	lw := natsmirror.New(js, "mirror", natsmirror.Options{})
	_, err := lw.List(ctx, source.ListOptions{ResourceVersion: "5"})
	require.ErrorIs(t, err, source.ErrTooLargeResourceVersion)
	_, err = lw.List(ctx, source.ListOptions{ResourceVersion: "1"})
	require.NoError(t, err)
}

// next returns the next event of w, failing the test on an error.
func next(t *testing.T, w source.Watcher[natsmirror.KV]) source.Event[natsmirror.KV] {
	t.Helper()
	ev, err := w.Next(testContext(t))
	require.NoError(t, err)
	return ev
}

func TestWatch_DeliversEveryRevisionAfterTheListInOrder(t *testing.T) {
	ctx := testContext(t)
	srv := startServer(t)
	_, js := connect(t, srv.url())
	kv := newBucket(t, js, jetstream.KeyValueConfig{History: 5})
	put(t, kv, "a", "1")
	lw := natsmirror.New(js, "mirror", natsmirror.Options{})
	res, err := lw.List(ctx, source.ListOptions{})
	require.NoError(t, err)

	// Written between the list and the watch: the watch still brings it.
	r1 := put(t, kv, "a", "2")
	w, err := lw.Watch(ctx, source.WatchOptions{ResourceVersion: res.ResourceVersion})
	require.NoError(t, err)
	defer w.Stop()
	r2 := put(t, kv, "b", "1")

	ev := next(t, w)
	assert.Equal(t, source.Updated, ev.Type)
	assert.Equal(t, natsmirror.KV{Key: "a", Value: []byte("2"), Revision: r1, Time: ev.Object.Time}, ev.Object)
	assert.False(t, ev.Object.Time.IsZero())
	assert.Equal(t, strconv.FormatUint(r1, 10), ev.ResourceVersion)
	ev = next(t, w)
	assert.Equal(t, "b", ev.Object.Key)
	assert.Equal(t, strconv.FormatUint(r2, 10), ev.ResourceVersion)
	// Only now: a purge drops b's put from the bucket, and a watch that
	// had not read it yet would rightly end expired (the test raced so).
	require.NoError(t, kv.Delete(ctx, "a"))
	require.NoError(t, kv.Purge(ctx, "b"))
	ev = next(t, w)
	assert.Equal(t, source.Event[natsmirror.KV]{Type: source.Deleted, Object: natsmirror.KV{Key: "a"},
		ResourceVersion: strconv.FormatUint(r2+1, 10), KeyOnly: true}, ev)
	ev = next(t, w)
	assert.Equal(t, source.Event[natsmirror.KV]{Type: source.Deleted, Object: natsmirror.KV{Key: "b"},
		ResourceVersion: strconv.FormatUint(r2+2, 10), KeyOnly: true}, ev)
}

func TestWatch_FromNowSkipsWhatCameBefore(t *testing.T) {
	ctx := testContext(t)
	srv := startServer(t)
	_, js := connect(t, srv.url())
	kv := newBucket(t, js, jetstream.KeyValueConfig{})
	put(t, kv, "old", "1")
	lw := natsmirror.New(js, "mirror", natsmirror.Options{})
	w, err := lw.Watch(ctx, source.WatchOptions{})
	require.NoError(t, err)
	defer w.Stop()
	put(t, kv, "new", "1")
	assert.Equal(t, "new", next(t, w).Object.Key)
}

// TestWatch_ExpiresWhenTheBucketDroppedARevisionAfterTheStart covers every
// way a bucket drops what a resumed watch must deliver.
func TestWatch_ExpiresWhenTheBucketDroppedARevisionAfterTheStart(t *testing.T) {
	tests := []struct {
		name    string
		history uint8
		// change runs after the watch's start revision; it must drop
		// a revision after it.
		change func(t *testing.T, kv jetstream.KeyValue)
	}{
		{"history limit: a key written twice", 1, func(t *testing.T, kv jetstream.KeyValue) {
			put(t, kv, "a", "2")
			put(t, kv, "a", "3")
		}},
		{"history limit: a deletion overwritten by a re-creation", 1, func(t *testing.T, kv jetstream.KeyValue) {
			require.NoError(t, kv.Delete(t.Context(), "a"))
			put(t, kv, "a", "again")
		}},
		{"history limit of 2: a key written three times", 2, func(t *testing.T, kv jetstream.KeyValue) {
			put(t, kv, "b", "1")
			put(t, kv, "b", "2")
			put(t, kv, "b", "3")
		}},
		{"purge of a key written after the start", 5, func(t *testing.T, kv jetstream.KeyValue) {
			put(t, kv, "b", "1")
			require.NoError(t, kv.Purge(t.Context(), "b"))
		}},
		{"PurgeDeletes of a deletion written last", 5, func(t *testing.T, kv jetstream.KeyValue) {
			// Nothing follows the deletion: the gap shows only
			// once the watch has caught up.
			put(t, kv, "b", "1")
			require.NoError(t, kv.Delete(t.Context(), "a"))
			require.NoError(t, kv.PurgeDeletes(t.Context(), jetstream.DeleteMarkersOlderThan(-1)))
		}},
		{"PurgeDeletes", 5, func(t *testing.T, kv jetstream.KeyValue) {
			require.NoError(t, kv.Delete(t.Context(), "a"))
			put(t, kv, "c", "1")
			require.NoError(t, kv.PurgeDeletes(t.Context(), jetstream.DeleteMarkersOlderThan(-1)))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testContext(t)
			srv := startServer(t)
			_, js := connect(t, srv.url())
			kv := newBucket(t, js, jetstream.KeyValueConfig{History: tt.history})
			start := put(t, kv, "a", "1")
			tt.change(t, kv)

			lw := natsmirror.New(js, "mirror", natsmirror.Options{})
			w, err := lw.Watch(ctx, source.WatchOptions{ResourceVersion: strconv.FormatUint(start, 10)})
			if err == nil {
				defer w.Stop()
				for err == nil {
					_, err = w.Next(ctx)
				}
			}
			require.ErrorIs(t, err, source.ErrExpired)
			assert.Equal(t, int64(1), lw.Stats().Expired)
		})
	}
}

// TestWatch_CaughtUpWithNothingDroppedDoesNotExpire resumes watches that
// miss nothing, including from the bucket's last revision and when that
// revision is a deletion the bucket still holds: each reports itself
// caught up with a bookmark at the bucket's last revision.
func TestWatch_CaughtUpWithNothingDroppedDoesNotExpire(t *testing.T) {
	tests := []struct {
		name string
		// from is the revision the watch starts after, of the four
		// revisions: put a, put b, put a, and then the last.
		from uint64
		// last writes the bucket's fourth and last revision.
		last func(t *testing.T, kv jetstream.KeyValue)
	}{
		{"from the last revision, a put", 4, func(t *testing.T, kv jetstream.KeyValue) { put(t, kv, "c", "1") }},
		{"from the last revision, a deletion", 4, func(t *testing.T, kv jetstream.KeyValue) {
			require.NoError(t, kv.Delete(t.Context(), "b"))
		}},
		{"from before the last revision, a deletion", 2, func(t *testing.T, kv jetstream.KeyValue) {
			require.NoError(t, kv.Delete(t.Context(), "b"))
		}},
		{"from revision 0", 0, func(t *testing.T, kv jetstream.KeyValue) { put(t, kv, "c", "1") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testContext(t)
			srv := startServer(t)
			_, js := connect(t, srv.url())
			kv := newBucket(t, js, jetstream.KeyValueConfig{History: 5})
			put(t, kv, "a", "1")
			put(t, kv, "b", "1")
			put(t, kv, "a", "2")
			tt.last(t, kv)

			lw := natsmirror.New(js, "mirror", natsmirror.Options{})
			w, err := lw.Watch(ctx, source.WatchOptions{ResourceVersion: strconv.FormatUint(tt.from, 10), AllowBookmarks: true})
			require.NoError(t, err)
			defer w.Stop()
			for rev := tt.from + 1; rev <= 4; rev++ {
				assert.Equal(t, strconv.FormatUint(rev, 10), next(t, w).ResourceVersion)
			}
			assert.Equal(t, source.Event[natsmirror.KV]{Type: source.Bookmark, ResourceVersion: "4"}, next(t, w))
			assert.Zero(t, lw.Stats().Expired)
		})
	}
}

func TestWatch_ExpiresWhileLiveWhenARevisionIsDroppedBeforeDelivery(t *testing.T) {
	ctx := testContext(t)
	srv := startServer(t)
	_, js := connect(t, srv.url())
	kv := newBucket(t, js, jetstream.KeyValueConfig{History: 1})
	start := put(t, kv, "a", "1")
	lw := natsmirror.New(js, "mirror", natsmirror.Options{})
	w, err := lw.Watch(ctx, source.WatchOptions{ResourceVersion: strconv.FormatUint(start, 10)})
	require.NoError(t, err)
	defer w.Stop()
	put(t, kv, "b", "1")
	require.NoError(t, kv.Delete(ctx, "b"))
	require.NoError(t, kv.Delete(ctx, "a"))
	// The watch may have delivered b's put before its deletion replaced
	// it; then it has all it needs. It must never skip a revision.
	var revs []string
	for {
		ev, err := w.Next(ctx)
		if err != nil {
			require.ErrorIs(t, err, source.ErrExpired)
			return
		}
		revs = append(revs, ev.ResourceVersion)
		if ev.ResourceVersion == strconv.FormatUint(start+3, 10) {
			assert.Equal(t, []string{"2", "3", "4"}, revs)
			return
		}
	}
}

func TestWatch_ExpiresFromBeyondTheBucketsLastRevision(t *testing.T) {
	ctx := testContext(t)
	srv := startServer(t)
	_, js := connect(t, srv.url())
	kv := newBucket(t, js, jetstream.KeyValueConfig{})
	put(t, kv, "a", "1")
	lw := natsmirror.New(js, "mirror", natsmirror.Options{})
	_, err := lw.Watch(ctx, source.WatchOptions{ResourceVersion: "7"})
	require.ErrorIs(t, err, source.ErrExpired)
}

func TestWatch_StopEndsNextWithEOFAndReleasesTheSubscription(t *testing.T) {
	ctx := testContext(t)
	srv := startServer(t)
	nc, js := connect(t, srv.url())
	newBucket(t, js, jetstream.KeyValueConfig{})
	lw := natsmirror.New(js, "mirror", natsmirror.Options{})
	before := nc.NumSubscriptions()
	w, err := lw.Watch(ctx, source.WatchOptions{})
	require.NoError(t, err)
	assert.Greater(t, nc.NumSubscriptions(), before)
	done := make(chan error)
	go func() {
		_, err := w.Next(ctx)
		done <- err
	}()
	w.Stop()
	require.ErrorIs(t, <-done, io.EOF)
	assert.Equal(t, before, nc.NumSubscriptions())
	_, err = w.Next(ctx)
	require.ErrorIs(t, err, io.EOF)
}

func TestWatch_TimeoutEndsWithEOF(t *testing.T) {
	ctx := testContext(t)
	srv := startServer(t)
	_, js := connect(t, srv.url())
	newBucket(t, js, jetstream.KeyValueConfig{})
	lw := natsmirror.New(js, "mirror", natsmirror.Options{})
	w, err := lw.Watch(ctx, source.WatchOptions{Timeout: 50 * time.Millisecond})
	require.NoError(t, err)
	_, err = w.Next(ctx)
	require.ErrorIs(t, err, io.EOF)
}

func TestWatch_LostServerEndsItUnavailable(t *testing.T) {
	ctx := testContext(t)
	srv := startServer(t)
	_, js := connect(t, srv.url())
	newBucket(t, js, jetstream.KeyValueConfig{})
	lw := natsmirror.New(js, "mirror", natsmirror.Options{})
	w, err := lw.Watch(ctx, source.WatchOptions{})
	require.NoError(t, err)
	defer w.Stop()
	srv.stop()
	_, err = w.Next(ctx)
	require.ErrorIs(t, err, source.ErrUnavailable)

	// While it is down, lists and watches are unavailable too.
	short := natsmirror.New(js, "mirror", natsmirror.Options{RequestTimeout: 200 * time.Millisecond})
	_, err = short.List(ctx, source.ListOptions{})
	require.ErrorIs(t, err, source.ErrUnavailable)
	_, err = short.Watch(ctx, source.WatchOptions{})
	require.ErrorIs(t, err, source.ErrUnavailable)
}

func TestListWatch_MissingBucketIsPermanent(t *testing.T) {
	ctx := testContext(t)
	srv := startServer(t)
	_, js := connect(t, srv.url())
	lw := natsmirror.New(js, "nothere", natsmirror.Options{})
	_, err := lw.List(ctx, source.ListOptions{})
	require.ErrorIs(t, err, mirror.ErrPermanent)
	_, err = lw.Watch(ctx, source.WatchOptions{})
	require.ErrorIs(t, err, mirror.ErrPermanent)
	assert.False(t, errors.Is(err, source.ErrUnavailable))
}

func TestListWatch_ClosedConnectionIsPermanent(t *testing.T) {
	ctx := testContext(t)
	srv := startServer(t)
	nc, js := connect(t, srv.url())
	newBucket(t, js, jetstream.KeyValueConfig{})
	lw := natsmirror.New(js, "mirror", natsmirror.Options{})
	w, err := lw.Watch(ctx, source.WatchOptions{})
	require.NoError(t, err)
	defer w.Stop()
	nc.Close()
	_, err = w.Next(ctx)
	require.ErrorIs(t, err, mirror.ErrPermanent)
	_, err = lw.List(ctx, source.ListOptions{})
	require.ErrorIs(t, err, mirror.ErrPermanent)
}

func TestWatch_BookmarksOnceCaughtUpWhenAllowed(t *testing.T) {
	ctx := testContext(t)
	srv := startServer(t)
	_, js := connect(t, srv.url())
	kv := newBucket(t, js, jetstream.KeyValueConfig{History: 5})
	put(t, kv, "a", "1")
	put(t, kv, "a", "2")
	put(t, kv, "b", "1")
	lw := natsmirror.New(js, "mirror", natsmirror.Options{})
	w, err := lw.Watch(ctx, source.WatchOptions{ResourceVersion: "1", AllowBookmarks: true})
	require.NoError(t, err)
	defer w.Stop()
	assert.Equal(t, "2", next(t, w).ResourceVersion)
	assert.Equal(t, "3", next(t, w).ResourceVersion)
	assert.Equal(t, source.Event[natsmirror.KV]{Type: source.Bookmark, ResourceVersion: "3"}, next(t, w))
	put(t, kv, "c", "1")
	assert.Equal(t, "4", next(t, w).ResourceVersion)
}
