package k8s

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/memsource"
	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

var podsGVR = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// countingLW is a ListWatcher over a memsource that counts its requests
// and the ListWatchers the factory made.
type countingLW struct {
	*memsource.Source[*corev1.Pod]
	requests atomic.Int64
}

func (c *countingLW) List(ctx context.Context, o source.ListOptions) (source.ListResult[*corev1.Pod], error) {
	c.requests.Add(1)
	return c.Source.List(ctx, o)
}

func (c *countingLW) Watch(ctx context.Context, o source.WatchOptions) (source.Watcher[*corev1.Pod], error) {
	c.requests.Add(1)
	return c.Source.Watch(ctx, o)
}

// podSource returns a source of Pods and a constructor for Typed that
// counts the ListWatchers made, with the namespaces they were made for.
func podSource(t *testing.T, pods ...*corev1.Pod) (*countingLW, func(string, Options) source.ListWatcher[*corev1.Pod], *atomic.Int64) {
	t.Helper()
	src := &countingLW{Source: memsource.New(StringKeyOf[*corev1.Pod], memsource.Options{})}
	for _, p := range pods {
		_, err := src.Put(p)
		require.NoError(t, err)
	}
	var made atomic.Int64
	return src, func(string, Options) source.ListWatcher[*corev1.Pod] {
		made.Add(1)
		return src
	}, &made
}

func labelled(ns, name string, l map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: l,
		UID: types.UID(ns + "/" + name)}}
}

func quietFactory(opts FactoryOptions) *Factory {
	if opts.ErrorHandler == nil {
		opts.ErrorHandler = func(Resource, error) {}
	}
	return NewFactory(opts)
}

func TestFactory_SharesOneInformerPerRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, newLW, made := podSource(t, labelled("a", "p", nil))
		f := quietFactory(FactoryOptions{})
		ctx, cancel := context.WithCancel(context.Background())
		defer f.Shutdown()
		defer cancel()

		web := Request[*corev1.Pod]{Resource: Resource{GVR: podsGVR, LabelSelector: "app=web"}}
		h1, err := Typed(f, web, newLW)
		require.NoError(t, err)
		h2, err := Typed(f, web, newLW)
		require.NoError(t, err)
		assert.Same(t, h1.Informer(), h2.Informer(), "equal requests share an informer")

		for _, other := range []Request[*corev1.Pod]{
			{Resource: Resource{GVR: podsGVR}},
			{Resource: Resource{GVR: podsGVR, LabelSelector: "app=web", Namespace: "a"}},
			{Resource: Resource{GVR: podsGVR, LabelSelector: "app=web"}, StripManagedFields: true},
		} {
			h, err := Typed(f, other, newLW)
			require.NoError(t, err)
			assert.NotSame(t, h1.Informer(), h.Informer(), "%+v", other)
		}
		assert.Equal(t, 4, f.Len())
		assert.Equal(t, int64(4), made.Load())

		require.False(t, h1.HasSynced(), "nothing runs before Start")
		f.Start(ctx)
		require.NoError(t, f.WaitForCacheSync(ctx))
		require.NoError(t, mirror.WaitForCacheSync(ctx, h1, h2))
	})
}

func TestFactory_ReleaseOfLastHandleStopsInformerAndDropsIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src, newLW, made := podSource(t, labelled("a", "p", nil))
		f := quietFactory(FactoryOptions{})
		// Not cancelled: only the releases may stop the informer, and the
		// bubble fails if a goroutine is left when the test returns.
		f.Start(context.Background())

		req := Request[*corev1.Pod]{Resource: Resource{GVR: podsGVR}}
		h1, err := Typed(f, req, newLW)
		require.NoError(t, err)
		h2, err := Typed(f, req, newLW)
		require.NoError(t, err)
		require.NoError(t, h1.WaitForSync(t.Context()))
		first := h1.Informer()
		e := h1.e

		h1.Release()
		h1.Release() // idempotent: h2's reference stays
		assert.Nil(t, h1.Informer())
		assert.ErrorIs(t, h1.WaitForSync(t.Context()), ErrReleased)
		assert.Equal(t, 1, f.Len())
		assert.NotNil(t, h2.Informer(), "another consumer keeps it")

		// h2 still gets changes.
		_, err = src.Put(labelled("a", "q", nil))
		require.NoError(t, err)
		synctest.Wait()
		_, ok := h2.Lister().Get("a", "q")
		assert.True(t, ok)

		h2.Release()
		assert.Equal(t, 0, f.Len())
		select {
		case <-e.done:
		default:
			t.Fatal("the informer still runs after its last release")
		}
		assert.Nil(t, e.inf, "the factory still holds the cache")

		// A new request makes a new informer.
		h3, err := Typed(f, req, newLW)
		require.NoError(t, err)
		assert.NotSame(t, first, h3.Informer())
		require.NoError(t, h3.WaitForSync(t.Context()))
		assert.Equal(t, 2, h3.Informer().Len())
		assert.Equal(t, int64(2), made.Load())
		h3.Release()
	})
}

type recordingHandler struct {
	mu    sync.Mutex
	names []string
}

func (r *recordingHandler) OnAdd(p *corev1.Pod, _ bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.names = append(r.names, p.Name)
}
func (r *recordingHandler) OnUpdate(_, p *corev1.Pod)      { r.OnAdd(p, false) }
func (r *recordingHandler) OnDelete(p *corev1.Pod, _ bool) {}

func (r *recordingHandler) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.names...)
}

func TestHandle_ReleaseRemovesItsHandlersOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src, newLW, _ := podSource(t, labelled("a", "p", nil))
		f := quietFactory(FactoryOptions{})
		f.Start(context.Background())
		defer f.Shutdown()
		req := Request[*corev1.Pod]{Resource: Resource{GVR: podsGVR}}
		h1, err := Typed(f, req, newLW)
		require.NoError(t, err)
		defer h1.Release()
		h2, err := Typed(f, req, newLW)
		require.NoError(t, err)
		var r1, r2 recordingHandler
		_, err = h1.AddEventHandler(&r1, mirror.HandlerOptions{})
		require.NoError(t, err)
		_, err = h2.AddEventHandler(&r2, mirror.HandlerOptions{})
		require.NoError(t, err)
		synctest.Wait()

		h2.Release()
		_, err = h2.AddEventHandler(&r2, mirror.HandlerOptions{})
		assert.ErrorIs(t, err, ErrReleased)
		_, err = src.Put(labelled("a", "q", nil))
		require.NoError(t, err)
		synctest.Wait()
		assert.Equal(t, []string{"p", "q"}, r1.got())
		assert.Equal(t, []string{"p"}, r2.got(), "a released consumer's handler is removed")
	})
}

func TestFactory_RefusesBadRequestsAndAfterShutdown(t *testing.T) {
	_, newLW, _ := podSource(t)
	f := quietFactory(FactoryOptions{})
	_, err := Typed(f, Request[*corev1.Pod]{}, newLW)
	assert.Error(t, err, "no GVR")
	_, err = Typed(f, Request[*corev1.Pod]{Resource: Resource{GVR: podsGVR},
		Transform: StripManagedFields[*corev1.Pod]}, newLW)
	assert.Error(t, err, "a Transform without a name")
	_, err = Typed[*corev1.Pod](f, Request[*corev1.Pod]{Resource: Resource{GVR: podsGVR}}, nil)
	assert.Error(t, err, "no constructor")
	_, err = Dynamic(f, Request[*unstructured.Unstructured]{Resource: Resource{GVR: podsGVR}})
	assert.Error(t, err, "no dynamic client")
	assert.ErrorIs(t, f.WaitForCacheSync(t.Context()), ErrNotStarted)
	f.Shutdown()
	_, err = Typed(f, Request[*corev1.Pod]{Resource: Resource{GVR: podsGVR}}, newLW)
	assert.ErrorIs(t, err, ErrFactoryShutdown)
}

func TestFactory_ResourceGoneIsReportedOnceAndRetriedSlowly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src, newLW, _ := podSource(t, labelled("a", "p", nil))
		var mu sync.Mutex
		var reports []error
		f := NewFactory(FactoryOptions{
			GoneRetry: time.Minute,
			ErrorHandler: func(_ Resource, err error) {
				mu.Lock()
				defer mu.Unlock()
				reports = append(reports, err)
			},
		})
		f.Start(context.Background())
		defer f.Shutdown()
		h, err := Typed(f, Request[*corev1.Pod]{Resource: Resource{GVR: podsGVR}}, newLW)
		require.NoError(t, err)
		defer h.Release()
		require.NoError(t, h.WaitForSync(t.Context()))

		// The resource's type is no longer served: every request is a 404
		// for the collection, as for a custom resource whose definition
		// was deleted.
		notFound := apierrors.NewNotFound(schema.GroupResource{Group: "example.com", Resource: "widgets"}, "")
		src.FailNext(1<<30, notFound)
		src.CutWatches()
		synctest.Wait()
		before := src.requests.Load()
		time.Sleep(30 * time.Minute) // fake time, in the bubble
		synctest.Wait()
		asked := src.requests.Load() - before

		assert.True(t, h.Gone())
		mu.Lock()
		var gone int
		for _, e := range reports {
			if errors.Is(e, ErrResourceGone) {
				gone++
				assert.ErrorIs(t, e, mirror.ErrPermanent)
			}
		}
		n := len(reports)
		mu.Unlock()
		assert.Equal(t, 1, gone, "reported once: %v", reports)
		assert.LessOrEqual(t, n, 2, "the retries are not reported: %v", reports)
		assert.LessOrEqual(t, asked, int64(31), "asked about once a GoneRetry")
		assert.Positive(t, asked, "still asking")
		_, ok := h.Lister().Get("a", "p")
		assert.True(t, ok, "the cache keeps what it held")

		// The resource comes back, and the informer with it.
		src.FailNext(0, nil)
		_, err = src.Put(labelled("a", "q", nil))
		require.NoError(t, err)
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		assert.False(t, h.Gone())
		_, ok = h.Lister().Get("a", "q")
		assert.True(t, ok)
	})
}

func TestFactory_ConcurrentRequestsShareOneInformer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, newLW, _ := podSource(t, labelled("a", "p", nil))
		f := quietFactory(FactoryOptions{})
		f.Start(context.Background())
		req := Request[*corev1.Pod]{Resource: Resource{GVR: podsGVR}}
		handles := make([]*Handle[*corev1.Pod], 8)
		var wg sync.WaitGroup
		for i := range handles {
			wg.Go(func() {
				h, err := Typed(f, req, newLW)
				assert.NoError(t, err)
				handles[i] = h
			})
		}
		wg.Wait()
		assert.Equal(t, 1, f.Len())
		for _, h := range handles[1:] {
			assert.Same(t, handles[0].Informer(), h.Informer())
		}
		require.NoError(t, handles[0].WaitForSync(t.Context()))
		for _, h := range handles {
			h.Release()
		}
		assert.Equal(t, 0, f.Len())
		// The bubble fails if an informer made by a request that lost
		// the race, or the shared one, still runs.
	})
}

// bareLW hides every optional interface of the ListWatcher it holds.
type bareLW struct {
	source.ListWatcher[*corev1.Pod]
}

// A factory's informer can wait for a version and read consistently when
// its ListWatcher can order versions and say its current one, as the
// adapter's can; the factory's own wrapping of it hides neither.
func TestFactory_InformerWaitsForVersionAndReadsConsistentlyIfItsSourceCan(t *testing.T) {
	for _, tc := range []struct {
		name        string
		bare        bool
		unsupported bool
	}{
		{name: "source with versions"},
		{name: "source without", bare: true, unsupported: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				src, newLW, _ := podSource(t, labelled("a", "p", nil))
				if tc.bare {
					newLW = func(string, Options) source.ListWatcher[*corev1.Pod] { return bareLW{src} }
				}
				f := quietFactory(FactoryOptions{})
				ctx, cancel := context.WithCancel(context.Background())
				defer f.Shutdown()
				defer cancel()
				f.Start(ctx)
				h, err := Typed(f, Request[*corev1.Pod]{Resource: Resource{GVR: podsGVR}}, newLW)
				require.NoError(t, err)
				defer h.Release()
				require.NoError(t, h.WaitForSync(t.Context()))
				inf := h.Informer()

				rev, err := src.Put(labelled("a", "q", nil))
				require.NoError(t, err)
				rv := strconv.FormatInt(rev, 10)
				check := func(what string, err error) {
					t.Helper()
					if tc.unsupported {
						assert.ErrorIs(t, err, errors.ErrUnsupported, what)
					} else {
						assert.NoError(t, err, what)
					}
				}
				check("WaitForVersion", inf.WaitForVersion(t.Context(), rv))
				r, err := inf.Consistent(t.Context(), mirror.ConsistentOptions{})
				check("Consistent", err)
				if err == nil {
					_, ok := r.GetByKey(Key{Namespace: "a", Name: "q"})
					assert.True(t, ok, "a consistent read sees the write")
				}
				// A write of the program's own, recorded, then read.
				rev, err = src.Put(labelled("a", "w", nil))
				require.NoError(t, err)
				w := Key{Namespace: "a", Name: "w"}
				check("RecordWrite", inf.RecordWrite(w, strconv.FormatInt(rev, 10)))
				_, ok, err := inf.GetAfterWrite(t.Context(), w, mirror.ConsistentOptions{})
				require.NoError(t, err, "GetAfterWrite")
				if !tc.unsupported {
					assert.True(t, ok, "GetAfterWrite sees the write")
				}
			})
		})
	}
}

// stuckLW is a ListWatcher whose lists never end: its informer never
// syncs.
type stuckLW struct {
	source.ListWatcher[*corev1.Pod]
}

func (stuckLW) List(ctx context.Context, _ source.ListOptions) (source.ListResult[*corev1.Pod], error) {
	<-ctx.Done()
	return source.ListResult[*corev1.Pod]{}, ctx.Err()
}

// A WaitForSync already waiting on a handle when the handle is released
// returns ErrReleased, whether the handle was its informer's last or not.
func TestHandle_WaitForSyncInProgressReturnsErrReleasedOnRelease(t *testing.T) {
	for _, tc := range []struct {
		name   string
		others int
	}{
		{name: "last handle"},
		{name: "another handle stays", others: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := quietFactory(FactoryOptions{})
				ctx, cancel := context.WithCancel(context.Background())
				defer f.Shutdown()
				defer cancel()
				f.Start(ctx)
				req := Request[*corev1.Pod]{Resource: Resource{GVR: podsGVR}}
				newLW := func(string, Options) source.ListWatcher[*corev1.Pod] { return stuckLW{} }
				h, err := Typed(f, req, newLW)
				require.NoError(t, err)
				for range tc.others {
					other, err := Typed(f, req, newLW)
					require.NoError(t, err)
					defer other.Release()
				}

				wctx, wcancel := context.WithCancel(t.Context())
				defer wcancel()
				waited := make(chan error, 1)
				go func() { waited <- h.WaitForSync(wctx) }()
				synctest.Wait()
				h.Release()
				synctest.Wait()
				select {
				case err := <-waited:
					assert.ErrorIs(t, err, ErrReleased)
				default:
					t.Error("WaitForSync still waits after its handle's release")
					wcancel()
					<-waited
				}
			})
		})
	}
}
