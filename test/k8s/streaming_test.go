package k8s

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"sync"
	"testing"

	"github.com/listwatch/mirror/adapters/k8s"
	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/features"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
)

// counting wraps a ListWatcher and records how it was used.
type counting[T any] struct {
	source.ListWatcher[T]

	mu      sync.Mutex
	lists   int
	streams []error // what each Watch that asked for a streaming list returned
}

func (c *counting[T]) List(ctx context.Context, opts source.ListOptions) (source.ListResult[T], error) {
	c.mu.Lock()
	c.lists++
	c.mu.Unlock()
	return c.ListWatcher.List(ctx, opts)
}

func (c *counting[T]) Watch(ctx context.Context, opts source.WatchOptions) (source.Watcher[T], error) {
	w, err := c.ListWatcher.Watch(ctx, opts)
	if opts.SendInitialEvents {
		c.mu.Lock()
		c.streams = append(c.streams, err)
		c.mu.Unlock()
	}
	return w, err
}

func (c *counting[T]) counts() (lists int, streams []error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lists, append([]error(nil), c.streams...)
}

func TestStreamingList_OnAndOffGiveTheSameCache(t *testing.T) {
	bothKinds(t,
		func(t *testing.T) { testStreamingOnAndOff(t, configMaps) },
		func(t *testing.T) { testStreamingOnAndOff(t, pods) })
}

func testStreamingOnAndOff[T k8s.Object, L runtime.Object](t *testing.T, k kind[T, L]) {
	c := sharedCluster(t)
	s := c.scope(t)
	k.populate(t, c.client, s, 6)
	streamed := &counting[T]{ListWatcher: k.lw(c.client, s.options())}
	lopts := s.options()
	lopts.NoStreamingList = true
	listed := &counting[T]{ListWatcher: k.lw(c.client, lopts)}
	sinf := startInformer(t, streamed, informerOptions{streaming: true})
	linf := startInformer(t, listed, informerOptions{})
	want := k.serverState(t, c.client, s.selector)
	requireConverged(t, sinf, want)
	requireConverged(t, linf, want)

	k.annotate(t, c.client, k8s.Key{Namespace: s.ns, Name: "o0"}, "1")
	k.delete(t, c.client, k8s.Key{Namespace: s.ns, Name: "o1"})
	k.create(t, c.client, s.ns, "o6", s.labels)
	want = k.serverState(t, c.client, s.selector)
	requireConverged(t, sinf, want)
	requireConverged(t, linf, want)
	assert.Equal(t, versionsByKey(linf.All()), versionsByKey(sinf.All()))

	lists, streams := streamed.counts()
	assert.Zero(t, lists, "the streaming informer never lists")
	require.NotEmpty(t, streams)
	assert.NoError(t, streams[0], "the server streams the list")
	lists, streams = listed.counts()
	assert.Positive(t, lists)
	assert.Empty(t, streams)
	assert.Empty(t, sinf.log.all())
	assert.Empty(t, linf.log.all())
}

func TestStreamingList_FallsBackToListWhenTheServerRefusesIt(t *testing.T) {
	// Not parallel: the feature gate is the whole process's, so the
	// shared server refuses every streaming list while this test runs.
	c := sharedCluster(t)
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.WatchList, false)
	s := c.scope(t)
	pods.populate(t, c.client, s, 4)
	lw := &counting[*corev1.Pod]{ListWatcher: pods.lw(c.client, s.options())}
	inf := startInformer(t, lw, informerOptions{streaming: true})
	requireConverged(t, inf, pods.serverState(t, c.client, s.selector))
	pods.delete(t, c.client, k8s.Key{Namespace: s.ns, Name: "o0"})
	pods.create(t, c.client, s.ns, "o4", s.labels)
	requireConverged(t, inf, pods.serverState(t, c.client, s.selector))

	lists, streams := lw.counts()
	require.Len(t, streams, 1, "one refusal is enough")
	assert.True(t, errors.Is(streams[0], errors.ErrUnsupported), "refused as unsupported: %v", streams[0])
	assert.Positive(t, lists, "the informer lists instead")
	assert.Empty(t, inf.log.all())
}

// request is one request a client made, and the status it got.
type request struct {
	method, path string
	query        url.Values
	status       int
}

// isStreamingList reports whether r asked for a streaming list.
func (r request) isStreamingList() bool {
	return r.query.Get("watch") == "true" && r.query.Get("sendInitialEvents") == "true"
}

// isList reports whether r was a List.
func (r request) isList() bool { return r.method == http.MethodGet && r.query.Get("watch") != "true" }

// requestLog records the requests of a client.
type requestLog struct {
	mu   sync.Mutex
	reqs []request
}

func (l *requestLog) all() []request {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]request(nil), l.reqs...)
}

// wrap returns a RoundTripper that records each request of rt and the
// status it got.
func (l *requestLog) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		r := request{method: req.Method, path: req.URL.Path, query: req.URL.Query()}
		if err == nil {
			r.status = resp.StatusCode
		}
		l.mu.Lock()
		l.reqs = append(l.reqs, r)
		l.mu.Unlock()
		return resp, err
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// recordedClient returns a client of the cluster whose requests log
// records.
func recordedClient(t *testing.T, c *cluster, log *requestLog) kubernetes.Interface {
	t.Helper()
	config := rest.CopyConfig(c.config)
	config.Wrap(log.wrap)
	cs, err := kubernetes.NewForConfig(config)
	require.NoError(t, err)
	return cs
}

func TestStreamingList_TheAdaptersDefaultStreamsAndFallsBackToList(t *testing.T) {
	// Not parallel: the second case turns the server's WatchList off,
	// for the whole process.
	c := sharedCluster(t)
	for _, tc := range []struct {
		name      string
		watchList bool // the server's feature gate
	}{
		{"server streams", true},
		{"server refuses", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.WatchList, tc.watchList)
			s := c.scope(t)
			pods.populate(t, c.client, s, 4)
			log := &requestLog{}
			// The adapter with its default options, straight into an
			// informer whose ReflectorOptions leave StreamingList off.
			inf := startInformer(t, pods.lw(recordedClient(t, c, log), s.options()), informerOptions{})
			requireConverged(t, inf, pods.serverState(t, c.client, s.selector))
			pods.delete(t, c.client, k8s.Key{Namespace: s.ns, Name: "o0"})
			pods.create(t, c.client, s.ns, "o4", s.labels)
			requireConverged(t, inf, pods.serverState(t, c.client, s.selector))
			assert.Empty(t, inf.log.all())

			var streams, lists []request
			for _, r := range log.all() {
				switch {
				case r.isStreamingList():
					streams = append(streams, r)
				case r.isList():
					lists = append(lists, r)
				}
			}
			require.NotEmpty(t, streams, "the informer asks for a streaming list")
			assert.Equal(t, "/api/v1/pods", streams[0].path)
			if tc.watchList {
				assert.Equal(t, http.StatusOK, streams[0].status, "the server streams the list")
				assert.Empty(t, lists, "the informer never lists")
				assert.Equal(t, int64(1), inf.Stats().Reflector.Lists)
				return
			}
			require.Len(t, streams, 1, "one refusal is enough")
			assert.Equal(t, http.StatusUnprocessableEntity, streams[0].status, "the server refuses the streaming list")
			assert.NotEmpty(t, lists, "the informer lists instead")
		})
	}
}
