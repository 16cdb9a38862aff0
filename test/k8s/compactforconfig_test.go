package k8s

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/adapters/k8s"
	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// countingLW is a ListWatcher of NewForConfig that counts which of its
// ways of listing and watching a compact informer takes: decoded objects
// (List, Watch) or the server's encodings (ListEncoded, WatchEncoded).
type countingLW struct {
	*k8s.ListWatcher[*corev1.Pod]
	decoded, encoded atomic.Int64
	// events counts the objects of encoded watch events.
	events atomic.Int64
}

func (c *countingLW) List(ctx context.Context, opts source.ListOptions) (source.ListResult[*corev1.Pod], error) {
	c.decoded.Add(1)
	return c.ListWatcher.List(ctx, opts)
}

func (c *countingLW) Watch(ctx context.Context, opts source.WatchOptions) (source.Watcher[*corev1.Pod], error) {
	c.decoded.Add(1)
	return c.ListWatcher.Watch(ctx, opts)
}

func (c *countingLW) ListEncoded(ctx context.Context, opts source.ListOptions) (source.ListResult[[]byte], error) {
	c.encoded.Add(1)
	return c.ListWatcher.ListEncoded(ctx, opts)
}

func (c *countingLW) WatchEncoded(ctx context.Context, opts source.WatchOptions) (source.Watcher[[]byte], error) {
	c.encoded.Add(1)
	w, err := c.ListWatcher.WatchEncoded(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &countingWatcher{Watcher: w, events: &c.events}, nil
}

type countingWatcher struct {
	source.Watcher[[]byte]
	events *atomic.Int64
}

func (w *countingWatcher) Next(ctx context.Context) (source.Event[[]byte], error) {
	ev, err := w.Watcher.Next(ctx)
	if err == nil && ev.Object != nil {
		w.events.Add(1)
	}
	return ev, err
}

// A compact informer over k8s.NewForConfig, with protobuf on the wire,
// keeps each Pod's encoding as a real kube-apiserver sent it: it syncs,
// by a streaming list or paged lists, through ListEncoded and
// WatchEncoded alone (no object decoded and encoded again), holds what
// the default informer over NewForConfig holds, managedFields stripped or
// not, and follows the changes. Asked for JSON, it decodes and encodes.
func TestCompactForConfig_KeepsTheServersEncodings(t *testing.T) {
	c := sharedCluster(t)
	t.Parallel()
	for _, tc := range []struct {
		name        string
		contentType string
		noStreaming bool
		strip       bool
		encoded     bool
	}{
		{"protobuf, streaming list", "", false, false, true},
		{"protobuf, paged lists", "", true, false, true},
		{"protobuf, streaming list, stripped", "", false, true, true},
		{"JSON, streaming list", "application/json", false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := c.scope(t)
			pods.populate(t, c.client, s, 30)
			cfg := rest.CopyConfig(c.config)
			cfg.ContentType = tc.contentType
			opts := k8s.Options{LabelSelector: s.selector, NoStreamingList: tc.noStreaming, StripManagedFields: tc.strip}
			newLW := func() *k8s.ListWatcher[*corev1.Pod] {
				lw, err := k8s.NewForConfig[*corev1.Pod](cfg, podsResource, "", opts)
				require.NoError(t, err)
				return lw
			}
			counted := &countingLW{ListWatcher: newLW()}
			lwOpts := mirror.ListWatchOptions{PageSize: 7}
			compact := k8s.NewCompactInformer(k8s.CompactListWatcher(counted, func() *corev1.Pod { return new(corev1.Pod) }, nil),
				mirror.InformerOptions[k8s.Key, *k8s.Compact[*corev1.Pod]]{ListWatch: lwOpts})
			decoded := k8s.NewInformer(newLW(), k8s.InformerOptions[*corev1.Pod]{ListWatch: lwOpts})

			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 2)
			go func() { done <- compact.Run(ctx) }()
			go func() { done <- decoded.Run(ctx) }()
			t.Cleanup(func() {
				cancel()
				assert.NoError(t, <-done)
				assert.NoError(t, <-done)
			})
			wctx, wcancel := context.WithTimeout(ctx, convergeTimeout)
			defer wcancel()
			require.NoError(t, compact.WaitForSync(wctx))
			require.NoError(t, decoded.WaitForSync(wctx))
			// The first list, at version "0", is the watch cache's,
			// which may not have all the Pods just created yet; the
			// watch brings the rest.
			require.Eventually(t, func() bool { return len(compact.List()) == 30 && len(decoded.List()) == 30 },
				convergeTimeout, 10*time.Millisecond)
			sameObjects(t, decoded, compact)

			key := k8s.Key{Namespace: s.ns, Name: "o3"}
			changed := pods.annotate(t, c.client, key, "changed")
			pods.delete(t, c.client, k8s.Key{Namespace: s.ns, Name: "o4"})
			pods.create(t, c.client, s.ns, "new", s.labels)
			for _, inf := range []interface {
				GetByKey(k8s.Key) (string, bool)
			}{
				rvsOf(compact, (*k8s.Compact[*corev1.Pod]).ResourceVersion),
				rvsOf(decoded, (*corev1.Pod).GetResourceVersion),
			} {
				require.Eventually(t, func() bool {
					rv, ok := inf.GetByKey(key)
					_, gone := inf.GetByKey(k8s.Key{Namespace: s.ns, Name: "o4"})
					_, added := inf.GetByKey(k8s.Key{Namespace: s.ns, Name: "new"})
					return ok && rv == changed.GetResourceVersion() && !gone && added
				}, convergeTimeout, 10*time.Millisecond, "the informer sees the change, the deletion and the addition")
			}
			sameObjects(t, decoded, compact)
			got, ok := compact.GetByKey(key)
			require.True(t, ok)
			pod, err := got.Object()
			require.NoError(t, err)
			assert.Equal(t, "changed", pod.GetAnnotations()["n"])
			assert.Equal(t, tc.strip, len(pod.GetManagedFields()) == 0)

			if tc.encoded {
				assert.Zero(t, counted.decoded.Load(), "no List or Watch of decoded objects")
				assert.NotZero(t, counted.encoded.Load())
				assert.GreaterOrEqual(t, counted.events.Load(), int64(2), "the change and the addition came as encodings")
			} else {
				assert.Zero(t, counted.encoded.Load(), "a ListWatcher asking for JSON is not asked for encodings")
				assert.NotZero(t, counted.decoded.Load())
			}
		})
	}
}

// rvReader reads an informer's resource versions by key.
type rvReader func(k8s.Key) (string, bool)

func (f rvReader) GetByKey(k k8s.Key) (string, bool) { return f(k) }

// rvsOf returns a reader of the resource versions an informer holds,
// which rv reads of an object.
func rvsOf[T any](inf *mirror.Informer[k8s.Key, T], rv func(T) string) rvReader {
	return func(k k8s.Key) (string, bool) {
		obj, ok := inf.GetByKey(k)
		if !ok {
			return "", false
		}
		return rv(obj), true
	}
}

// sameObjects checks that compact holds, decoded, the Pods decoded holds.
func sameObjects(t *testing.T, decoded *mirror.Informer[k8s.Key, *corev1.Pod], compact *mirror.Informer[k8s.Key, *k8s.Compact[*corev1.Pod]]) {
	t.Helper()
	want := decoded.List()
	require.Len(t, compact.List(), len(want))
	for _, w := range want {
		key := k8s.Key{Namespace: w.Namespace, Name: w.Name}
		c, ok := compact.GetByKey(key)
		require.True(t, ok, "compact holds %s", key)
		got, err := c.Object()
		require.NoError(t, err)
		// A Pod's protobuf has no kind: a JSON watch's Pods do.
		w = w.DeepCopy()
		w.TypeMeta = metav1.TypeMeta{}
		require.Equal(t, w, got, "%s", key)
	}
}
