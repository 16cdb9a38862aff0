package etcd

import (
	"context"
	"fmt"
	"iter"
	"maps"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/listwatch/mirror"
	etcdmirror "github.com/listwatch/mirror/adapters/etcd"
	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
)

// handlerRecord is a handler that keeps what it has been told: its own
// view of the keys, built from its notifications alone, and every delete.
type handlerRecord[T any] struct {
	mu      sync.Mutex
	view    map[string]etcdmirror.Object[T]
	deletes []deleteCall[T]
}

// deleteCall is one OnDelete.
type deleteCall[T any] struct {
	obj     etcdmirror.Object[T]
	unknown bool
}

func newHandlerRecord[T any]() *handlerRecord[T] {
	return &handlerRecord[T]{view: make(map[string]etcdmirror.Object[T])}
}

func (h *handlerRecord[T]) OnAdd(obj etcdmirror.Object[T], _ bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.view[obj.Key] = obj
}

func (h *handlerRecord[T]) OnUpdate(_, obj etcdmirror.Object[T]) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.view[obj.Key] = obj
}

func (h *handlerRecord[T]) OnDelete(obj etcdmirror.Object[T], finalStateUnknown bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.view, obj.Key)
	h.deletes = append(h.deletes, deleteCall[T]{obj: obj, unknown: finalStateUnknown})
}

// revisions returns the handler's view as key -> ModRevision.
func (h *handlerRecord[T]) revisions() map[string]int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]int64, len(h.view))
	for k, o := range h.view {
		out[k] = o.ModRevision
	}
	return out
}

func (h *handlerRecord[T]) deleteCalls() []deleteCall[T] {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]deleteCall[T](nil), h.deletes...)
}

func (h *handlerRecord[T]) get(key string) (etcdmirror.Object[T], bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	o, ok := h.view[key]
	return o, ok
}

// etcdInformer is an informer of an etcd prefix, as these tests run it.
type etcdInformer[T any] = mirror.Informer[string, etcdmirror.Object[T]]

// startInformer runs an informer of lw with the given number of recording
// handlers, registered before Run, until the test ends, and waits until
// it and every handler have synced. Its pauses are short, so that tests
// recover quickly; what it reports goes to the returned errorLog.
func startInformer[T any](t *testing.T, lw source.ListWatcher[etcdmirror.Object[T]], handlers int) (*etcdInformer[T], []*handlerRecord[T], *errorLog) {
	t.Helper()
	log := &errorLog{}
	inf := mirror.NewInformer(lw, mirror.InformerOptions[string, etcdmirror.Object[T]]{
		KeyFunc: etcdmirror.KeyOf[T],
		Name:    t.Name(),
		ListWatch: mirror.ListWatchOptions{
			InitialBackoff: 20 * time.Millisecond,
			MaxBackoff:     200 * time.Millisecond,
		},
		ErrorHandler: log.add,
	})
	var recs []*handlerRecord[T]
	syncers := []mirror.SyncWaiter{inf}
	for range handlers {
		h := newHandlerRecord[T]()
		reg, err := inf.AddEventHandler(h, mirror.HandlerOptions{})
		require.NoError(t, err)
		recs = append(recs, h)
		syncers = append(syncers, reg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		assert.NoError(t, <-done)
	})
	wctx, wcancel := context.WithTimeout(ctx, convergeTimeout)
	defer wcancel()
	require.NoError(t, mirror.WaitForCacheSync(wctx, syncers...), "informer and handlers sync")
	return inf, recs, log
}

// informerRev is the revision inf last saw, 0 before its first list.
func informerRev[T any](inf *etcdInformer[T]) int64 {
	rev, _ := strconv.ParseInt(inf.Freshness().ResourceVersion, 10, 64)
	return rev
}

// cacheRevisions returns inf's cache as key -> ModRevision.
func cacheRevisions[T any](inf *etcdInformer[T]) map[string]int64 {
	out := make(map[string]int64, inf.Len())
	for k, o := range inf.All() {
		out[k] = o.ModRevision
	}
	return out
}

// requireInformerConverged waits until inf has seen etcd's current
// revision, and its cache and every handler's view hold exactly what etcd
// holds under prefix at that revision.
func requireInformerConverged[T any](t *testing.T, c *clientv3.Client, prefix string, inf *etcdInformer[T], handlers []*handlerRecord[T]) {
	t.Helper()
	rev := currentRev(t, c)
	want := make(map[string]int64)
	for _, kv := range kvsAt(t, c, prefix, rev) {
		want[kv.Key] = kv.ModRevision
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.GreaterOrEqual(c, informerRev(inf), rev, "informer reaches revision %d", rev)
		assert.Equal(c, want, cacheRevisions(inf), "cache equals etcd at revision %d", rev)
		for i, h := range handlers {
			assert.Equal(c, want, h.revisions(), "handler %d's view equals etcd at revision %d", i, rev)
		}
	}, convergeTimeout, 10*time.Millisecond)
}

// informerQueues names the informer's queue in subtest names; the
// informer has one since the DeltaFIFO queue went.
var informerQueues = []struct{ name string }{{"InOrder"}}

func TestInformer_CompactionWhileDisconnectedRelistsAndEachHandlerGetsOneUnknownDeletePerDeletedKey(t *testing.T) {
	t.Parallel()
	for _, q := range informerQueues {
		t.Run(q.name, func(t *testing.T) {
			t.Parallel()
			m := startEtcd(t)
			direct := newClient(t, m.endpoint())
			p := newProxy(t, m.cliURL.Host)
			c := newClient(t, p.endpoint())
			ctx := context.Background()
			putN(t, direct, "/ioff/", 100)

			inf, handlers, log := startInformer(t, etcdmirror.New(c, "/ioff/", fastOptions), 2)
			requireInformerConverged(t, direct, "/ioff/", inf, handlers)
			known := make(map[string]etcdmirror.KV)
			for k, o := range inf.All() {
				known[k] = o
			}

			p.Cut()
			deleted := make(map[string]int) // key -> deletes each handler must get
			for i := range 10 {
				k := fmt.Sprintf("/ioff/%08d", i)
				_, err := direct.Delete(ctx, k)
				require.NoError(t, err)
				deleted[k] = 1
			}
			for i := range 5 {
				_, err := direct.Put(ctx, fmt.Sprintf("/ioff/%08d", 50+i), "changed")
				require.NoError(t, err)
				_, err = direct.Put(ctx, fmt.Sprintf("/ioff/new-%d", i), "new")
				require.NoError(t, err)
			}
			// Deleted and re-created while cut: the key is still there,
			// changed, so no delete.
			_, err := direct.Delete(ctx, "/ioff/00000090")
			require.NoError(t, err)
			_, err = direct.Put(ctx, "/ioff/00000090", "again")
			require.NoError(t, err)
			// Created and deleted while cut: never known, so no delete.
			_, err = direct.Put(ctx, "/ioff/ephemeral", "x")
			require.NoError(t, err)
			d, err := direct.Delete(ctx, "/ioff/ephemeral")
			require.NoError(t, err)
			_, err = direct.Compact(ctx, d.Header.Revision, clientv3.WithCompactPhysical())
			require.NoError(t, err)
			require.Eventually(t, func() bool { return log.has(source.ErrUnavailable) }, convergeTimeout, 10*time.Millisecond,
				"the informer notices the cut")
			p.Resume()

			requireInformerConverged(t, direct, "/ioff/", inf, handlers)
			assert.True(t, log.has(source.ErrExpired), "the watch found its revision compacted")
			assert.Positive(t, inf.Stats().Reflector.Relists)
			for i, h := range handlers {
				got := make(map[string]int)
				for _, call := range h.deleteCalls() {
					got[call.obj.Key]++
					assert.True(t, call.unknown, "handler %d: delete of %s inferred by the relist", i, call.obj.Key)
					assert.Equal(t, known[call.obj.Key], call.obj, "handler %d: delete of %s carries the last known state", i, call.obj.Key)
				}
				assert.Equal(t, deleted, got, "handler %d: exactly one delete per key deleted while cut", i)
			}
		})
	}
}

func TestInformer_DecodeFailureIsReportedWithItsKeySkippedAndALaterGoodValueIsMirrored(t *testing.T) {
	t.Parallel()
	m := startEtcd(t)
	c := newClient(t, m.endpoint())
	ctx := context.Background()
	for i := range 20 {
		v := strconv.Itoa(i)
		if i%5 == 0 {
			v = "bad-list"
		}
		_, err := c.Put(ctx, fmt.Sprintf("/idec/%02d", i), v)
		require.NoError(t, err)
	}

	inf, handlers, log := startInformer(t, etcdmirror.NewTyped(c, "/idec/", decodeInt, etcdmirror.Options{}), 1)
	h := handlers[0]
	assert.Equal(t, 16, inf.Len(), "the 16 good keys of the list are mirrored")

	_, err := c.Put(ctx, "/idec/watched-bad", "bad-watch")
	require.NoError(t, err)
	_, err = c.Put(ctx, "/idec/watched-good", "7")
	require.NoError(t, err)
	// Good values for keys whose values failed, at the list and in the
	// watch.
	_, err = c.Put(ctx, "/idec/00", "100")
	require.NoError(t, err)
	_, err = c.Put(ctx, "/idec/watched-bad", "8")
	require.NoError(t, err)

	want := make(map[string]int)
	for i := range 20 {
		if i%5 != 0 {
			want[fmt.Sprintf("/idec/%02d", i)] = i
		}
	}
	want["/idec/00"] = 100
	want["/idec/watched-good"] = 7
	want["/idec/watched-bad"] = 8
	values := func(all iter.Seq2[string, etcdmirror.Object[int]]) map[string]int {
		out := make(map[string]int)
		for k, o := range all {
			out[k] = o.Value
		}
		return out
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, want, values(inf.All()), "cache")
		h.mu.Lock()
		view := maps.Clone(h.view)
		h.mu.Unlock()
		assert.Equal(c, want, values(maps.All(view)), "handler's view")
	}, convergeTimeout, 10*time.Millisecond)

	var skipped []string
	for _, err := range log.all() {
		var oe *mirror.ObjectError
		require.ErrorAs(t, err, &oe)
		skipped = append(skipped, oe.Key)
		var numErr *strconv.NumError
		assert.ErrorAs(t, err, &numErr, "the decoder's own error is kept")
	}
	assert.ElementsMatch(t, []string{"/idec/00", "/idec/05", "/idec/10", "/idec/15", "/idec/watched-bad"}, skipped)
	assert.Empty(t, h.deleteCalls())
}

// gatedWatch holds every Watch of its ListWatcher until open is closed.
type gatedWatch[T any] struct {
	source.ListWatcher[T]
	open chan struct{}
}

func (g gatedWatch[T]) Watch(ctx context.Context, opts source.WatchOptions) (source.Watcher[T], error) {
	select {
	case <-g.open:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g.ListWatcher.Watch(ctx, opts)
}

// forEachQueueAndPrevValues runs test, in parallel, once per informer
// queue and per adapter watch mode (without etcd's previous values, the
// default, and with them), each against an etcd of its own.
func forEachQueueAndPrevValues(t *testing.T, test func(t *testing.T, c *clientv3.Client, opts etcdmirror.Options)) {
	t.Parallel()
	for _, q := range informerQueues {
		for _, prev := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/PrevValues=%v", q.name, prev), func(t *testing.T) {
				t.Parallel()
				m := startEtcd(t)
				test(t, newClient(t, m.endpoint()), etcdmirror.Options{PrevValues: prev})
			})
		}
	}
}

func TestInformer_ObservedDeleteReachesHandlersWithTheLastValue(t *testing.T) {
	forEachQueueAndPrevValues(t, func(t *testing.T, c *clientv3.Client, opts etcdmirror.Options) {
		ctx := context.Background()
		putN(t, c, "/iod/", 3)
		inf, handlers, log := startInformer(t, etcdmirror.New(c, "/iod/", opts), 2)
		_, err := c.Put(ctx, "/iod/00000001", "changed")
		require.NoError(t, err)
		_, err = c.Put(ctx, "/iod/new", "new")
		require.NoError(t, err)
		last := make(map[string]etcdmirror.KV)
		for _, kv := range kvsAt(t, c, "/iod/", currentRev(t, c)) {
			last[kv.Key] = kv
		}
		for _, k := range []string{"/iod/00000000", "/iod/00000001", "/iod/new"} {
			_, err := c.Delete(ctx, k)
			require.NoError(t, err)
		}

		requireInformerConverged(t, c, "/iod/", inf, handlers)
		for i, h := range handlers {
			assert.ElementsMatch(t, []deleteCall[[]byte]{
				{obj: last["/iod/00000000"]}, // listed
				{obj: last["/iod/00000001"]}, // changed by the watch
				{obj: last["/iod/new"]},      // created by the watch
			}, h.deleteCalls(), "handler %d: each delete observed, with the key's last value", i)
		}
		assert.Empty(t, log.all())
	})
}

func TestInformer_DeleteWhosePreviousValueWasCompactedReachesHandlersWithTheLastValue(t *testing.T) {
	forEachQueueAndPrevValues(t, func(t *testing.T, c *clientv3.Client, opts etcdmirror.Options) {
		ctx := context.Background()
		_, err := c.Put(ctx, "/ipc/k", "v")
		require.NoError(t, err)
		_, err = c.Put(ctx, "/ipc/stays", "v")
		require.NoError(t, err)

		// The informer lists, then its watch waits while the key is
		// deleted and etcd compacts at the deletion, which keeps the
		// deletion but not the value before it.
		gate := gatedWatch[etcdmirror.KV]{ListWatcher: etcdmirror.New(c, "/ipc/", opts), open: make(chan struct{})}
		inf, handlers, log := startInformer(t, gate, 2)
		require.Equal(t, 2, inf.Len())
		last, ok := inf.GetByKey("/ipc/k")
		require.True(t, ok)
		d, err := c.Delete(ctx, "/ipc/k")
		require.NoError(t, err)
		_, err = c.Compact(ctx, d.Header.Revision, clientv3.WithCompactPhysical())
		require.NoError(t, err)
		close(gate.open)

		requireInformerConverged(t, c, "/ipc/", inf, handlers)
		for i, h := range handlers {
			calls := h.deleteCalls()
			require.Len(t, calls, 1, "handler %d: one delete", i)
			assert.Equal(t, last, calls[0].obj, "handler %d: the delete carries the last value, which etcd no longer has", i)
			assert.Equal(t, []byte("v"), calls[0].obj.Value)
			assert.False(t, calls[0].unknown, "handler %d: the delete was observed, not inferred", i)
		}
		assert.Zero(t, inf.Stats().Reflector.Relists, "the watch, not a relist, saw the deletion")
		assert.Empty(t, log.all())
	})
}

func TestInformer_RunReturnsAfterCancelAndLeavesNoGoroutine(t *testing.T) {
	m := startEtcd(t)
	c := newClient(t, m.endpoint())
	ctx := context.Background()
	putN(t, c, "/igo/", 10)
	// Warm the client's connection, so that what remains afterwards is
	// only what the informers started.
	currentRev(t, c)
	before := goleak.IgnoreCurrent()

	for _, q := range informerQueues {
		lw := etcdmirror.New(c, "/igo/", etcdmirror.Options{ProgressInterval: 100 * time.Millisecond})
		inf := mirror.NewInformer(lw, mirror.InformerOptions[string, etcdmirror.KV]{
			KeyFunc:      etcdmirror.KeyOf[[]byte],
			ResyncPeriod: time.Second,
			ErrorHandler: func(err error) { t.Errorf("%s: %v", q.name, err) },
		})
		early := newHandlerRecord[[]byte]()
		_, err := inf.AddEventHandler(early, mirror.HandlerOptions{})
		require.NoError(t, err)
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- inf.Run(rctx) }()
		late := newHandlerRecord[[]byte]()
		reg, err := inf.AddEventHandler(late, mirror.HandlerOptions{})
		require.NoError(t, err)
		wctx, wcancel := context.WithTimeout(ctx, convergeTimeout)
		require.NoError(t, mirror.WaitForCacheSync(wctx, inf, reg))
		wcancel()

		// An event in flight through the watch and both handlers.
		_, err = c.Put(ctx, "/igo/watched", q.name)
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			_, e := early.get("/igo/watched")
			_, l := late.get("/igo/watched")
			return e && l
		}, convergeTimeout, 10*time.Millisecond)

		cancel()
		select {
		case err := <-done:
			require.NoError(t, err, q.name)
		case <-time.After(eventTimeout):
			t.Fatalf("%s: Run has not returned %v after its context ended", q.name, eventTimeout)
		}
		_, err = c.Delete(ctx, "/igo/watched")
		require.NoError(t, err)
	}
	goleak.VerifyNone(t, before)
}

// A key whose value stops decoding is left out of a list, so a relist
// drops it from the cache (and tells the handlers it is gone). Learnt
// through the watch, the same change must leave the cache in the same
// state, not holding the key's previous value for good: otherwise what the
// mirror holds depends on how it heard of the change. (It did, until the
// adapter's source.Error for the put named the key for the mirror to evict.)
func TestInformer_ValueThatStopsDecodingLeavesTheCacheAsARelistWould(t *testing.T) {
	t.Parallel()
	m := startEtcd(t)
	c := newClient(t, m.endpoint())
	ctx := context.Background()
	_, err := c.Put(ctx, "/ibad/k", "1")
	require.NoError(t, err)
	inf, handlers, log := startInformer(t, etcdmirror.NewTyped(c, "/ibad/", decodeInt, etcdmirror.Options{}), 1)

	_, err = c.Put(ctx, "/ibad/k", "no longer an int")
	require.NoError(t, err)
	// A later change, to know when the watch has passed the first.
	_, err = c.Put(ctx, "/ibad/marker", "2")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, ok := handlers[0].get("/ibad/marker")
		return ok
	}, convergeTimeout, 10*time.Millisecond)
	require.True(t, log.has(strconv.ErrSyntax), "the decode failure is reported")

	relisted := listAll(t, etcdmirror.NewTyped(c, "/ibad/", decodeInt, etcdmirror.Options{}), "", 0)
	want := make(map[string]int64)
	for _, o := range relisted.Items {
		want[o.Key] = o.ModRevision
	}
	assert.Equal(t, want, cacheRevisions(inf), "the cache holds what a relist would")
	assert.Equal(t, want, handlers[0].revisions(), "the handler's view holds what a relist would")
}
