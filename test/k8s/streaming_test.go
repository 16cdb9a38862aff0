package k8s

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/adapters/k8s"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/features"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
)

// counting wraps a ListWatcher and records how it was used.
type counting[T any] struct {
	mirror.ListWatcher[T]

	mu      sync.Mutex
	lists   int
	streams []error // what each Watch that asked for a streaming list returned
}

func (c *counting[T]) List(ctx context.Context, opts mirror.ListOptions) (mirror.ListResult[T], error) {
	c.mu.Lock()
	c.lists++
	c.mu.Unlock()
	return c.ListWatcher.List(ctx, opts)
}

func (c *counting[T]) Watch(ctx context.Context, opts mirror.WatchOptions) (mirror.Watcher[T], error) {
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
	listed := &counting[T]{ListWatcher: k.lw(c.client, s.options())}
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
