package mirror_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/memsource"
	"github.com/listwatch/mirror/source"
)

// prefixSource is a memsource seen through a filter, as an etcd prefix
// is: the informer lists and watches only the items of group "a", while
// writes to other groups move the revision, the current version, without
// an event. Only a bookmark (a progress request's answer) tells the
// informer that it is current. hold, while set, keeps the watch from
// delivering anything; progress counts the progress requests.
type prefixSource struct {
	*memsource.Source[item]
	hold     atomic.Pointer[chan struct{}]
	progress atomic.Int64
}

func (s *prefixSource) List(ctx context.Context, opts source.ListOptions) (source.ListResult[item], error) {
	res, err := s.Source.List(ctx, opts)
	var kept []item
	for _, it := range res.Items {
		if it.Group == "a" {
			kept = append(kept, it)
		}
	}
	res.Items = kept
	return res, err
}

func (s *prefixSource) Watch(ctx context.Context, opts source.WatchOptions) (source.Watcher[item], error) {
	w, err := s.Source.Watch(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &prefixWatcher{Watcher: w, s: s}, nil
}

func (s *prefixSource) RequestProgress(ctx context.Context) error {
	s.progress.Add(1)
	return s.Source.RequestProgress(ctx)
}

// pause holds the watch's deliveries until the returned function is called.
func (s *prefixSource) pause() (release func()) {
	ch := make(chan struct{})
	s.hold.Store(&ch)
	return func() { s.hold.Store(nil); close(ch) }
}

type prefixWatcher struct {
	source.Watcher[item]
	s *prefixSource
}

func (w *prefixWatcher) Next(ctx context.Context) (source.Event[item], error) {
	for {
		ev, err := w.Watcher.Next(ctx)
		if err == nil && ev.Type != source.Bookmark && ev.Object.Group != "a" {
			continue
		}
		// Held events are delivered once released.
		if h := w.s.hold.Load(); h != nil {
			select {
			case <-*h:
			case <-ctx.Done():
				return source.Event[item]{}, ctx.Err()
			}
		}
		return ev, err
	}
}

func newPrefixFixture(t *testing.T) (*fixture, *prefixSource) {
	var ps *prefixSource
	f := newFixtureOver(t, func(src *memsource.Source[item]) source.ListWatcher[item] {
		ps = &prefixSource{Source: src}
		return ps
	}, nil)
	return f, ps
}

func TestWaitForVersion_BookmarkAdvancesAQuietCache(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, ps := newPrefixFixture(t)
		f.start()
		f.synced()
		rev, err := ps.Put(item{Name: "x", Group: "b"})
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() { done <- f.inf.WaitForVersion(bounded(t), revString(rev)) }()
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("returned before a bookmark brought the version: %v", err)
		default:
		}
		ps.Bookmark()
		synctest.Wait()
		require.NoError(t, <-done)
		f.stop()
	})
}

func TestConsistent_SeesEveryWriteMadeBeforeIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, ps := newPrefixFixture(t)
		f.start()
		f.synced()
		for i := range 50 {
			// No synctest.Wait in between: the read must wait for
			// the write itself.
			_, err := ps.Put(item{Name: "a", Group: "a", Val: i})
			require.NoError(t, err)
			r, err := f.inf.Consistent(t.Context(), mirror.ConsistentOptions{})
			require.NoError(t, err)
			got, ok := r.GetByKey("a")
			require.True(t, ok)
			require.Equal(t, i, got.Val, "read %d saw an older write", i)
		}
		f.stop()
	})
}

func TestConsistent_AsksAQuietSourceForProgress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, ps := newPrefixFixture(t)
		f.start()
		f.synced()
		// Writes elsewhere move the current version; no event comes.
		_, err := ps.Put(item{Name: "x", Group: "b"})
		require.NoError(t, err)
		_, err = f.inf.Consistent(t.Context(), mirror.ConsistentOptions{})
		require.NoError(t, err, "a progress request brings the version")
		assert.Positive(t, ps.progress.Load())

		// Without progress requests the cache never learns it is current.
		_, err = ps.Put(item{Name: "y", Group: "b"})
		require.NoError(t, err)
		before := ps.progress.Load()
		_, err = f.inf.Consistent(t.Context(), mirror.ConsistentOptions{Timeout: time.Second, ProgressInterval: -1})
		require.ErrorIs(t, err, mirror.ErrNotCurrent)
		assert.Equal(t, before, ps.progress.Load())
		f.stop()
	})
}

func TestConsistent_BoundEndsInATypedErrorOrAReadOfTheSource(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, ps := newPrefixFixture(t)
		_, err := ps.Put(item{Name: "a", Group: "a", Val: 1})
		require.NoError(t, err)
		f.start()
		f.synced()
		listed := revString(ps.Revision())
		release := ps.pause()
		rev, err := ps.Put(item{Name: "a", Group: "a", Val: 2})
		require.NoError(t, err)

		_, err = f.inf.Consistent(t.Context(), mirror.ConsistentOptions{Timeout: time.Second})
		require.ErrorIs(t, err, mirror.ErrNotCurrent)
		var se *mirror.StaleError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, revString(rev), se.Want)
		assert.Equal(t, listed, se.Applied)
		got, _ := f.inf.GetByKey("a")
		assert.Equal(t, 1, got.Val, "the cache is indeed behind")

		r, err := f.inf.Consistent(t.Context(), mirror.ConsistentOptions{Timeout: time.Second, Fallback: true})
		require.NoError(t, err)
		got, ok := r.GetByKey("a")
		require.True(t, ok)
		assert.Equal(t, 2, got.Val, "the fallback read the source")
		byGroup, err := r.ByIndex("group", "a")
		require.NoError(t, err)
		assert.Len(t, byGroup, 1, "the fallback is indexed like the cache")

		release()
		r, err = f.inf.Consistent(t.Context(), mirror.ConsistentOptions{})
		require.NoError(t, err)
		got, _ = r.GetByKey("a")
		assert.Equal(t, 2, got.Val)
		f.stop()
	})
}

func TestConsistent_CallerContextEndIsNotTheBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, ps := newPrefixFixture(t)
		f.start()
		f.synced()
		release := ps.pause()
		_, err := ps.Put(item{Name: "a", Group: "a"})
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		_, err = f.inf.Consistent(ctx, mirror.ConsistentOptions{Timeout: time.Hour, Fallback: true})
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.NotErrorIs(t, err, mirror.ErrNotCurrent)
		release()
		f.stop()
	})
}

func TestConsistent_ConcurrentReadsShareProgressRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, ps := newPrefixFixture(t)
		f.start()
		f.synced()
		release := ps.pause()
		_, err := ps.Put(item{Name: "a", Group: "a"})
		require.NoError(t, err)
		const readers = 50
		var wg sync.WaitGroup
		for range readers {
			wg.Go(func() {
				_, err := f.inf.Consistent(t.Context(), mirror.ConsistentOptions{})
				assert.NoError(t, err)
			})
		}
		synctest.Wait()
		// Held a second: ten intervals, at most one request each (and
		// the first).
		time.Sleep(time.Second)
		assert.LessOrEqual(t, ps.progress.Load(), int64(11))
		release()
		wg.Wait()
		f.stop()
	})
}

func TestConsistent_SourceWithoutCurrentVersionIsUnsupported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixtureOver(t, func(s *memsource.Source[item]) source.ListWatcher[item] {
			return unordered{s}
		}, func(o *mirror.InformerOptions[string, item]) { o.CompareVersions = source.CompareDecimalVersions })
		f.start()
		f.synced()
		_, err := f.inf.Consistent(t.Context(), mirror.ConsistentOptions{Fallback: true})
		require.ErrorIs(t, err, errors.ErrUnsupported)
		f.stop()
	})
}
