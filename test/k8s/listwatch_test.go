package k8s

import (
	"context"
	"io"
	"strconv"
	"testing"
	"time"

	"github.com/listwatch/mirror/adapters/k8s"
	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestList_PagesAreOneSnapshotAtTheFirstPagesVersion(t *testing.T) {
	bothKinds(t,
		func(t *testing.T) { testPagedList(t, configMaps) },
		func(t *testing.T) { testPagedList(t, pods) })
}

func testPagedList[T k8s.Object, L runtime.Object](t *testing.T, k kind[T, L]) {
	c := sharedCluster(t)
	s := c.scope(t)
	k.populate(t, c.client, s, 7)
	want := k.serverState(t, c.client, s.selector)
	lw := k.lw(c.client, s.options())
	ctx := context.Background()

	got := make(map[k8s.Key]string)
	opts := source.ListOptions{Limit: 3}
	var rv string
	for page := 1; ; page++ {
		res, err := lw.List(ctx, opts)
		require.NoError(t, err, "page %d", page)
		assert.LessOrEqual(t, len(res.Items), 3, "page %d", page)
		assert.Empty(t, res.Skipped)
		if page == 1 {
			rv = res.ResourceVersion
			// Written between pages: not in this list.
			k.create(t, c.client, s.ns, "late", s.labels)
		}
		assert.Equal(t, rv, res.ResourceVersion, "page %d is at the first page's version", page)
		for _, o := range res.Items {
			got[key(o)] = o.GetResourceVersion()
		}
		if res.Continue == "" {
			require.Greater(t, page, 1, "the list came in pages")
			break
		}
		opts.Continue = res.Continue
	}
	assert.Equal(t, want, got)
}

func TestList_VersionTheServerHasNotReachedIsTooLarge(t *testing.T) {
	// ConfigMaps only: the watch cache answers the same error for Pods,
	// but only after waiting three seconds for the version, and it asks
	// the client to retry after a second, which client-go does ten times
	// before the error reaches the adapter.
	t.Parallel()
	c := sharedCluster(t)
	future := strconv.FormatInt(c.currentRevision(t)+1_000_000, 10)
	_, err := configMaps.lw(c.client, k8s.Options{}).List(context.Background(), source.ListOptions{ResourceVersion: future, Limit: 10})
	require.ErrorIs(t, err, source.ErrTooLargeResourceVersion)
}

func TestWatch_FromNowReportsOnlyLaterChanges(t *testing.T) {
	bothKinds(t,
		func(t *testing.T) { testWatchFromNow(t, configMaps) },
		func(t *testing.T) { testWatchFromNow(t, pods) })
}

func testWatchFromNow[T k8s.Object, L runtime.Object](t *testing.T, k kind[T, L]) {
	c := sharedCluster(t)
	s := c.scope(t)
	k.create(t, c.client, s.ns, "before", s.labels)
	ctx, cancel := context.WithTimeout(context.Background(), convergeTimeout)
	defer cancel()
	w, err := k.lw(c.client, s.options()).Watch(ctx, source.WatchOptions{})
	require.NoError(t, err)
	defer w.Stop()
	after := k.create(t, c.client, s.ns, "after", s.labels)

	ev, err := w.Next(ctx)
	require.NoError(t, err)
	assert.Equal(t, source.Added, ev.Type)
	assert.Equal(t, "after", ev.Object.GetName(), "the object created before the watch is not reported")
	assert.Equal(t, after.GetResourceVersion(), ev.ResourceVersion)
}

func TestWatch_StreamingListSendsTheStateThenTheEndBookmarkThenChanges(t *testing.T) {
	bothKinds(t,
		func(t *testing.T) { testStreamingWatch(t, configMaps) },
		func(t *testing.T) { testStreamingWatch(t, pods) })
}

func testStreamingWatch[T k8s.Object, L runtime.Object](t *testing.T, k kind[T, L]) {
	c := sharedCluster(t)
	s := c.scope(t)
	k.populate(t, c.client, s, 3)
	want := k.serverState(t, c.client, s.selector)
	ctx, cancel := context.WithTimeout(context.Background(), convergeTimeout)
	defer cancel()
	w, err := k.lw(c.client, s.options()).Watch(ctx, source.WatchOptions{SendInitialEvents: true})
	require.NoError(t, err)
	defer w.Stop()

	got := make(map[k8s.Key]string)
	for {
		ev, err := w.Next(ctx)
		require.NoError(t, err)
		if ev.Type == source.Bookmark && ev.InitialEventsEnd {
			assert.NotEmpty(t, ev.ResourceVersion)
			break
		}
		require.Equal(t, source.Added, ev.Type, "the initial state comes as Added events")
		got[key(ev.Object)] = ev.ResourceVersion
	}
	assert.Equal(t, want, got)

	k.annotate(t, c.client, k8s.Key{Namespace: s.ns, Name: "o1"}, "1")
	ev, err := w.Next(ctx)
	require.NoError(t, err)
	assert.Equal(t, source.Updated, ev.Type)
	assert.Equal(t, "o1", ev.Object.GetName())
}

func TestWatch_TimeoutEndsTheStreamWithEOF(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), convergeTimeout)
	defer cancel()
	w, err := configMaps.lw(c.client, k8s.Options{LabelSelector: "mirror-test=nothing"}).Watch(ctx, source.WatchOptions{Timeout: time.Second})
	require.NoError(t, err)
	defer w.Stop()
	_, err = w.Next(ctx)
	require.ErrorIs(t, err, io.EOF)
}

func TestWatch_StopEndsANextInProgressWithEOF(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t)
	w, err := pods.lw(c.client, k8s.Options{LabelSelector: "mirror-test=nothing"}).Watch(context.Background(), source.WatchOptions{})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := w.Next(context.Background())
		done <- err
	}()
	w.Stop()
	w.Stop()
	select {
	case err := <-done:
		require.ErrorIs(t, err, io.EOF)
	case <-time.After(convergeTimeout):
		t.Fatalf("Next has not returned %v after Stop", convergeTimeout)
	}
}
