package k8s

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
)

// streamingClient is a client that says whether it can stream lists, as
// client-go's clientsets do.
type streamingClient struct{ unsupported bool }

func (c streamingClient) IsWatchListSemanticsUnSupported() bool { return c.unsupported }

func TestPrefersStreamingList_UnlessTurnedOffOrTheClientCannot(t *testing.T) {
	f := &fakePods{}
	listWatch := func() *cache.ListWatch {
		return &cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return f.List(ctx, o)
			},
			WatchFuncWithContext: f.Watch,
		}
	}
	for _, tc := range []struct {
		name string
		lw   *ListWatcher[*corev1.Pod]
		want bool
	}{
		{"New, default options", f.lw(Options{}), true},
		{"New, turned off", f.lw(Options{NoStreamingList: true}), false},
		{"FromListerWatcher", FromListerWatcher[*corev1.Pod](listWatch(), Options{}), true},
		{"FromListerWatcher, turned off", FromListerWatcher[*corev1.Pod](listWatch(), Options{NoStreamingList: true}), false},
		{"FromListerWatcher, a client that can",
			FromListerWatcher[*corev1.Pod](cache.ToListWatcherWithWatchListSemantics(listWatch(), streamingClient{}), Options{}), true},
		{"FromListerWatcher, a client that cannot",
			FromListerWatcher[*corev1.Pod](cache.ToListWatcherWithWatchListSemantics(listWatch(), streamingClient{unsupported: true}), Options{}), false},
		{"FromListerWatcher, client-go's fake clientset",
			FromListerWatcher[*corev1.Pod](cache.ToListWatcherWithWatchListSemantics(listWatch(), fake.NewClientset()), Options{}), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p source.StreamingListPreferrer = tc.lw
			assert.Equal(t, tc.want, p.PrefersStreamingList())
		})
	}
}

func TestWatch_StreamingListFromAClientThatCannotIsUnsupportedWithoutARequest(t *testing.T) {
	f := &fakePods{}
	lw := FromListerWatcher[*corev1.Pod](cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return f.List(ctx, o)
		},
		WatchFuncWithContext: f.Watch,
	}, streamingClient{unsupported: true}), Options{})
	_, err := lw.Watch(context.Background(), source.WatchOptions{SendInitialEvents: true})
	require.ErrorIs(t, err, errors.ErrUnsupported)
	assert.Empty(t, f.watchOpts)
	assert.Empty(t, f.listOpts)
}

func TestInformer_StreamsItsListByDefaultAndListsWhenTurnedOff(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   Options
		stream bool
	}{
		{"default", Options{}, true},
		{"NoStreamingList", Options{NoStreamingList: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := newFakeSource()
			f := &fakePods{
				lists:   []fakeList{{list: podList("7", "", pod("a", "p", "5"))}},
				watches: []fakeWatch{{src: src}},
			}
			if tc.stream {
				f.lists = nil
				src.events <- watch.Event{Type: watch.Added, Object: pod("a", "p", "5")}
				end := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "7",
					Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}
				src.events <- watch.Event{Type: watch.Bookmark, Object: end}
			}
			inf := mirror.NewInformer(f.lw(tc.opts), mirror.InformerOptions[Key, *corev1.Pod]{KeyFunc: KeyOf[*corev1.Pod]})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- inf.Run(ctx) }()
			defer func() {
				cancel()
				require.NoError(t, <-done)
			}()
			wctx, wcancel := context.WithTimeout(ctx, time.Minute)
			defer wcancel()
			require.NoError(t, mirror.WaitForCacheSync(wctx, inf))
			_, ok := inf.GetByKey(Key{Namespace: "a", Name: "p"})
			assert.True(t, ok)

			f.mu.Lock()
			defer f.mu.Unlock()
			require.Len(t, f.watchOpts, 1)
			assert.Equal(t, tc.stream, f.watchOpts[0].SendInitialEvents != nil && *f.watchOpts[0].SendInitialEvents,
				"the watch is a streaming list")
			if tc.stream {
				assert.Empty(t, f.listOpts, "no List")
			} else {
				assert.Len(t, f.listOpts, 1)
			}
		})
	}
}

func TestInformer_OverAFakeClientsetSyncsWithTheDefaultOptions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clientset := fake.NewClientset(pod("shop", "web-1", "1"))
		pods := clientset.CoreV1().Pods(metav1.NamespaceAll)
		lw := New[*corev1.Pod](pods.List, pods.Watch, Options{})
		require.True(t, lw.PrefersStreamingList(), "the default asks for streaming lists")
		inf := mirror.NewInformer(lw, mirror.InformerOptions[Key, *corev1.Pod]{KeyFunc: KeyOf[*corev1.Pod]})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { done <- inf.Run(ctx) }()
		synctest.Wait()
		require.True(t, inf.HasSynced(), "the fake watch that cannot stream is taken for a refusal: the informer lists")
		assert.Equal(t, 1, inf.Len())
		cancel()
		require.NoError(t, <-done)
	})
}
