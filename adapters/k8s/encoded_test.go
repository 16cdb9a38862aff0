package k8s

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protowire"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// podMessage is p's own protobuf message, as Marshal encodes it: what
// ListEncoded and WatchEncoded hand out for it.
func podMessage(t *testing.T, p *corev1.Pod) []byte {
	b, err := p.Marshal()
	require.NoError(t, err)
	return b
}

// stripIf is p, without its managedFields if strip.
func stripIf(strip bool, p *corev1.Pod) *corev1.Pod {
	if strip {
		return stripped(p)
	}
	return p
}

func TestListEncoded_HandsOutEachItemsOwnMessage(t *testing.T) {
	pods := []*corev1.Pod{managedPod("a", "web-1", "7"), managedPod("b", "web-2", "9")}
	for _, strip := range []bool{false, true} {
		t.Run(fmt.Sprintf("strip=%v", strip), func(t *testing.T) {
			s := &wireServer{pods: pods}
			lw := newPodsForConfig(t, startWireServer(t, s), Options{StripManagedFields: strip})
			res, err := lw.ListEncoded(context.Background(), source.ListOptions{Limit: 50})
			require.NoError(t, err)
			assert.Equal(t, "10", res.ResourceVersion)
			assert.Empty(t, res.Skipped)
			require.Len(t, res.Items, 2)
			for i, p := range pods {
				want := typeless(p)
				if strip {
					want = stripped(want)
				}
				// The bare message, no "k8s\x00" envelope: byte for
				// byte what the object's Marshal makes.
				assert.Equal(t, podMessage(t, want), res.Items[i], "item %d", i)
			}
			// Appending to an item must not write over the next.
			_ = append(res.Items[0], make([]byte, 64)...)
			assert.Equal(t, podMessage(t, stripIf(strip, typeless(pods[1]))), res.Items[1], "the next item, after an append to the first")
			assert.Contains(t, s.queries[0], "limit=50")
		})
	}
}

func TestListEncoded_ReportsAnItemItCannotStripAndKeepsTheRest(t *testing.T) {
	good := managedPod("a", "web-1", "7")
	list := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "10"}, Items: []corev1.Pod{*good, *good, *good}}
	list.Items[2].Name = "web-3"
	cfg := serveSpoiledPage(t, list, 1)
	lw := newPodsForConfig(t, cfg, Options{StripManagedFields: true})
	res, err := lw.ListEncoded(context.Background(), source.ListOptions{})
	require.NoError(t, err)
	require.Len(t, res.Items, 2)
	for i, name := range []string{"web-1", "web-3"} {
		var p corev1.Pod
		require.NoError(t, p.Unmarshal(res.Items[i]))
		assert.Equal(t, name, p.Name)
		assert.Empty(t, p.ManagedFields)
	}
	require.Len(t, res.Skipped, 1)
	var oe *mirror.ObjectError
	require.ErrorAs(t, res.Skipped[0], &oe)
	assert.Equal(t, "10", oe.ResourceVersion)
	assert.Contains(t, oe.Error(), "item 1")
	assert.Contains(t, oe.Error(), "bytes")
	assert.NotContains(t, oe.Error(), "registry.example", "no contents in the error")
}

// drainEncoded reads w's events until it ends, copying each encoding
// before the next Next, as the contract asks.
func drainEncoded(t *testing.T, w source.Watcher[[]byte]) ([]source.Event[[]byte], error) {
	t.Helper()
	var evs []source.Event[[]byte]
	for {
		ev, err := w.Next(context.Background())
		if err != nil {
			return evs, err
		}
		ev.Object = bytes.Clone(ev.Object)
		evs = append(evs, ev)
	}
}

func TestWatchEncoded_HandsOutEachEventsOwnMessageInOrder(t *testing.T) {
	// More events than the batches of every decoding goroutine hold, so
	// that batches are reused while the events are read.
	const n = 4*maxBatch*4 + 7
	for _, strip := range []bool{false, true} {
		t.Run(fmt.Sprintf("strip=%v", strip), func(t *testing.T) {
			s := &wireServer{events: mixedEvents(n)}
			lw := newPodsForConfig(t, startWireServer(t, s), Options{StripManagedFields: strip})
			w, err := lw.WatchEncoded(context.Background(), source.WatchOptions{ResourceVersion: "5", SendInitialEvents: true})
			require.NoError(t, err)
			defer w.Stop()
			evs, err := drainEncoded(t, w)
			require.ErrorIs(t, err, io.EOF)
			require.Len(t, evs, n+1)
			for i, ev := range evs[:n] {
				want := typeless(s.events[i].obj.(*corev1.Pod))
				if strip {
					want = stripped(want)
				}
				require.Equal(t, podMessage(t, want), ev.Object, "event %d", i)
				require.Equal(t, []source.EventType{source.Added, source.Updated, source.Deleted}[i%3], ev.Type, "event %d", i)
				require.Equal(t, fmt.Sprint(100+i), ev.ResourceVersion)
			}
			assert.Equal(t, source.Event[[]byte]{Type: source.Bookmark, ResourceVersion: "999", InitialEventsEnd: true}, evs[n])
			assert.Contains(t, s.queries[0], "sendInitialEvents=true")
		})
	}
}

func TestWatchEncoded_ReportsAnUnreadableObjectAndGoesOn(t *testing.T) {
	// An object wrapped as the server wraps one, whose message is not a
	// Pod's: its metadata field runs past its end.
	const secret = "secret-contents"
	bad := append([]byte("k8s\x00"), mustMarshalUnknown(t, []byte{0x0a, 0x7f, 's', 'e', 'c', 'r', 'e', 't', '-', 'c', 'o', 'n', 't', 'e', 'n', 't', 's'})...)
	for _, strip := range []bool{false, true} {
		t.Run(fmt.Sprintf("strip=%v", strip), func(t *testing.T) {
			s := &wireServer{events: []watchFrame{
				{typ: watch.Added, obj: managedPod("ns", "before", "11")},
				{raw: mustMarshal(t, &metav1.WatchEvent{Type: "ADDED", Object: runtime.RawExtension{Raw: bad}})},
				{typ: watch.Added, obj: managedPod("ns", "after", "12")},
			}}
			lw := newPodsForConfig(t, startWireServer(t, s), Options{StripManagedFields: strip})
			w, err := lw.WatchEncoded(context.Background(), source.WatchOptions{ResourceVersion: "10"})
			require.NoError(t, err)
			defer w.Stop()
			evs, err := drainEncoded(t, w)
			require.ErrorIs(t, err, io.EOF)
			require.Len(t, evs, 3)
			assert.Equal(t, "11", evs[0].ResourceVersion)
			assert.Equal(t, source.Error, evs[1].Type)
			var oe *mirror.ObjectError
			require.ErrorAs(t, evs[1].Err, &oe)
			assert.Contains(t, oe.Error(), "bytes")
			assert.NotContains(t, oe.Error(), secret)
			assert.Equal(t, "12", evs[2].ResourceVersion)
		})
	}
}

// mustMarshalUnknown wraps msg in a runtime.Unknown of a v1 Pod.
func mustMarshalUnknown(t *testing.T, msg []byte) []byte {
	u := runtime.Unknown{TypeMeta: runtime.TypeMeta{APIVersion: "v1", Kind: "Pod"}, Raw: msg}
	b, err := u.Marshal()
	require.NoError(t, err)
	return b
}

func TestEncoded_NotClaimedWhereTheWireIsJSON(t *testing.T) {
	ctx := context.Background()
	pods := []*corev1.Pod{managedPod("a", "web-1", "7")}
	t.Run("the config asks for JSON: nothing is requested", func(t *testing.T) {
		s := &wireServer{pods: pods}
		cfg := startWireServer(t, s)
		cfg.ContentType = contentJSON
		lw := newPodsForConfig(t, cfg, Options{})
		_, err := lw.ListEncoded(ctx, source.ListOptions{})
		require.ErrorIs(t, err, ErrNotEncoded)
		_, err = lw.WatchEncoded(ctx, source.WatchOptions{ResourceVersion: "10"})
		require.ErrorIs(t, err, ErrNotEncoded)
		assert.Empty(t, s.accepts)
		assert.False(t, lw.encodes())
	})
	t.Run("a typed client's ListWatcher", func(t *testing.T) {
		lw := New[*corev1.Pod](func(context.Context, metav1.ListOptions) (*corev1.PodList, error) { return &corev1.PodList{}, nil }, nil, Options{})
		_, err := lw.ListEncoded(ctx, source.ListOptions{})
		require.ErrorIs(t, err, ErrNotEncoded)
		_, err = lw.WatchEncoded(ctx, source.WatchOptions{})
		require.ErrorIs(t, err, ErrNotEncoded)
		assert.False(t, lw.encodes())
	})
	t.Run("the server answers a list with JSON, then it is not asked again", func(t *testing.T) {
		s := &wireServer{jsonOnly: true, pods: pods}
		lw := newPodsForConfig(t, startWireServer(t, s), Options{})
		require.True(t, lw.encodes())
		_, err := lw.ListEncoded(ctx, source.ListOptions{})
		require.ErrorIs(t, err, ErrNotEncoded)
		_, err = lw.WatchEncoded(ctx, source.WatchOptions{ResourceVersion: "10"})
		require.ErrorIs(t, err, ErrNotEncoded)
		assert.Len(t, s.accepts, 1)
		res, err := lw.List(ctx, source.ListOptions{})
		require.NoError(t, err, "List still decodes")
		assert.Len(t, res.Items, 1)
	})
	t.Run("the server answers a watch with JSON: it ends before any event", func(t *testing.T) {
		s := &wireServer{jsonOnly: true, pods: pods, events: []watchFrame{{typ: watch.Added, obj: pods[0]}}}
		lw := newPodsForConfig(t, startWireServer(t, s), Options{})
		w, err := lw.WatchEncoded(ctx, source.WatchOptions{ResourceVersion: "10"})
		require.NoError(t, err)
		defer w.Stop()
		evs, err := drainEncoded(t, w)
		require.ErrorIs(t, err, ErrNotEncoded)
		assert.Empty(t, evs)
		_, err = lw.ListEncoded(ctx, source.ListOptions{})
		require.ErrorIs(t, err, ErrNotEncoded)
	})
}

// withUnknownField returns msg with a field no Pod has appended: a
// decode drops it, so an encoding that still has it was kept as it
// arrived, never decoded and encoded again.
func withUnknownField(msg []byte) []byte {
	msg = bytes.Clone(msg)
	msg = protowire.AppendTag(msg, 999, protowire.BytesType)
	return protowire.AppendBytes(msg, []byte("an unknown field of the future"))
}

// rawPodServer serves a list of pods and a watch of events as a
// kube-apiserver does in protobuf, each object's message passed through
// edit first.
func rawPodServer(t *testing.T, list []*corev1.Pod, events []watchFrame, edit func([]byte) []byte) *rest.Config {
	wrap := func(kind string, msg []byte) []byte {
		u := runtime.Unknown{TypeMeta: runtime.TypeMeta{APIVersion: "v1", Kind: kind}, Raw: msg}
		b, err := u.Marshal()
		require.NoError(t, err)
		return append([]byte("k8s\x00"), b...)
	}
	var listMsg []byte
	lm, err := (&metav1.ListMeta{ResourceVersion: "10"}).Marshal()
	require.NoError(t, err)
	listMsg = protowire.AppendTag(listMsg, 1, protowire.BytesType)
	listMsg = protowire.AppendBytes(listMsg, lm)
	for _, p := range list {
		listMsg = protowire.AppendTag(listMsg, 2, protowire.BytesType)
		listMsg = protowire.AppendBytes(listMsg, edit(podMessage(t, p)))
	}
	listBody := wrap("PodList", listMsg)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("watch") != "true" {
			w.Header().Set("Content-Type", contentProtobuf)
			_, _ = w.Write(listBody)
			return
		}
		w.Header().Set("Content-Type", contentProtobuf+";stream=watch")
		for _, f := range events {
			msg := podMessage(t, f.obj.(*corev1.Pod))
			if f.typ != watch.Bookmark {
				msg = edit(msg)
			}
			ev, err := (&metav1.WatchEvent{Type: string(f.typ), Object: runtime.RawExtension{Raw: wrap("Pod", msg)}}).Marshal()
			require.NoError(t, err)
			var l [4]byte
			binary.BigEndian.PutUint32(l[:], uint32(len(ev)))
			_, _ = w.Write(l[:])
			_, _ = w.Write(ev)
		}
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	return &rest.Config{Host: srv.URL}
}

func TestCompactListWatcher_KeepsNewForConfigsEncodingsAsTheyArrived(t *testing.T) {
	list := []*corev1.Pod{managedPod("a", "web-1", "7"), managedPod("b", "web-2", "9")}
	bookmark := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "10",
		Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}
	for _, tc := range []struct {
		name        string
		noStreaming bool
		strip       bool
	}{
		{"paged lists", true, false},
		{"streaming list", false, false},
		{"streaming list, stripped", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			events := []watchFrame{{typ: watch.Added, obj: list[0]}, {typ: watch.Added, obj: list[1]}, {typ: watch.Bookmark, obj: bookmark},
				{typ: watch.Modified, obj: managedPod("a", "web-1", "11")}, {typ: watch.Added, obj: managedPod("c", "web-3", "12")}}
			if tc.noStreaming {
				events = events[3:]
			}
			cfg := rawPodServer(t, list, events, withUnknownField)
			lw := newPodsForConfig(t, cfg, Options{NoStreamingList: tc.noStreaming, StripManagedFields: tc.strip})
			clw := CompactListWatcher(lw, func() *corev1.Pod { return new(corev1.Pod) }, nil)
			require.NotNil(t, clw.(*compactLW[*corev1.Pod]).encoded, "NewForConfig's ListWatcher is taken as an EncodedListWatcher")
			inf := NewCompactInformer(clw, mirror.InformerOptions[Key, *Compact[*corev1.Pod]]{})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- inf.Run(ctx) }()
			t.Cleanup(func() { cancel(); assert.NoError(t, <-done) })
			require.Eventually(t, func() bool {
				c, ok := inf.GetByKey(Key{Namespace: "c", Name: "web-3"})
				a, _ := inf.GetByKey(Key{Namespace: "a", Name: "web-1"})
				return ok && c.ResourceVersion() == "12" && a != nil && a.ResourceVersion() == "11"
			}, 10*time.Second, time.Millisecond)
			for _, want := range []*corev1.Pod{managedPod("a", "web-1", "11"), list[1], managedPod("c", "web-3", "12")} {
				c, ok := inf.GetByKey(Key{Namespace: want.Namespace, Name: want.Name})
				require.True(t, ok)
				if tc.strip {
					want = stripped(want)
				}
				// The unknown field is still there: the bytes are
				// the server's, not a decode's encoding.
				assert.Equal(t, len(withUnknownField(podMessage(t, want))), c.Len(), want.Name)
				got, err := c.Object()
				require.NoError(t, err)
				assert.Equal(t, typeless(want), got)
			}
		})
	}
}

func TestCompactListWatcher_FallsBackToDecodingWhereTheServerAnswersJSON(t *testing.T) {
	pods := []*corev1.Pod{managedPod("a", "web-1", "7"), managedPod("b", "web-2", "9")}
	bookmark := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "10",
		Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}
	for _, tc := range []struct {
		name        string
		noStreaming bool
		askJSON     bool
	}{
		{"paged lists", true, false},
		{"streaming list", false, false},
		{"the config asks for JSON", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &wireServer{jsonOnly: true, pods: pods}
			if !tc.noStreaming {
				s.events = []watchFrame{{typ: watch.Added, obj: pods[0]}, {typ: watch.Added, obj: pods[1]}, {typ: watch.Bookmark, obj: bookmark}}
			}
			cfg := startWireServer(t, s)
			if tc.askJSON {
				cfg.ContentType = contentJSON
			}
			lw := newPodsForConfig(t, cfg, Options{NoStreamingList: tc.noStreaming})
			clw := CompactListWatcher(lw, func() *corev1.Pod { return new(corev1.Pod) }, nil)
			// Known JSON from the start: not taken as encoded at all.
			assert.Equal(t, tc.askJSON, clw.(*compactLW[*corev1.Pod]).encoded == nil)
			inf := NewCompactInformer(clw, mirror.InformerOptions[Key, *Compact[*corev1.Pod]]{ListWatch: mirror.ListWatchOptions{InitialBackoff: time.Millisecond}})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- inf.Run(ctx) }()
			t.Cleanup(func() { cancel(); assert.NoError(t, <-done) })
			wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
			defer wcancel()
			require.NoError(t, inf.WaitForSync(wctx))
			for _, p := range pods {
				c, ok := inf.GetByKey(Key{Namespace: p.Namespace, Name: p.Name})
				require.True(t, ok)
				got, err := c.Object()
				require.NoError(t, err)
				assert.Equal(t, typeless(p), got)
			}
		})
	}
}

func TestStripInPlace_WritesWithinTheMessageAndMatchesACopy(t *testing.T) {
	for _, p := range []*corev1.Pod{managedPod("a", "web-1", "7"), pod("a", "bare", "1")} {
		msg := podMessage(t, p)
		want, _, err := withoutManagedFields(msg, nil)
		require.NoError(t, err)
		want = bytes.Clone(want)
		// The message between neighbours, as in a page or a batch.
		buf := append(append(bytes.Repeat([]byte{0xaa}, 16), msg...), bytes.Repeat([]byte{0xbb}, 16)...)
		got, err := stripInPlace(buf[16 : 16+len(msg)])
		require.NoError(t, err)
		assert.Equal(t, want, got, p.Name)
		assert.Equal(t, bytes.Repeat([]byte{0xaa}, 16), buf[:16])
		assert.Equal(t, bytes.Repeat([]byte{0xbb}, 16), buf[16+len(msg):])
	}
}

func TestNewForConfig_WatchFromNowAndCurrentVersionListThroughItsOwnClient(t *testing.T) {
	s := &wireServer{pods: []*corev1.Pod{managedPod("a", "web-1", "7")}}
	lw := newPodsForConfig(t, startWireServer(t, s), Options{})
	rv, err := lw.CurrentVersion(context.Background())
	require.NoError(t, err)
	assert.Equal(t, "10", rv)
	w, err := lw.Watch(context.Background(), source.WatchOptions{})
	require.NoError(t, err)
	w.Stop()
	require.Len(t, s.queries, 3)
	assert.Contains(t, s.queries[1], "limit=1")
	assert.Contains(t, s.queries[2], "resourceVersion=10")
}

func TestCompactListWatcher_MakesAPageCompactAChunkAtATime(t *testing.T) {
	var pods []*corev1.Pod
	for i := range 2*chunkItems + 7 {
		pods = append(pods, managedPod("a", fmt.Sprintf("p%04d", i), "1"))
	}
	for _, strip := range []bool{false, true} {
		t.Run(fmt.Sprintf("strip=%v", strip), func(t *testing.T) {
			s := &wireServer{pods: pods}
			lw := newPodsForConfig(t, startWireServer(t, s), Options{StripManagedFields: strip})

			// The page comes in chunks, never more than chunkItems
			// items at once.
			var sizes []int
			res, err := lw.listEncodedChunks(context.Background(), source.ListOptions{}, func(items [][]byte) {
				sizes = append(sizes, len(items))
			})
			require.NoError(t, err)
			assert.Equal(t, "10", res.ResourceVersion)
			assert.Empty(t, res.Items)
			assert.Equal(t, []int{chunkItems, chunkItems, 7}, sizes)

			clw := CompactListWatcher(lw, func() *corev1.Pod { return new(corev1.Pod) }, nil)
			require.NotNil(t, clw.(*compactLW[*corev1.Pod]).chunked, "NewForConfig's ListWatcher hands a page over in chunks")
			page, err := clw.List(context.Background(), source.ListOptions{})
			require.NoError(t, err)
			assert.Equal(t, "10", page.ResourceVersion)
			assert.Empty(t, page.Skipped)
			require.Len(t, page.Items, len(pods))
			for i, c := range page.Items {
				want := typeless(pods[i])
				if strip {
					want = stripped(want)
				}
				// Each Compact holds its own bytes, not the chunk's,
				// which the next chunk overwrote.
				got, err := c.Object()
				require.NoError(t, err)
				require.Equal(t, want, got, "item %d", i)
			}
		})
	}
}

func TestCompactListWatcher_ReportsAnItemOfAChunkItCannotReadAndKeepsTheRest(t *testing.T) {
	good := managedPod("a", "web-1", "7")
	list := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "10"}}
	for i := range chunkItems + 2 {
		p := *good
		p.Name = fmt.Sprintf("web-%d", i)
		list.Items = append(list.Items, p)
	}
	cfg := serveSpoiledPage(t, list, chunkItems+1) // the second chunk's second item
	for _, strip := range []bool{false, true} {
		t.Run(fmt.Sprintf("strip=%v", strip), func(t *testing.T) {
			lw := newPodsForConfig(t, cfg, Options{StripManagedFields: strip})
			clw := CompactListWatcher(lw, func() *corev1.Pod { return new(corev1.Pod) }, nil)
			page, err := clw.List(context.Background(), source.ListOptions{})
			require.NoError(t, err)
			require.Len(t, page.Items, chunkItems+1)
			assert.Equal(t, Key{Namespace: "a", Name: fmt.Sprint("web-", chunkItems)}, page.Items[chunkItems].Key())
			require.Len(t, page.Skipped, 1)
			var oe *mirror.ObjectError
			require.ErrorAs(t, page.Skipped[0], &oe)
			if strip {
				assert.Contains(t, oe.Error(), fmt.Sprintf("item %d", chunkItems+1), "its place in the page")
			}
			assert.Contains(t, oe.Error(), "bytes")
			assert.NotContains(t, oe.Error(), "registry.example", "no contents in the error")
		})
	}
}

func TestCompactListWatcher_ListsDecodedObjectsWhereAChunkedPageIsJSON(t *testing.T) {
	pods := []*corev1.Pod{managedPod("a", "web-1", "7"), managedPod("b", "web-2", "9")}
	cfg := startWireServer(t, &wireServer{jsonOnly: true, pods: pods})
	lw := newPodsForConfig(t, cfg, Options{})
	_, err := lw.listEncodedChunks(context.Background(), source.ListOptions{}, func([][]byte) { t.Error("a chunk of a JSON page") })
	require.ErrorIs(t, err, ErrNotEncoded)

	// Not known to be JSON until the first list.
	lw = newPodsForConfig(t, cfg, Options{})
	clw := CompactListWatcher(lw, func() *corev1.Pod { return new(corev1.Pod) }, nil)
	require.NotNil(t, clw.(*compactLW[*corev1.Pod]).chunked)
	page, err := clw.List(context.Background(), source.ListOptions{})
	require.NoError(t, err)
	require.Len(t, page.Items, 2)
	for i, c := range page.Items {
		got, err := c.Object()
		require.NoError(t, err)
		assert.Equal(t, typeless(pods[i]), got)
	}
}
