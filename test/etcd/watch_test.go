package etcd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"testing"
	"time"

	"github.com/listwatch/mirror"
	etcdmirror "github.com/listwatch/mirror/adapters/etcd"
	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
)

// eventTimeout bounds every wait for an event, so that a broken watch fails
// the test instead of hanging it.
const eventTimeout = 20 * time.Second

func next[T any](t testing.TB, w source.Watcher[T]) source.Event[T] {
	t.Helper()
	ev, err := nextErr(w)
	require.NoError(t, err)
	return ev
}

func nextErr[T any](w source.Watcher[T]) (source.Event[T], error) {
	ctx, cancel := context.WithTimeout(context.Background(), eventTimeout)
	defer cancel()
	return w.Next(ctx)
}

func watch[T any](t testing.TB, lw source.ListWatcher[T], opts source.WatchOptions) source.Watcher[T] {
	t.Helper()
	w, err := lw.Watch(context.Background(), opts)
	require.NoError(t, err)
	t.Cleanup(w.Stop)
	return w
}

// watchRetrying starts a watch, retrying while the source is unavailable
// (as a Reflector does), for up to eventTimeout.
func watchRetrying[T any](t testing.TB, lw source.ListWatcher[T], opts source.WatchOptions) source.Watcher[T] {
	t.Helper()
	deadline := time.Now().Add(eventTimeout)
	for {
		w, err := lw.Watch(context.Background(), opts)
		if errors.Is(err, source.ErrUnavailable) && time.Now().Before(deadline) {
			continue
		}
		require.NoError(t, err)
		t.Cleanup(w.Stop)
		return w
	}
}

func rvOf(rev int64) string { return strconv.FormatInt(rev, 10) }

func currentRev(t testing.TB, c *clientv3.Client) int64 {
	t.Helper()
	resp, err := c.Get(context.Background(), "/", clientv3.WithCountOnly())
	require.NoError(t, err)
	return resp.Header.Revision
}

func TestWatch_MapsPutsAndDeletesToEvents(t *testing.T) {
	m := startEtcd(t)
	c := newClient(t, m.endpoint())
	ctx := context.Background()
	for _, prev := range []bool{false, true} {
		t.Run(fmt.Sprintf("PrevValues=%v", prev), func(t *testing.T) {
			lw := etcdmirror.New(c, "/w/", etcdmirror.Options{PrevValues: prev})
			w := watch(t, lw, source.WatchOptions{ResourceVersion: rvOf(currentRev(t, c))})

			p1, err := c.Put(ctx, "/w/a", "1")
			require.NoError(t, err)
			p2, err := c.Put(ctx, "/w/a", "2")
			require.NoError(t, err)
			_, err = c.Put(ctx, "/wx", "not under the prefix")
			require.NoError(t, err)
			d, err := c.Delete(ctx, "/w/a")
			require.NoError(t, err)

			r1, r2, rd := p1.Header.Revision, p2.Header.Revision, d.Header.Revision
			// A deletion carries the key alone, or with PrevValues the
			// last state; either way at the deletion's revision.
			deletion := source.Event[etcdmirror.KV]{Type: source.Deleted, ResourceVersion: rvOf(rd),
				Object: etcdmirror.KV{Key: "/w/a"}, KeyOnly: true}
			if prev {
				deletion.Object = etcdmirror.KV{Key: "/w/a", Value: []byte("2"), CreateRevision: r1, ModRevision: r2, Version: 2}
				deletion.KeyOnly = false
			}
			want := []source.Event[etcdmirror.KV]{
				{Type: source.Added, ResourceVersion: rvOf(r1), Object: etcdmirror.KV{
					Key: "/w/a", Value: []byte("1"), CreateRevision: r1, ModRevision: r1, Version: 1}},
				{Type: source.Updated, ResourceVersion: rvOf(r2), Object: etcdmirror.KV{
					Key: "/w/a", Value: []byte("2"), CreateRevision: r1, ModRevision: r2, Version: 2}},
				deletion,
			}
			for i, ev := range want {
				assert.Equal(t, ev, next(t, w), "event %d", i)
			}
		})
	}
}

func TestWatch_DeleteWhosePreviousValueWasCompactedIsKeyOnlyEvenWithPrevValues(t *testing.T) {
	m := startEtcd(t)
	c := newClient(t, m.endpoint())
	ctx := context.Background()
	_, err := c.Put(ctx, "/pc/k", "v")
	require.NoError(t, err)
	d, err := c.Delete(ctx, "/pc/k")
	require.NoError(t, err)
	// Compacting at the deletion keeps the deletion but not the value
	// before it, which etcd looks up only when it sends the event.
	_, err = c.Compact(ctx, d.Header.Revision, clientv3.WithCompactPhysical())
	require.NoError(t, err)

	lw := etcdmirror.New(c, "/pc/", etcdmirror.Options{PrevValues: true})
	w := watch(t, lw, source.WatchOptions{ResourceVersion: rvOf(d.Header.Revision - 1)})
	assert.Equal(t, source.Event[etcdmirror.KV]{
		Type:            source.Deleted,
		ResourceVersion: rvOf(d.Header.Revision),
		Object:          etcdmirror.KV{Key: "/pc/k"},
		KeyOnly:         true,
	}, next(t, w))
}

func TestWatch_FromCompactedRevisionIsExpired(t *testing.T) {
	m := startEtcd(t)
	c := newClient(t, m.endpoint())
	var rev int64
	for range 5 {
		rev = putN(t, c, "/x/", 1)
	}
	_, err := c.Compact(context.Background(), rev, clientv3.WithCompactPhysical())
	require.NoError(t, err)

	w := watch(t, etcdmirror.New(c, "/x/", etcdmirror.Options{}), source.WatchOptions{ResourceVersion: rvOf(rev - 3)})
	_, err = nextErr(w)
	require.ErrorIs(t, err, source.ErrExpired)
	require.ErrorContains(t, err, "compacted")
	_, again := nextErr(w)
	require.Equal(t, err, again, "the error sticks")
}

func TestWatch_PutThatFailsToDecodeIsOneKeyOnlyError(t *testing.T) {
	m := startEtcd(t)
	c := newClient(t, m.endpoint())
	ctx := context.Background()
	for _, prev := range []bool{false, true} {
		t.Run(fmt.Sprintf("PrevValues=%v", prev), func(t *testing.T) {
			prefix := fmt.Sprintf("/d%v/", prev)
			lw := etcdmirror.NewTyped(c, prefix, decodeInt, etcdmirror.Options{PrevValues: prev})
			w := watch(t, lw, source.WatchOptions{ResourceVersion: rvOf(currentRev(t, c))})

			var revs []string
			for _, kv := range [][2]string{{"a", "1"}, {"b", "bad"}, {"c", "3"}, {"a", "bad"}} {
				p, err := c.Put(ctx, prefix+kv[0], kv[1])
				require.NoError(t, err)
				revs = append(revs, rvOf(p.Header.Revision))
			}
			d, err := c.Delete(ctx, prefix+"b")
			require.NoError(t, err)

			type want struct {
				typ     source.EventType
				key     string
				value   int
				keyOnly bool
				rv      string
			}
			for i, exp := range []want{
				{source.Added, "a", 1, false, revs[0]},
				{source.Error, "b", 0, true, revs[1]},
				{source.Added, "c", 3, false, revs[2]},
				{source.Error, "a", 0, true, revs[3]},                   // the mirror evicts the stale value
				{source.Deleted, "b", 0, true, rvOf(d.Header.Revision)}, // its previous value did not decode
			} {
				ev := next(t, w)
				require.Equal(t, exp.typ, ev.Type, "event %d", i)
				assert.Equal(t, exp.rv, ev.ResourceVersion, "event %d", i)
				assert.Equal(t, prefix+exp.key, ev.Object.Key, "event %d", i)
				assert.Equal(t, exp.keyOnly, ev.KeyOnly, "event %d", i)
				if exp.typ == source.Error {
					assert.Equal(t, etcdmirror.Object[int]{Key: prefix + exp.key}, ev.Object, "event %d: the key alone", i)
					var oe *mirror.ObjectError
					require.ErrorAs(t, ev.Err, &oe)
					assert.Equal(t, prefix+exp.key, oe.Key)
					assert.Equal(t, exp.rv, oe.ResourceVersion, "the put's revision")
					assert.ErrorIs(t, oe, strconv.ErrSyntax)
					continue
				}
				assert.NoError(t, ev.Err)
				assert.Equal(t, exp.value, ev.Object.Value, "event %d", i)
			}
		})
	}
}

func TestWatch_ProgressBecomesBookmarkOnlyWhenAllowed(t *testing.T) {
	m := startEtcd(t)
	c := newClient(t, m.endpoint())
	rev := putN(t, c, "/b/", 3)
	lw := etcdmirror.New(c, "/b/", etcdmirror.Options{ProgressInterval: 100 * time.Millisecond})
	plain := watch(t, lw, source.WatchOptions{ResourceVersion: rvOf(rev)})
	marked := watch(t, lw, source.WatchOptions{ResourceVersion: rvOf(rev), AllowBookmarks: true})
	// The store is idle, so both watches start ahead of it, and are
	// answered only once they have started again at rev.
	plainNext := make(chan source.Event[etcdmirror.KV], 1)
	go func() {
		ev, err := nextErr(plain)
		assert.NoError(t, err)
		plainNext <- ev
	}()

	for range 3 {
		assert.Equal(t, source.Event[etcdmirror.KV]{Type: source.Bookmark, ResourceVersion: rvOf(rev)}, next(t, marked))
	}
	// The watch without bookmarks has been asking all along, and keeps
	// the answers to itself.
	p, err := c.Put(context.Background(), "/b/new", "v")
	require.NoError(t, err)
	ev := <-plainNext
	assert.Equal(t, source.Added, ev.Type)
	assert.Equal(t, rvOf(p.Header.Revision), ev.ResourceVersion)
}

func TestWatch_TimeoutEndsStreamWithEOF(t *testing.T) {
	m := startEtcd(t)
	c := newClient(t, m.endpoint())
	w := watch(t, etcdmirror.New(c, "/t/", etcdmirror.Options{}), source.WatchOptions{Timeout: 100 * time.Millisecond})
	_, err := nextErr(w)
	require.ErrorIs(t, err, io.EOF)
}

func TestWatch_SendInitialEventsIsUnsupported(t *testing.T) {
	m := startEtcd(t)
	c := newClient(t, m.endpoint())
	_, err := etcdmirror.New(c, "/s/", etcdmirror.Options{}).Watch(context.Background(), source.WatchOptions{SendInitialEvents: true})
	require.ErrorIs(t, err, errors.ErrUnsupported)
}

func TestWatch_StopIsIdempotentAndLeavesNoGoroutine(t *testing.T) {
	m := startEtcd(t)
	c := newClient(t, m.endpoint())
	ctx := context.Background()
	// Warm the client's connection, so that what remains afterwards is
	// only what the watches started.
	currentRev(t, c)
	before := goleak.IgnoreCurrent()

	lw := etcdmirror.New(c, "/g/", etcdmirror.Options{ProgressInterval: 100 * time.Millisecond})
	for range 3 {
		w, err := lw.Watch(ctx, source.WatchOptions{AllowBookmarks: true, ResourceVersion: rvOf(currentRev(t, c))})
		require.NoError(t, err)
		_, err = c.Put(ctx, "/g/k", "v")
		require.NoError(t, err)
		assert.Equal(t, source.Added, next(t, w).Type)

		// Stop while Next waits, then again, and again from another
		// goroutine.
		done := make(chan error, 1)
		go func() {
			_, err := w.Next(ctx)
			done <- err
		}()
		w.Stop()
		w.Stop()
		go w.Stop()
		require.ErrorIs(t, <-done, io.EOF)
		_, err = w.Next(ctx)
		require.ErrorIs(t, err, io.EOF)
		_, err = c.Delete(ctx, "/g/k")
		require.NoError(t, err)
	}
	goleak.VerifyNone(t, before)
}

func TestWatch_ContextEndsStream(t *testing.T) {
	m := startEtcd(t)
	c := newClient(t, m.endpoint())
	lw := etcdmirror.New(c, "/c/", etcdmirror.Options{})

	t.Run("Next", func(t *testing.T) {
		w := watch(t, lw, source.WatchOptions{})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := w.Next(ctx)
		require.ErrorIs(t, err, context.Canceled)
		_, err = nextErr(w)
		require.ErrorIs(t, err, context.Canceled, "the stream has ended")
	})
	t.Run("Watch", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		w, err := lw.Watch(ctx, source.WatchOptions{})
		require.NoError(t, err)
		defer w.Stop()
		cancel()
		_, err = nextErr(w)
		require.ErrorIs(t, err, context.Canceled)
	})
}

func TestWatch_CutConnectionIsUnavailableThenResumesWithoutLoss(t *testing.T) {
	m := startEtcd(t)
	direct := newClient(t, m.endpoint())
	p := newProxy(t, m.cliURL.Host)
	c := newClient(t, p.endpoint())
	ctx := context.Background()
	lw := etcdmirror.New(c, "/cut/", etcdmirror.Options{
		ProgressInterval: 100 * time.Millisecond,
		RequestTimeout:   time.Second,
	})
	w := watch(t, lw, source.WatchOptions{ResourceVersion: rvOf(currentRev(t, direct))})
	put, err := direct.Put(ctx, "/cut/a", "1")
	require.NoError(t, err)
	last := next(t, w)
	require.Equal(t, rvOf(put.Header.Revision), last.ResourceVersion)

	p.Cut()
	_, err = direct.Put(ctx, "/cut/b", "2")
	require.NoError(t, err)
	_, err = nextErr(w)
	require.ErrorIs(t, err, source.ErrUnavailable, "a cut watch ends instead of going silent")

	_, err = lw.Watch(ctx, source.WatchOptions{ResourceVersion: last.ResourceVersion})
	require.ErrorIs(t, err, source.ErrUnavailable, "no new watch while cut")

	p.Resume()
	w = watchRetrying(t, lw, source.WatchOptions{ResourceVersion: last.ResourceVersion})
	ev := next(t, w)
	assert.Equal(t, "/cut/b", ev.Object.Key, "the put made while cut arrives")
}
