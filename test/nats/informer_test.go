package nats_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/listwatch/mirror"
	natsmirror "github.com/listwatch/mirror/adapters/nats"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// recorder is a handler that keeps, per key, what it was told, and the
// state those notifications add up to.
type recorder struct {
	mu    sync.Mutex
	notes map[string][]string
	state map[string]string
	errs  []string // notifications that contradict the state
	// unknown counts, per key, the deletions whose final state was
	// unknown (the informer found the key gone when it relisted).
	unknown map[string]int
}

func newRecorder() *recorder {
	return &recorder{notes: map[string][]string{}, state: map[string]string{}, unknown: map[string]int{}}
}

func (r *recorder) handler() mirror.Handler[natsmirror.KV] {
	return mirror.HandlerFuncs[natsmirror.KV]{
		AddFunc: func(o natsmirror.KV, _ bool) {
			r.mu.Lock()
			defer r.mu.Unlock()
			if _, ok := r.state[o.Key]; ok {
				r.errs = append(r.errs, "add of a present key "+o.Key)
			}
			r.state[o.Key] = string(o.Value)
			r.notes[o.Key] = append(r.notes[o.Key], "add "+string(o.Value))
		},
		UpdateFunc: func(old, o natsmirror.KV) {
			r.mu.Lock()
			defer r.mu.Unlock()
			if v, ok := r.state[o.Key]; !ok || v != string(old.Value) {
				r.errs = append(r.errs, fmt.Sprintf("update of %s from %q, held %q (%t)", o.Key, old.Value, v, ok))
			}
			r.state[o.Key] = string(o.Value)
			r.notes[o.Key] = append(r.notes[o.Key], "update "+string(o.Value))
		},
		DeleteFunc: func(o natsmirror.KV, finalStateUnknown bool) {
			r.mu.Lock()
			defer r.mu.Unlock()
			if _, ok := r.state[o.Key]; !ok {
				r.errs = append(r.errs, "delete of an absent key "+o.Key)
			}
			if finalStateUnknown {
				r.unknown[o.Key]++
			}
			delete(r.state, o.Key)
			r.notes[o.Key] = append(r.notes[o.Key], "delete "+string(o.Value))
		},
	}
}

// since returns what key was told after its first n notifications.
func (r *recorder) since(key string, n int) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.notes[key][n:])
}

// finalStateUnknown returns how many deletions of key had an unknown final
// state.
func (r *recorder) finalStateUnknown(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.unknown[key]
}

func (r *recorder) snapshot() map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.state)
}

// runInformer runs an informer of lw with a recorder until the test ends,
// and waits until it has synced.
func runInformer(t *testing.T, lw *natsmirror.ListWatcher[[]byte]) (*mirror.Informer[string, natsmirror.KV], *recorder) {
	t.Helper()
	opts := natsmirror.InformerOptions[[]byte]{ErrorHandler: func(err error) { t.Logf("informer: %v", err) }}
	opts.ListWatch.InitialBackoff, opts.ListWatch.MaxBackoff = time.Millisecond, 20*time.Millisecond
	inf := natsmirror.NewInformer(lw, opts)
	rec := newRecorder()
	reg, err := inf.AddEventHandler(rec.handler(), mirror.HandlerOptions{})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		assert.NoError(t, <-done)
	})
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	defer scancel()
	require.NoError(t, mirror.WaitForCacheSync(sctx, reg))
	return inf, rec
}

// bucketState reads every key of kv with its value.
func bucketState(t *testing.T, kv jetstream.KeyValue) map[string]string {
	t.Helper()
	m := map[string]string{}
	keys, err := kv.ListKeys(t.Context())
	require.NoError(t, err)
	for k := range keys.Keys() {
		e, err := kv.Get(t.Context(), k)
		require.NoError(t, err)
		m[k] = string(e.Value())
	}
	return m
}

// cacheState reads the informer's cache.
func cacheState(inf *mirror.Informer[string, natsmirror.KV]) map[string]string {
	m := map[string]string{}
	for k, o := range inf.All() {
		m[k] = string(o.Value)
	}
	return m
}

// waitCurrent writes a marker key through kv and waits until the handler
// has been told of it: the mirror has then applied everything before.
func waitCurrent(t *testing.T, kv jetstream.KeyValue, rec *recorder) {
	t.Helper()
	marker := fmt.Sprintf("marker-%d", time.Now().UnixNano())
	put(t, kv, "zz", marker)
	require.Eventually(t, func() bool {
		return rec.snapshot()["zz"] == marker
	}, 30*time.Second, 5*time.Millisecond, "the mirror holds %v", rec.snapshot())
}

// TestInformer_ChangesWhileCutAreSeenExactlyWhenTheBucketKeepsThem cuts
// the mirror off from the server while a writer changes the bucket, whose
// history keeps every change: the resumed watch brings them all, a key
// deleted and re-created reaches handlers as a deletion then an addition,
// and nothing is relisted.
func TestInformer_ChangesWhileCutAreSeenExactlyWhenTheBucketKeepsThem(t *testing.T) {
	srv := startServer(t)
	px := startProxy(t, srv.srv.Addr().String())
	_, writer := connect(t, srv.url())
	kv := newBucket(t, writer, jetstream.KeyValueConfig{History: 5})
	for _, k := range []string{"a", "b", "c", "d"} {
		put(t, kv, k, "v1")
	}
	_, js := connect(t, px.url())
	lw := natsmirror.New(js, "mirror", natsmirror.Options{})
	inf, rec := runInformer(t, lw)

	px.setCut(true)
	put(t, kv, "b", "v2")
	require.NoError(t, kv.Delete(t.Context(), "c"))
	put(t, kv, "c", "v2")
	require.NoError(t, kv.Purge(t.Context(), "d"))
	put(t, kv, "e", "v1")
	px.setCut(false)
	waitCurrent(t, kv, rec)

	assert.Empty(t, rec.since("a", 1))
	assert.Equal(t, []string{"update v2"}, rec.since("b", 1))
	assert.Equal(t, []string{"delete v1", "add v2"}, rec.since("c", 1))
	assert.Equal(t, []string{"delete v1"}, rec.since("d", 1))
	assert.Equal(t, []string{"add v1"}, rec.since("e", 0))
	assert.Equal(t, bucketState(t, kv), cacheState(inf))
	assert.Equal(t, int64(1), lw.Stats().Lists, "no relist")
	assert.Empty(t, rec.errs)
}

// TestInformer_HistoryExceededWhileCutRelists cuts the mirror off while
// the bucket, which keeps one revision per key, drops revisions the watch
// has not delivered: the watch ends expired, the informer relists, and
// converges, with one deletion for the key that left, and an update for
// the key deleted and re-created, whose deletion the bucket dropped.
func TestInformer_HistoryExceededWhileCutRelists(t *testing.T) {
	srv := startServer(t)
	px := startProxy(t, srv.srv.Addr().String())
	_, writer := connect(t, srv.url())
	kv := newBucket(t, writer, jetstream.KeyValueConfig{History: 1})
	for _, k := range []string{"a", "b", "c", "d"} {
		put(t, kv, k, "v1")
	}
	_, js := connect(t, px.url())
	lw := natsmirror.New(js, "mirror", natsmirror.Options{})
	inf, rec := runInformer(t, lw)

	px.setCut(true)
	put(t, kv, "b", "v2")
	put(t, kv, "b", "v3") // drops b's v2, a revision the watch missed
	require.NoError(t, kv.Delete(t.Context(), "c"))
	put(t, kv, "c", "v2") // drops c's deletion
	require.NoError(t, kv.Delete(t.Context(), "d"))
	px.setCut(false)
	waitCurrent(t, kv, rec)

	assert.Empty(t, rec.since("a", 1))
	assert.Equal(t, []string{"update v3"}, rec.since("b", 1))
	// The bucket keeps no trace of c's deletion, and NATS no creation
	// revision: the relist can only report c changed (see the package
	// documentation; a History of 2 or more keeps the deletion).
	assert.Equal(t, []string{"update v2"}, rec.since("c", 1))
	assert.Equal(t, []string{"delete v1"}, rec.since("d", 1))
	assert.Equal(t, bucketState(t, kv), cacheState(inf))
	st := lw.Stats()
	assert.Equal(t, int64(2), st.Lists, "one relist")
	assert.Equal(t, int64(1), st.Expired)
	assert.Empty(t, rec.errs)
}

// TestInformer_RelistForAnotherKeysGapReportsARecreatedKeyAsAnUpdate
// pins what the package documentation promises of a key deleted and
// re-created while the mirror is cut off, when a revision of another key
// is gone: the watch ends expired at that gap, before the deletion, and
// the relist reads only each key's latest value, so the re-created key
// reaches handlers as an update, though the bucket still holds its
// deletion.
func TestInformer_RelistForAnotherKeysGapReportsARecreatedKeyAsAnUpdate(t *testing.T) {
	srv := startServer(t)
	px := startProxy(t, srv.srv.Addr().String())
	_, writer := connect(t, srv.url())
	kv := newBucket(t, writer, jetstream.KeyValueConfig{History: 5})
	for _, k := range []string{"a", "b", "c"} {
		put(t, kv, k, "v1")
	}
	_, js := connect(t, px.url())
	lw := natsmirror.New(js, "mirror", natsmirror.Options{})
	inf, rec := runInformer(t, lw)

	px.setCut(true)
	put(t, kv, "b", "v2")
	require.NoError(t, kv.Purge(t.Context(), "b")) // drops b's v2, the first revision the watch needs
	require.NoError(t, kv.Delete(t.Context(), "c"))
	put(t, kv, "c", "v2")
	px.setCut(false)
	waitCurrent(t, kv, rec)

	var ops []jetstream.KeyValueOp
	history, err := kv.History(t.Context(), "c")
	require.NoError(t, err)
	for _, e := range history {
		ops = append(ops, e.Operation())
	}
	require.Contains(t, ops, jetstream.KeyValueDelete, "the bucket holds c's deletion")

	assert.Equal(t, []string{"update v2"}, rec.since("c", 1))
	assert.Equal(t, []string{"delete v1"}, rec.since("b", 1))
	assert.Equal(t, 1, rec.finalStateUnknown("b"))
	assert.Empty(t, rec.since("a", 1))
	assert.Equal(t, bucketState(t, kv), cacheState(inf))
	st := lw.Stats()
	assert.Equal(t, int64(2), st.Lists, "one relist")
	assert.Equal(t, int64(1), st.Expired)
	assert.Empty(t, rec.errs)
}

// TestInformer_ServerRestartKeepsTheMirrorExact restarts the server (its
// store kept) under the mirror, with changes before and after.
func TestInformer_ServerRestartKeepsTheMirrorExact(t *testing.T) {
	srv := startServer(t)
	_, js := connect(t, srv.url())
	kv := newBucket(t, js, jetstream.KeyValueConfig{History: 5})
	put(t, kv, "a", "v1")
	put(t, kv, "b", "v1")
	lw := natsmirror.New(js, "mirror", natsmirror.Options{})
	inf, rec := runInformer(t, lw)

	put(t, kv, "a", "v2")
	srv.restart()
	require.Eventually(t, func() bool {
		_, err := kv.PutString(t.Context(), "b", "v2")
		return err == nil
	}, 30*time.Second, 20*time.Millisecond)
	require.NoError(t, kv.Delete(t.Context(), "a"))
	put(t, kv, "a", "v3")
	waitCurrent(t, kv, rec)

	assert.Equal(t, []string{"update v2", "delete v2", "add v3"}, rec.since("a", 1))
	assert.Equal(t, []string{"update v2"}, rec.since("b", 1))
	assert.Equal(t, bucketState(t, kv), cacheState(inf))
	assert.Empty(t, rec.errs)
}

// TestInformer_DeletionPurgedWhileCutRelists cuts the mirror off, deletes
// a key so that its deletion is the bucket's last revision, and removes
// that deletion with PurgeDeletes: the resumed watch has nothing to
// deliver and no later revision to reveal the gap, yet it must end
// expired once caught up, so that the informer relists and the key leaves
// the mirror, reported once, its final state unknown. Nothing is written
// after the purge: a later write would reveal the gap by itself.
func TestInformer_DeletionPurgedWhileCutRelists(t *testing.T) {
	srv := startServer(t)
	px := startProxy(t, srv.srv.Addr().String())
	_, writer := connect(t, srv.url())
	kv := newBucket(t, writer, jetstream.KeyValueConfig{History: 5})
	for _, k := range []string{"a", "b", "c"} {
		put(t, kv, k, "v1")
	}
	_, js := connect(t, px.url())
	lw := natsmirror.New(js, "mirror", natsmirror.Options{})
	inf, rec := runInformer(t, lw)

	px.setCut(true)
	require.NoError(t, kv.Delete(t.Context(), "c"))
	require.NoError(t, kv.PurgeDeletes(t.Context(), jetstream.DeleteMarkersOlderThan(-1)))
	px.setCut(false)

	require.Eventually(t, func() bool {
		_, held := inf.GetByKey("c")
		return !held
	}, 30*time.Second, 5*time.Millisecond, "c, deleted while cut off, stays in the mirror")
	require.Eventually(t, func() bool { return len(rec.since("c", 1)) > 0 }, 30*time.Second, 5*time.Millisecond)
	assert.Equal(t, []string{"delete v1"}, rec.since("c", 1))
	assert.Equal(t, 1, rec.finalStateUnknown("c"))
	assert.Empty(t, rec.since("a", 1))
	assert.Empty(t, rec.since("b", 1))
	assert.Equal(t, bucketState(t, kv), cacheState(inf))
	st := lw.Stats()
	assert.Equal(t, int64(2), st.Lists, "one relist")
	assert.Equal(t, int64(1), st.Expired)
	assert.Empty(t, rec.errs)
}

// TestInformer_QuietCutResumesWithoutRelist cuts the mirror off while
// nothing is written, including when the bucket's last revision is a
// deletion it still holds: the resumed watch, caught up at once, goes on
// without a relist.
func TestInformer_QuietCutResumesWithoutRelist(t *testing.T) {
	tests := []struct {
		name string
		// last writes the bucket's last revision before the mirror
		// starts.
		last func(t *testing.T, kv jetstream.KeyValue)
	}{
		{"last revision a put", func(t *testing.T, kv jetstream.KeyValue) { put(t, kv, "b", "v2") }},
		{"last revision a deletion", func(t *testing.T, kv jetstream.KeyValue) {
			require.NoError(t, kv.Delete(t.Context(), "b"))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := startServer(t)
			px := startProxy(t, srv.srv.Addr().String())
			_, js := connect(t, px.url())
			_, writer := connect(t, srv.url())
			kv := newBucket(t, writer, jetstream.KeyValueConfig{History: 5})
			put(t, kv, "a", "v1")
			put(t, kv, "b", "v1")
			tt.last(t, kv)
			lw := natsmirror.New(js, "mirror", natsmirror.Options{})
			inf, rec := runInformer(t, lw)

			watches := lw.Stats().Watches
			px.setCut(true)
			px.setCut(false)
			// A watch opened after the cut holds the client's
			// caught-up marker before the marker key waitCurrent
			// writes: a relist it caused would come first.
			require.Eventually(t, func() bool {
				return lw.Stats().Watches > watches && inf.Freshness().Err == nil
			}, 30*time.Second, 5*time.Millisecond, "the watch never resumed")
			waitCurrent(t, kv, rec)

			assert.Equal(t, bucketState(t, kv), cacheState(inf))
			st := lw.Stats()
			assert.Equal(t, int64(1), st.Lists, "no relist")
			assert.Zero(t, st.Expired)
			assert.Empty(t, rec.errs)
		})
	}
}
