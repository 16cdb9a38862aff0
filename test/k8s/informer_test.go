package k8s

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/adapters/k8s"
	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestInformer_TypedInformerWithNamespaceIndexFollowsCreatesUpdatesAndDeletes(t *testing.T) {
	bothKinds(t,
		func(t *testing.T) { testTypedInformer(t, configMaps) },
		func(t *testing.T) { testTypedInformer(t, pods) })
}

// testTypedInformer mirrors the objects of kind k that carry one label,
// across two namespaces, through creates, updates and deletes, and checks
// the cache, its namespace index and the handlers against the server.
func testTypedInformer[T k8s.Object, L runtime.Object](t *testing.T, k kind[T, L]) {
	c := sharedCluster(t)
	ns1, ns2 := c.namespace(t), c.namespace(t)
	labels := map[string]string{"mirror-test": ns1}
	selector := "mirror-test=" + ns1
	for i := range 5 {
		k.create(t, c.client, ns1, fmt.Sprintf("a%d", i), labels)
	}
	for i := range 3 {
		k.create(t, c.client, ns2, fmt.Sprintf("b%d", i), labels)
	}
	k.create(t, c.client, ns1, "unlabelled", nil)

	// Pages of two: ConfigMaps page through etcd's continue tokens.
	inf := startInformer(t, k.lw(c.client, k8s.Options{LabelSelector: selector, NoStreamingList: true}), informerOptions{handlers: 2, pageSize: 2})
	requireConverged(t, inf, k.serverState(t, c.client, selector))
	requireIndexed(t, inf.Informer, ns1, "a0", "a1", "a2", "a3", "a4")
	requireIndexed(t, inf.Informer, ns2, "b0", "b1", "b2")

	// A handler added late gets the whole cache.
	late := newRecorder[T]()
	reg, err := inf.AddEventHandler(late, mirror.HandlerOptions{})
	require.NoError(t, err)
	inf.handlers = append(inf.handlers, late)

	k.annotate(t, c.client, k8s.Key{Namespace: ns1, Name: "a0"}, "1")
	last := k.annotate(t, c.client, k8s.Key{Namespace: ns1, Name: "a1"}, "1")
	k.delete(t, c.client, k8s.Key{Namespace: ns1, Name: "a1"})
	k.delete(t, c.client, k8s.Key{Namespace: ns2, Name: "b2"})
	k.create(t, c.client, ns1, "a5", labels)
	k.create(t, c.client, ns2, "b3", labels)
	requireConverged(t, inf, k.serverState(t, c.client, selector))
	require.True(t, reg.HasSynced())
	requireIndexed(t, inf.Informer, ns1, "a0", "a2", "a3", "a4", "a5")
	requireIndexed(t, inf.Informer, ns2, "b0", "b1", "b3")
	a0, ok := inf.GetByKey(k8s.Key{Namespace: ns1, Name: "a0"})
	require.True(t, ok)
	assert.Equal(t, "1", a0.GetAnnotations()["n"], "the cache holds the updated object")

	for i, h := range inf.handlers {
		calls := h.deleteCalls()
		assert.Equal(t, map[k8s.Key]int{{Namespace: ns1, Name: "a1"}: 1, {Namespace: ns2, Name: "b2"}: 1}, deleteCounts(calls),
			"handler %d: one delete per deleted object", i)
		for _, call := range calls {
			assert.False(t, call.unknown, "handler %d: the watch saw the delete of %v", i, key(call.obj))
			if key(call.obj).Name == "a1" {
				assert.Equal(t, last.GetAnnotations(), call.obj.GetAnnotations(), "handler %d: the delete carries the last state", i)
			}
		}
	}
	assert.Empty(t, inf.log.all())
}

// requireIndexed checks that the namespace index of inf lists exactly the
// given names under ns.
func requireIndexed[T k8s.Object](t *testing.T, inf *mirror.Informer[k8s.Key, T], ns string, names ...string) {
	t.Helper()
	objs, err := inf.ByIndex(k8s.NamespaceIndex, ns)
	require.NoError(t, err)
	var got []string
	for _, o := range objs {
		assert.Equal(t, ns, o.GetNamespace())
		got = append(got, o.GetName())
	}
	slices.Sort(got)
	assert.Equal(t, names, got, "objects indexed under %s", ns)
}

func TestInformer_RunReturnsAfterCancelAndLeavesNoGoroutine(t *testing.T) {
	c := sharedCluster(t)
	s := c.scope(t)
	configMaps.populate(t, c.client, s, 5)
	pods.populate(t, c.client, s, 5)
	// Warm the clients' connections, so that what remains afterwards is
	// only what the informers started.
	configMaps.serverState(t, c.client, "")
	pods.serverState(t, c.client, "")
	before := goleak.IgnoreCurrent()

	for _, q := range []struct{ name string }{{"InOrder"}} {
		for _, streaming := range []bool{false, true} {
			ctx, cancel := context.WithCancel(context.Background())
			opts := s.options()
			opts.NoStreamingList = !streaming
			cms := runUntilCancelled(t, ctx, configMaps.lw(c.client, opts))
			ps := runUntilCancelled(t, ctx, pods.lw(c.client, opts))
			// Events in flight through the watches.
			o0, v := k8s.Key{Namespace: s.ns, Name: "o0"}, fmt.Sprintf("%s-%v", q.name, streaming)
			configMaps.annotate(t, c.client, o0, v)
			pods.annotate(t, c.client, o0, v)
			require.Eventually(t, func() bool {
				cm, _ := cms.inf.GetByKey(o0)
				p, _ := ps.inf.GetByKey(o0)
				return cm.GetAnnotations()["n"] == v && p.GetAnnotations()["n"] == v
			}, convergeTimeout, 10*time.Millisecond)
			cancel()
			for _, done := range []chan error{cms.done, ps.done} {
				select {
				case err := <-done:
					require.NoError(t, err)
				case <-time.After(convergeTimeout):
					t.Fatalf("%s, streaming %v: Run has not returned %v after its context ended", q.name, streaming, convergeTimeout)
				}
			}
		}
	}
	// The server ends its side of each watch on its own time; what must
	// go is everything on the client's side.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NoError(c, goleak.Find(before))
	}, convergeTimeout, 50*time.Millisecond)
}

// running is an informer started by runUntilCancelled.
type running[T k8s.Object] struct {
	inf  *mirror.Informer[k8s.Key, T]
	done chan error
}

// runUntilCancelled runs an informer of lw with a handler registered
// before Run and one after, until ctx ends, and waits until both synced.
// Whether it streams its lists is lw's choice.
func runUntilCancelled[T k8s.Object](t *testing.T, ctx context.Context, lw source.ListWatcher[T]) running[T] {
	t.Helper()
	inf := mirror.NewInformer(lw, mirror.InformerOptions[k8s.Key, T]{
		KeyFunc:      k8s.KeyOf[T],
		Indexers:     mirror.Indexers[T]{k8s.NamespaceIndex: k8s.IndexByNamespace[T]},
		ResyncPeriod: time.Second,
		ErrorHandler: func(err error) { t.Errorf("%v", err) },
	})
	_, err := inf.AddEventHandler(newRecorder[T](), mirror.HandlerOptions{})
	require.NoError(t, err)
	r := running[T]{inf: inf, done: make(chan error, 1)}
	go func() { r.done <- inf.Run(ctx) }()
	reg, err := inf.AddEventHandler(newRecorder[T](), mirror.HandlerOptions{})
	require.NoError(t, err)
	wctx, cancel := context.WithTimeout(ctx, convergeTimeout)
	defer cancel()
	require.NoError(t, mirror.WaitForCacheSync(wctx, inf, reg))
	return r
}
