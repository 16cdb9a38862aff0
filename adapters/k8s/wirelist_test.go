package k8s

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// pagedServer serves a list of Pods a page of one at a time, the
// continue token of page i being "c<i>". hold, if set, is called before a
// continued page is answered.
type pagedServer struct {
	t    *testing.T
	pods []*corev1.Pod
	hold func(r *http.Request, token string)

	mu       sync.Mutex
	requests []string // the continue tokens asked for, "" for a first page
	arrived  chan string
}

func (s *pagedServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	token := r.URL.Query().Get("continue")
	s.mu.Lock()
	s.requests = append(s.requests, token)
	s.mu.Unlock()
	if s.arrived != nil {
		s.arrived <- token
	}
	if s.hold != nil && token != "" {
		s.hold(r, token)
	}
	i := 0
	if token != "" {
		i = int(token[1] - '0')
	}
	list := &corev1.PodList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PodList"},
		ListMeta: metav1.ListMeta{ResourceVersion: "10"}, Items: []corev1.Pod{*s.pods[i]}}
	if i+1 < len(s.pods) {
		list.Continue = "c" + string(rune('0'+i+1))
	}
	w.Header().Set("Content-Type", contentProtobuf)
	_, _ = w.Write(encodeProto(s.t, list))
}

// next returns the token of the next request to arrive. It fails the
// test if none does: a request that was to be sent ahead was not.
func (s *pagedServer) next(t *testing.T) string {
	t.Helper()
	select {
	case token := <-s.arrived:
		return token
	case <-time.After(time.Minute):
		t.Fatal("no request arrived")
		return ""
	}
}

func (s *pagedServer) asked() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.requests...)
}

func startPagedServer(t *testing.T, s *pagedServer) *ListWatcher[*corev1.Pod] {
	s.t = t
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return newPodsForConfig(t, &rest.Config{Host: srv.URL}, Options{})
}

func threePods() []*corev1.Pod {
	return []*corev1.Pod{managedPod("a", "p0", "1"), managedPod("a", "p1", "2"), managedPod("a", "p2", "3")}
}

func TestNewForConfig_ListAsksForTheNextPageBeforeItIsAskedFor(t *testing.T) {
	s := &pagedServer{pods: threePods(), arrived: make(chan string, 8)}
	lw := startPagedServer(t, s)
	ctx := context.Background()
	var got []string
	list := func(token string) string {
		res, err := lw.List(ctx, source.ListOptions{Limit: 1, Continue: token})
		require.NoError(t, err)
		for _, p := range res.Items {
			got = append(got, p.Name)
		}
		return res.Continue
	}
	c1 := list("")
	c2 := list(c1)
	require.Equal(t, "", s.next(t))
	require.Equal(t, c1, s.next(t))
	// The page after a continued one is asked for before List is
	// called for it.
	require.Equal(t, c2, s.next(t))
	assert.Empty(t, list(c2))
	assert.Equal(t, []string{"p0", "p1", "p2"}, got)
	// Each page was asked for once: the one read ahead was used.
	assert.Equal(t, []string{"", "c1", "c2"}, s.asked())
}

func TestNewForConfig_ListReadsNothingAheadOfAFirstPage(t *testing.T) {
	s := &pagedServer{pods: threePods(), arrived: make(chan string, 8)}
	lw := startPagedServer(t, s)
	res, err := lw.List(context.Background(), source.ListOptions{Limit: 1})
	require.NoError(t, err)
	require.Equal(t, "c1", res.Continue)
	lw.wire.pages.mu.Lock()
	defer lw.wire.pages.mu.Unlock()
	assert.Nil(t, lw.wire.pages.next, "a read-ahead was started after a first page")
}

// continueTwice lists the first page and the second, whose read-ahead of
// the third has then been sent.
func continueTwice(t *testing.T, ctx context.Context, lw *ListWatcher[*corev1.Pod], s *pagedServer) {
	t.Helper()
	res, err := lw.List(ctx, source.ListOptions{Limit: 1})
	require.NoError(t, err)
	_, err = lw.List(ctx, source.ListOptions{Limit: 1, Continue: res.Continue})
	require.NoError(t, err)
	require.Equal(t, "", s.next(t))
	require.Equal(t, "c1", s.next(t))
	require.Equal(t, "c2", s.next(t))
}

func TestNewForConfig_ListAsksAgainForAPageItReadAheadAndLost(t *testing.T) {
	var failed sync.Once
	s := &pagedServer{pods: threePods(), arrived: make(chan string, 8)}
	s.hold = func(_ *http.Request, token string) {
		if token == "c2" {
			failed.Do(func() { panic(http.ErrAbortHandler) }) // the read-ahead's connection breaks
		}
	}
	lw := startPagedServer(t, s)
	ctx := context.Background()
	continueTwice(t, ctx, lw, s)
	res, err := lw.List(ctx, source.ListOptions{Limit: 1, Continue: "c2"})
	require.NoError(t, err)
	require.Len(t, res.Items, 1)
	assert.Equal(t, "p2", res.Items[0].Name)
	assert.Equal(t, []string{"", "c1", "c2", "c2"}, s.asked())
}

// startHeldPagedServer starts a pagedServer of threePods that answers
// the page after c2 only once the client gives up its request, and then
// closes ended.
func startHeldPagedServer(t *testing.T) (s *pagedServer, lw *ListWatcher[*corev1.Pod], ended chan struct{}) {
	ended = make(chan struct{})
	s = &pagedServer{pods: threePods(), arrived: make(chan string, 8)}
	s.hold = func(r *http.Request, token string) {
		if token == "c2" {
			<-r.Context().Done()
			close(ended)
		}
	}
	return s, startPagedServer(t, s), ended
}

func TestNewForConfig_ListReadAheadEndsWithItsContext(t *testing.T) {
	s, lw, ended := startHeldPagedServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	continueTwice(t, ctx, lw, s)
	cancel()
	<-ended // the read-ahead's request was given up with its context
}

func TestNewForConfig_ListDropsAReadAheadPageItIsNotAskedFor(t *testing.T) {
	s := &pagedServer{pods: threePods(), arrived: make(chan string, 8)}
	lw := startPagedServer(t, s)
	ctx := context.Background()
	continueTwice(t, ctx, lw, s)
	// A new list from the start, not the continuation: the page read
	// ahead is not what it asks for.
	res, err := lw.List(ctx, source.ListOptions{Limit: 1})
	require.NoError(t, err)
	require.Len(t, res.Items, 1)
	assert.Equal(t, "p0", res.Items[0].Name)
	assert.Equal(t, "", s.next(t))
}

func TestNewForConfig_InformerListsByPages(t *testing.T) {
	lw := newPodsForConfig(t, &rest.Config{Host: "http://127.0.0.1:1"}, Options{})
	assert.False(t, lw.PrefersStreamingList())
}

func TestNewForConfig_ListDecodesAPageOfManyChunksInOrder(t *testing.T) {
	var pods []*corev1.Pod
	for i := range 2*chunkItems + 7 {
		pods = append(pods, managedPod("a", fmt.Sprintf("p%04d", i), "1"))
	}
	s := &wireServer{pods: pods}
	lw := newPodsForConfig(t, startWireServer(t, s), Options{})
	res, err := lw.List(context.Background(), source.ListOptions{})
	require.NoError(t, err)
	require.Len(t, res.Items, len(pods))
	for i, p := range res.Items {
		require.Equal(t, typeless(pods[i]), p)
	}
}

func TestNewForConfig_ListFailsOnATruncatedPage(t *testing.T) {
	pods := []*corev1.Pod{managedPod("a", "p0", "1"), managedPod("a", "p1", "2")}
	list := &corev1.PodList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PodList"}, ListMeta: metav1.ListMeta{ResourceVersion: "10"},
		Items: []corev1.Pod{*pods[0], *pods[1]}}
	body := encodeProto(t, list)
	lw := newPodsForConfig(t, serveProto(t, body[:len(body)-100]), Options{})
	_, err := lw.List(context.Background(), source.ListOptions{})
	require.ErrorIs(t, err, errProto)
	assert.NotContains(t, err.Error(), "p1")
}

func TestNewForConfig_ListCancelsAReadAheadPageItIsNotAskedFor(t *testing.T) {
	for _, tc := range []struct {
		name string
		next func(ctx context.Context, lw *ListWatcher[*corev1.Pod]) error
	}{
		{"a new list from the start", func(ctx context.Context, lw *ListWatcher[*corev1.Pod]) error {
			_, err := lw.List(ctx, source.ListOptions{Limit: 1})
			return err
		}},
		{"the newest version", func(ctx context.Context, lw *ListWatcher[*corev1.Pod]) error {
			_, err := lw.listVersion(ctx)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, lw, ended := startHeldPagedServer(t)
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel) // before the server's Close, which waits for the held request
			continueTwice(t, ctx, lw, s)
			require.NoError(t, tc.next(ctx, lw))
			select {
			case <-ended: // the dropped read-ahead's request was given up
			case <-time.After(time.Minute):
				t.Fatal("the read-ahead nobody asked for is still being read")
			}
		})
	}
}

func TestNewForConfig_ListFailsOnAPageCutBeforeItsList(t *testing.T) {
	// The page's runtime.Unknown up to its list message (field 2): the
	// prefix and the TypeMeta, and then no list.
	list := &corev1.PodList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PodList"}, ListMeta: metav1.ListMeta{ResourceVersion: "10"},
		Items: []corev1.Pod{*managedPod("a", "p0", "1")}}
	raw := encodeProto(t, list)
	cut := -1
	require.NoError(t, eachField(raw[len(protoMagic):], func(f protoField) error {
		if f.num == 2 && cut < 0 {
			cut = len(protoMagic) + f.start
		}
		return nil
	}))
	require.Positive(t, cut)
	lists := []struct {
		name string
		list func(lw *ListWatcher[*corev1.Pod]) (int, string, error)
	}{
		{"List", func(lw *ListWatcher[*corev1.Pod]) (int, string, error) {
			res, err := lw.List(context.Background(), source.ListOptions{})
			return len(res.Items), res.ResourceVersion, err
		}},
		{"ListEncoded", func(lw *ListWatcher[*corev1.Pod]) (int, string, error) {
			res, err := lw.ListEncoded(context.Background(), source.ListOptions{})
			return len(res.Items), res.ResourceVersion, err
		}},
		{"listEncodedChunks", func(lw *ListWatcher[*corev1.Pod]) (int, string, error) {
			n := 0
			res, err := lw.listEncodedChunks(context.Background(), source.ListOptions{}, func(items [][]byte) { n += len(items) })
			return n, res.ResourceVersion, err
		}},
	}
	for _, tc := range []struct {
		name string
		// broken: the connection breaks (the body is shorter than its
		// Content-Length); else the body ends there.
		broken bool
	}{
		{"connection broken", true},
		{"body ends", false},
	} {
		for _, l := range lists {
			t.Run(tc.name+"/"+l.name, func(t *testing.T) {
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
					w.Header().Set("Content-Type", contentProtobuf)
					if tc.broken {
						w.Header().Set("Content-Length", fmt.Sprint(len(raw)))
					}
					_, _ = w.Write(raw[:cut])
				}))
				t.Cleanup(srv.Close)
				lw := newPodsForConfig(t, &rest.Config{Host: srv.URL}, Options{})
				n, rv, err := l.list(lw)
				require.Error(t, err, "an empty list at version %q from a page without its list", rv)
				assert.Zero(t, n)
				if !tc.broken {
					assert.ErrorIs(t, err, errProto)
				}
			})
		}
	}
}
