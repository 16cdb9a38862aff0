package k8s

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// wireServer serves lists and watches of Pods as a kube-apiserver
// encodes them, in protobuf if asked for and allowed, JSON otherwise. It
// is no apiserver (test/k8s runs NewForConfig against one): it checks
// the wire format the adapter decodes, and what the adapter asks for.
type wireServer struct {
	t *testing.T
	// jsonOnly makes it answer in JSON whatever it is asked for, as a
	// server does for a custom resource.
	jsonOnly bool
	pods     []*corev1.Pod
	// events are a watch's; a raw event is sent as it is.
	events []watchFrame

	mu      sync.Mutex
	accepts []string
	queries []string
}

// watchFrame is one event of a watch: an object's, or raw bytes.
type watchFrame struct {
	typ watch.EventType
	obj runtime.Object
	raw []byte
}

func (s *wireServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.accepts = append(s.accepts, r.Header.Get("Accept"))
	s.queries = append(s.queries, r.URL.RawQuery)
	s.mu.Unlock()
	proto := !s.jsonOnly && strings.Contains(r.Header.Get("Accept"), contentProtobuf)
	if r.URL.Query().Get("watch") == "true" {
		s.serveWatch(w, proto)
		return
	}
	list := &corev1.PodList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PodList"}, ListMeta: metav1.ListMeta{ResourceVersion: "10"}}
	for _, p := range s.pods {
		list.Items = append(list.Items, *p)
	}
	if proto {
		w.Header().Set("Content-Type", contentProtobuf)
		_, _ = w.Write(encodeProto(s.t, list))
		return
	}
	w.Header().Set("Content-Type", contentJSON)
	require.NoError(s.t, json.NewEncoder(w).Encode(list))
}

func (s *wireServer) serveWatch(w http.ResponseWriter, proto bool) {
	if proto {
		w.Header().Set("Content-Type", contentProtobuf+";stream=watch")
	} else {
		w.Header().Set("Content-Type", contentJSON)
	}
	for _, f := range s.events {
		if proto {
			raw := f.raw
			if raw == nil {
				ev := metav1.WatchEvent{Type: string(f.typ), Object: runtime.RawExtension{Raw: encodeProto(s.t, f.obj)}}
				var err error
				raw, err = ev.Marshal()
				require.NoError(s.t, err)
			}
			var l [4]byte
			binary.BigEndian.PutUint32(l[:], uint32(len(raw)))
			_, _ = w.Write(l[:])
			_, _ = w.Write(raw)
			continue
		}
		if f.raw != nil {
			_, _ = w.Write(f.raw)
			continue
		}
		obj, err := json.Marshal(f.obj)
		require.NoError(s.t, err)
		require.NoError(s.t, json.NewEncoder(w).Encode(metav1.WatchEvent{Type: string(f.typ), Object: runtime.RawExtension{Raw: obj}}))
	}
}

// encodeProto encodes obj as the server does: "k8s\x00" and a
// runtime.Unknown.
func encodeProto(t *testing.T, obj runtime.Object) []byte {
	var b bytes.Buffer
	require.NoError(t, protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Encode(withKind(obj), &b))
	return b.Bytes()
}

// withKind sets obj's apiVersion and kind, which the serializer needs.
func withKind(obj runtime.Object) runtime.Object {
	obj = obj.DeepCopyObject()
	gvks, _, err := scheme.Scheme.ObjectKinds(obj)
	if err == nil {
		obj.GetObjectKind().SetGroupVersionKind(gvks[0])
	}
	return obj
}

// managedPod is a Pod with managedFields.
func managedPod(ns, name, rv string) *corev1.Pod {
	p := pod(ns, name, rv)
	p.UID = types.UID("uid-" + name)
	p.Labels = map[string]string{"app": name}
	p.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate,
		APIVersion: "v1", FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(`{"f:status":{}}`)}}
	p.Spec.Containers = []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}
	p.Status.Phase = corev1.PodRunning
	return p
}

func startWireServer(t *testing.T, s *wireServer) *rest.Config {
	s.t = t
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return &rest.Config{Host: srv.URL}
}

func newPodsForConfig(t *testing.T, cfg *rest.Config, opts Options) *ListWatcher[*corev1.Pod] {
	lw, err := NewForConfig[*corev1.Pod](cfg, corev1.SchemeGroupVersion.WithResource("pods"), "", opts)
	require.NoError(t, err)
	return lw
}

// stripped returns p without its managedFields, as the adapter holds it
// when it strips them.
func stripped(p *corev1.Pod) *corev1.Pod {
	p = p.DeepCopy()
	p.ManagedFields = nil
	return p
}

// typeless returns p without apiVersion and kind, as typed clients hold
// objects.
func typeless(p *corev1.Pod) *corev1.Pod {
	p = p.DeepCopy()
	p.TypeMeta = metav1.TypeMeta{}
	return p
}

func TestNewForConfig_ListDecodesProtobufOrJSON(t *testing.T) {
	pods := []*corev1.Pod{managedPod("a", "web-1", "7"), managedPod("b", "web-2", "9")}
	for _, tc := range []struct {
		name        string
		jsonOnly    bool
		contentType string
		strip       bool
		wantAccept  string
	}{
		{"protobuf by default", false, "", false, contentProtobuf + ", " + contentJSON},
		{"JSON from a server that serves no protobuf", true, "", false, contentProtobuf + ", " + contentJSON},
		{"JSON when the config asks for it", false, contentJSON, false, contentJSON},
		{"protobuf, managedFields stripped", false, "", true, contentProtobuf + ", " + contentJSON},
		{"JSON, managedFields stripped", true, "", true, contentProtobuf + ", " + contentJSON},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &wireServer{jsonOnly: tc.jsonOnly, pods: pods}
			cfg := startWireServer(t, s)
			cfg.ContentType = tc.contentType
			lw := newPodsForConfig(t, cfg, Options{StripManagedFields: tc.strip, LabelSelector: "app"})
			res, err := lw.List(context.Background(), source.ListOptions{Limit: 50})
			require.NoError(t, err)
			assert.Equal(t, "10", res.ResourceVersion)
			assert.Empty(t, res.Skipped)
			want := []*corev1.Pod{typeless(pods[0]), typeless(pods[1])}
			if tc.strip {
				want = []*corev1.Pod{stripped(want[0]), stripped(want[1])}
			}
			assert.Equal(t, want, res.Items)
			require.Len(t, s.accepts, 1)
			assert.Equal(t, tc.wantAccept, s.accepts[0])
			assert.Contains(t, s.queries[0], "labelSelector=app")
			assert.Contains(t, s.queries[0], "limit=50")
		})
	}
}

// serveSpoiledPage serves list in protobuf, its item i (from 0) spoiled:
// the first tag of its message overwritten with an invalid wire type.
func serveSpoiledPage(t *testing.T, list *corev1.PodList, i int) *rest.Config {
	t.Helper()
	raw := encodeProto(t, list)
	msg, _, err := unwrapObject(raw)
	require.NoError(t, err)
	n := 0
	require.NoError(t, eachField(msg, func(f protoField) error {
		if f.num == 2 {
			if n == i {
				f.data[0] = 0x0f // field 1, wire type 7
			}
			n++
		}
		return nil
	}))
	return serveProto(t, raw)
}

// serveProto serves raw, protobuf, to every request.
func serveProto(t *testing.T, raw []byte) *rest.Config {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", contentProtobuf)
		_, _ = w.Write(raw)
	}))
	t.Cleanup(srv.Close)
	return &rest.Config{Host: srv.URL}
}

// touchyPod is a Pod whose own Unmarshal panics on a Pod named web-2.
type touchyPod struct{ corev1.Pod }

func (p *touchyPod) Unmarshal(b []byte) error {
	if bytes.Contains(b, []byte("web-2")) {
		panic("touchy")
	}
	return p.Pod.Unmarshal(b)
}

func TestNewForConfig_ADecoderThatPanicsFailsItsObjectOnly(t *testing.T) {
	list := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "10"}}
	for _, name := range []string{"web-1", "web-2", "web-3"} {
		list.Items = append(list.Items, *managedPod("a", name, "7"))
	}
	lw, err := NewForConfig[*touchyPod](serveProto(t, encodeProto(t, list)), corev1.SchemeGroupVersion.WithResource("pods"), "", Options{})
	require.NoError(t, err)
	res, err := lw.List(context.Background(), source.ListOptions{})
	require.NoError(t, err)
	require.Len(t, res.Items, 2)
	assert.Equal(t, []string{"web-1", "web-3"}, []string{res.Items[0].Name, res.Items[1].Name})
	require.Len(t, res.Skipped, 1)
	var pe *mirror.PanicError
	require.ErrorAs(t, res.Skipped[0], &pe)
	assert.Equal(t, "touchy", pe.Value)
	assert.Contains(t, res.Skipped[0].Error(), "item 1")
}

func TestNewForConfig_ListReportsUndecodableItems(t *testing.T) {
	// A list whose second item is not a Pod's message: the first and
	// third are kept, the second reported.
	good := managedPod("a", "web-1", "7")
	list := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "10"}, Items: []corev1.Pod{*good, *good, *good}}
	list.Items[2].Name = "web-3"
	cfg := serveSpoiledPage(t, list, 1)
	lw := newPodsForConfig(t, cfg, Options{})
	res, err := lw.List(context.Background(), source.ListOptions{})
	require.NoError(t, err)
	require.Len(t, res.Items, 2)
	assert.Equal(t, []string{"web-1", "web-3"}, []string{res.Items[0].Name, res.Items[1].Name})
	require.Len(t, res.Skipped, 1)
	var oe *mirror.ObjectError
	require.ErrorAs(t, res.Skipped[0], &oe)
	assert.Equal(t, "10", oe.ResourceVersion)
	assert.Contains(t, oe.Error(), "item 1")
}

func TestNewForConfig_ListNamesAnUndecodableItemByItsPlaceInThePage(t *testing.T) {
	// The page is decoded a chunk at a time: an item past the first
	// chunk is still named by its place in the page.
	good := managedPod("a", "web", "7")
	for _, i := range []int{0, chunkItems - 1, chunkItems, chunkItems + 1} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			list := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "10"}}
			for range chunkItems + 2 {
				list.Items = append(list.Items, *good)
			}
			lw := newPodsForConfig(t, serveSpoiledPage(t, list, i), Options{})
			res, err := lw.List(context.Background(), source.ListOptions{})
			require.NoError(t, err)
			assert.Len(t, res.Items, chunkItems+1)
			require.Len(t, res.Skipped, 1)
			assert.Contains(t, res.Skipped[0].Error(), fmt.Sprintf("item %d of", i))
		})
	}
}

func TestNewForConfig_ListClassifiesServerErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", contentJSON)
		w.WriteHeader(http.StatusForbidden)
		_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
			Status: metav1.StatusFailure, Code: 403, Reason: metav1.StatusReasonForbidden, Message: "no"})
	}))
	t.Cleanup(srv.Close)
	lw := newPodsForConfig(t, &rest.Config{Host: srv.URL}, Options{})
	_, err := lw.List(context.Background(), source.ListOptions{})
	require.ErrorIs(t, err, mirror.ErrPermanent)
	assert.True(t, apierrors.IsForbidden(err), "%v", err)
}

// drain reads w's events until it ends, and returns them and the end.
func drain(t *testing.T, w source.Watcher[*corev1.Pod]) ([]source.Event[*corev1.Pod], error) {
	t.Helper()
	var evs []source.Event[*corev1.Pod]
	for {
		ev, err := w.Next(context.Background())
		if err != nil {
			return evs, err
		}
		evs = append(evs, ev)
	}
}

// mixedEvents returns n events of managed Pods, added, modified and
// deleted in turn, then the bookmark that ends a streaming list's
// initial events.
func mixedEvents(n int) []watchFrame {
	var events []watchFrame
	for i := range n {
		typ := []watch.EventType{watch.Added, watch.Modified, watch.Deleted}[i%3]
		events = append(events, watchFrame{typ: typ, obj: managedPod("ns", fmt.Sprintf("p-%d", i), fmt.Sprint(100+i))})
	}
	bookmark := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "999",
		Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}
	return append(events, watchFrame{typ: watch.Bookmark, obj: bookmark})
}

func TestNewForConfig_WatchDecodesEventsInOrder(t *testing.T) {
	// More events than the batches of every decoding goroutine hold, so
	// that several batches are decoded at once.
	const n = 4*maxBatch*4 + 7
	for _, tc := range []struct {
		name     string
		jsonOnly bool
		strip    bool
	}{
		{"protobuf", false, false},
		{"JSON", true, false},
		{"protobuf, managedFields stripped", false, true},
		{"JSON, managedFields stripped", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &wireServer{jsonOnly: tc.jsonOnly, events: mixedEvents(n)}
			lw := newPodsForConfig(t, startWireServer(t, s), Options{StripManagedFields: tc.strip})
			w, err := lw.Watch(context.Background(), source.WatchOptions{ResourceVersion: "5", SendInitialEvents: true})
			require.NoError(t, err)
			defer w.Stop()
			evs, err := drain(t, w)
			require.ErrorIs(t, err, io.EOF)
			require.Len(t, evs, n+1)
			for i, ev := range evs[:n] {
				want := typeless(s.events[i].obj.(*corev1.Pod))
				if tc.strip {
					want = stripped(want)
				}
				require.Equal(t, want, ev.Object, "event %d", i)
				require.Equal(t, []source.EventType{source.Added, source.Updated, source.Deleted}[i%3], ev.Type, "event %d", i)
				require.Equal(t, fmt.Sprint(100+i), ev.ResourceVersion)
			}
			assert.Equal(t, source.Event[*corev1.Pod]{Type: source.Bookmark, ResourceVersion: "999", InitialEventsEnd: true}, evs[n])
			assert.Contains(t, s.queries[0], "sendInitialEvents=true")
			assert.Contains(t, s.queries[0], "watch=true")
		})
	}
}

func TestNewForConfig_WatchReportsAnUndecodableEventAndGoesOn(t *testing.T) {
	for _, tc := range []struct {
		name     string
		jsonOnly bool
		raw      []byte
	}{
		{"protobuf: not a watch event", false, []byte{0x0f, 0x01}},
		{"protobuf: an object without the prefix", false, mustMarshal(t, &metav1.WatchEvent{Type: "ADDED", Object: runtime.RawExtension{Raw: []byte("nope")}})},
		{"JSON: not an object", true, []byte(`{"type":"ADDED","object":[1,2]}` + "\n")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &wireServer{jsonOnly: tc.jsonOnly, events: []watchFrame{
				{typ: watch.Added, obj: managedPod("ns", "before", "11")},
				{raw: tc.raw},
				{typ: watch.Added, obj: managedPod("ns", "after", "12")},
			}}
			lw := newPodsForConfig(t, startWireServer(t, s), Options{})
			w, err := lw.Watch(context.Background(), source.WatchOptions{ResourceVersion: "10"})
			require.NoError(t, err)
			defer w.Stop()
			evs, err := drain(t, w)
			require.ErrorIs(t, err, io.EOF)
			require.Len(t, evs, 3)
			assert.Equal(t, "before", evs[0].Object.Name)
			assert.Equal(t, source.Error, evs[1].Type)
			var oe *mirror.ObjectError
			require.ErrorAs(t, evs[1].Err, &oe)
			assert.Equal(t, "after", evs[2].Object.Name)
		})
	}
}

func mustMarshal(t *testing.T, ev *metav1.WatchEvent) []byte {
	b, err := ev.Marshal()
	require.NoError(t, err)
	return b
}

func TestNewForConfig_WatchErrorEventEndsTheStreamClassified(t *testing.T) {
	for _, jsonOnly := range []bool{false, true} {
		t.Run(fmt.Sprintf("json=%v", jsonOnly), func(t *testing.T) {
			gone := &metav1.Status{Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonExpired, Message: "too old"}
			s := &wireServer{jsonOnly: jsonOnly, events: []watchFrame{{typ: watch.Error, obj: gone}}}
			lw := newPodsForConfig(t, startWireServer(t, s), Options{})
			w, err := lw.Watch(context.Background(), source.WatchOptions{ResourceVersion: "10"})
			require.NoError(t, err)
			defer w.Stop()
			_, err = drain(t, w)
			require.ErrorIs(t, err, source.ErrExpired)
		})
	}
}

func TestNewForConfig_WatchEndsWithAnOversizedFrame(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", contentProtobuf+";stream=watch")
		_, _ = w.Write([]byte{0x7f, 0xff, 0xff, 0xff})
	}))
	t.Cleanup(srv.Close)
	lw := newPodsForConfig(t, &rest.Config{Host: srv.URL}, Options{})
	w, err := lw.Watch(context.Background(), source.WatchOptions{ResourceVersion: "10"})
	require.NoError(t, err)
	defer w.Stop()
	_, err = drain(t, w)
	var se *apierrors.StatusError
	require.ErrorAs(t, err, &se)
	assert.EqualValues(t, 500, se.ErrStatus.Code)
	assert.False(t, errors.Is(err, io.EOF))
}

func TestNewForConfig_WatchEndsWithADecodingErrorOnJSONItCannotFrame(t *testing.T) {
	// JSON that is not JSON loses the stream's framing: the stream ends,
	// as client-go's does, with a decoding error, not as a clean end.
	s := &wireServer{jsonOnly: true, events: []watchFrame{
		{typ: watch.Added, obj: managedPod("ns", "before", "11")},
		{raw: []byte(`{"type":"ADDED","object":{"secret"]}` + "\n")},
	}}
	lw := newPodsForConfig(t, startWireServer(t, s), Options{})
	w, err := lw.Watch(context.Background(), source.WatchOptions{ResourceVersion: "10"})
	require.NoError(t, err)
	defer w.Stop()
	evs, err := drain(t, w)
	require.Len(t, evs, 1)
	assert.Equal(t, "before", evs[0].Object.Name)
	var se *apierrors.StatusError
	require.ErrorAs(t, err, &se)
	assert.EqualValues(t, 500, se.ErrStatus.Code)
	assert.False(t, errors.Is(err, io.EOF))
	assert.NotContains(t, err.Error(), "secret")
}

func TestNewForConfig_StopEndsTheReadingGoroutines(t *testing.T) {
	// A watch that never ends: Stop must end it, and Next then returns
	// io.EOF. (goleak-free: the race detector and the package's tests
	// would catch a goroutine blocked for good as a hang.)
	block := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", contentProtobuf+";stream=watch")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-block:
		}
	}))
	t.Cleanup(func() { close(block); srv.Close() })
	lw := newPodsForConfig(t, &rest.Config{Host: srv.URL}, Options{})
	w, err := lw.Watch(context.Background(), source.WatchOptions{ResourceVersion: "10"})
	require.NoError(t, err)
	w.Stop()
	_, err = w.Next(context.Background())
	require.ErrorIs(t, err, io.EOF)
}

func TestNewForConfig_RefusesWhatItCannotRequest(t *testing.T) {
	_, err := NewForConfig[*corev1.Pod](&rest.Config{Host: "http://127.0.0.1:1"}, corev1.SchemeGroupVersion.WithResource(""), "", Options{})
	require.Error(t, err)
}

func TestStripManagedFields_OptionStripsWhatATypedClientDecoded(t *testing.T) {
	for _, strip := range []bool{false, true} {
		t.Run(fmt.Sprintf("strip=%v", strip), func(t *testing.T) {
			src := newFakeSource()
			f := &fakePods{
				lists:   []fakeList{{list: podList("10", "", managedPod("ns", "listed", "9"))}},
				watches: []fakeWatch{{src: src}},
			}
			lw := f.lw(Options{StripManagedFields: strip})
			res, err := lw.List(context.Background(), source.ListOptions{})
			require.NoError(t, err)
			require.Len(t, res.Items, 1)
			assert.Equal(t, strip, res.Items[0].ManagedFields == nil)
			w, err := lw.Watch(context.Background(), source.WatchOptions{ResourceVersion: "10"})
			require.NoError(t, err)
			defer w.Stop()
			src.events <- watch.Event{Type: watch.Added, Object: managedPod("ns", "watched", "11")}
			ev, err := w.Next(context.Background())
			require.NoError(t, err)
			assert.Equal(t, strip, ev.Object.ManagedFields == nil)
		})
	}
}
