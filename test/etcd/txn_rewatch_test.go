package etcd

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/listwatch/mirror"
	etcdmirror "github.com/listwatch/mirror/adapters/etcd"
	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// cutInsideChanges is a ListWatcher whose watches end, with
// ErrUnavailable, between two events of one transaction, as a lost
// connection ends them: the first after the first event marked More it
// brings, the second after the second such event, up to cuts watches.
type cutInsideChanges[T any] struct {
	source.ListWatcher[T]
	cuts int
	made atomic.Int64 // watches cut so far
}

func (c *cutInsideChanges[T]) Watch(ctx context.Context, opts source.WatchOptions) (source.Watcher[T], error) {
	w, err := c.ListWatcher.Watch(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &cutInsideChange[T]{Watcher: w, lw: c}, nil
}

type cutInsideChange[T any] struct {
	source.Watcher[T]
	lw      *cutInsideChanges[T]
	more    int // events marked More so far
	cutNext bool
}

func (w *cutInsideChange[T]) Next(ctx context.Context) (source.Event[T], error) {
	if w.cutNext {
		return source.Event[T]{}, fmt.Errorf("%w: cut inside a transaction", source.ErrUnavailable)
	}
	ev, err := w.Watcher.Next(ctx)
	if err == nil && ev.More {
		w.more++
		if made := w.lw.made.Load(); made < int64(w.lw.cuts) && w.more == int(made)+1 {
			w.lw.made.Add(1)
			w.cutNext = true
		}
	}
	return ev, err
}

// A watch cut inside a transaction is opened again from the revision
// before it, and etcd sends the whole transaction again: each key it
// changed reaches the handlers once, on both queues. Here the first watch
// is cut after the transaction's first event and the second after its
// second.
func TestInformer_WatchCutInsideATransactionDeliversEachChangeOnce(t *testing.T) {
	t.Parallel()
	for _, q := range informerQueues {
		t.Run(q.name, func(t *testing.T) {
			t.Parallel()
			m := startEtcd(t)
			c := newClient(t, m.endpoint())
			const prefix = "/txncut/"
			ctx := context.Background()
			_, err := c.Put(ctx, prefix+"a", "1")
			require.NoError(t, err)

			lw := &cutInsideChanges[etcdmirror.Object[[]byte]]{ListWatcher: etcdmirror.New(c, prefix, fastOptions), cuts: 2}
			inf := mirror.NewInformer(lw, mirror.InformerOptions[string, etcdmirror.Object[[]byte]]{
				KeyFunc: etcdmirror.KeyOf[[]byte],
				ListWatch: mirror.ListWatchOptions{
					InitialBackoff: 20 * time.Millisecond,
					MaxBackoff:     200 * time.Millisecond,
				},
				ErrorHandler: func(err error) { assert.ErrorIs(t, err, source.ErrUnavailable) },
			})
			h := &callLog[[]byte]{}
			reg, err := inf.AddEventHandler(h, mirror.HandlerOptions{})
			require.NoError(t, err)
			rctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- inf.Run(rctx) }()
			defer func() {
				cancel()
				assert.NoError(t, <-done)
			}()
			wctx, wcancel := context.WithTimeout(ctx, convergeTimeout)
			defer wcancel()
			require.NoError(t, mirror.WaitForCacheSync(wctx, inf, reg))

			resp, err := c.Txn(ctx).Then(
				clientv3.OpPut(prefix+"a", "2"),
				clientv3.OpPut(prefix+"b", "2"),
				clientv3.OpPut(prefix+"c", "2"),
			).Commit()
			require.NoError(t, err)
			// Once the handler was told of the transaction's last change
			// (told after the cache has it), and has returned from every
			// call it was handed, it has all it gets.
			require.Eventually(t, func() bool {
				calls := h.all()
				told := slices.ContainsFunc(calls, func(c call[[]byte]) bool {
					return c.obj.Key == prefix+"c" && c.obj.ModRevision == resp.Header.Revision
				})
				return told && reg.Backlog() == 0 && inf.Stats().Handlers[0].Delivered == int64(len(calls))
			}, convergeTimeout, 10*time.Millisecond)
			assert.Equal(t, strconv.FormatInt(resp.Header.Revision, 10), inf.Freshness().ResourceVersion)
			assert.EqualValues(t, 2, lw.made.Load(), "both cuts made")

			var got []string
			for _, call := range h.all() {
				s := fmt.Sprintf("%v %s=%s", call.kind, call.obj.Key, call.obj.Value)
				if call.kind == callUpdate {
					s += " from " + string(call.old.Value)
				}
				got = append(got, s)
			}
			assert.Equal(t, []string{
				"OnAdd /txncut/a=1",
				"OnUpdate /txncut/a=2 from 1",
				"OnAdd /txncut/b=2",
				"OnAdd /txncut/c=2",
			}, got)
		})
	}
}
