package etcd

import (
	"context"
	"testing"
	"time"

	"github.com/listwatch/mirror"
	etcdmirror "github.com/listwatch/mirror/adapters/etcd"
	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A key whose value stops decoding leaves the mirror as a deletion whose
// final state is unknown: evicted when the watch brings the value, or
// tombstoned when a relist leaves it out. If etcd then deletes the key
// before the consumer has popped it, that deletion names the key alone;
// the DeltaFIFO must not take it for an observed deletion of the last
// state it knows, which is the state before the undecodable one, not the
// one etcd deleted. Found by TestSoak (seed 15966844441758289602, -soak=5m,
// DeltaFIFO queue, PrevValues false): a handler got OnDelete(state at rev
// 9829, finalStateUnknown=false) for a key whose next change in etcd's
// history was an undecodable put at rev 9953, then a deletion.
func TestDeltaFIFO_KeyDeletedAfterItsValueStoppedDecodingIsStillAnUnknownDeletion(t *testing.T) {
	for _, tc := range []struct {
		name string
		// relist: the value stops decoding before the Reflector lists,
		// while the consumer's cache holds the state before it.
		relist bool
	}{
		{name: "evicted by the watch"},
		{name: "left out of a relist", relist: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := startEtcd(t)
			c := newClient(t, m.endpoint())
			ctx := context.Background()
			const key = "/efd/k"
			_, err := c.Put(ctx, key, "1")
			require.NoError(t, err)
			held := mustList(t, etcdmirror.NewTyped(c, "/efd/", decodeInt, etcdmirror.Options{}))
			bad := func() {
				_, err := c.Put(ctx, key, "no longer an int")
				require.NoError(t, err)
			}
			if tc.relist {
				bad()
			}

			// The consumer's cache holds the key's first state, and
			// nobody pops: the queue keeps every delta it is given.
			known := mirror.NewIndexer(etcdmirror.KeyOf[int], nil)
			require.NoError(t, known.Replace(held, ""))
			f := mirror.NewDeltaFIFO(mirror.DeltaFIFOOptions[string, etcdmirror.Object[int]]{
				KeyFunc:      etcdmirror.KeyOf[int],
				KnownObjects: known,
			})
			r := mirror.NewReflector(etcdmirror.NewTyped(c, "/efd/", decodeInt, etcdmirror.Options{}), f, mirror.ReflectorOptions{})
			rctx, cancel := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() {
				defer close(done)
				r.Run(rctx)
			}()
			t.Cleanup(func() {
				cancel()
				<-done
			})
			require.Eventually(t, func() bool { return r.Stats().Lists > 0 }, convergeTimeout, 10*time.Millisecond)
			if !tc.relist {
				bad()
			}
			d, err := c.Delete(ctx, key)
			require.NoError(t, err)
			require.Eventually(t, func() bool { return syncedRev(r) >= d.Header.Revision }, convergeTimeout, 10*time.Millisecond)

			deltas, ok := f.GetByKey(key)
			require.True(t, ok)
			var deletions mirror.Deltas[etcdmirror.Object[int]]
			for _, d := range deltas {
				if d.Type == mirror.Deleted {
					deletions = append(deletions, d)
				}
			}
			require.Len(t, deletions, 1, "one deletion: %+v", deltas)
			assert.True(t, deletions[0].FinalStateUnknown,
				"the key left the mirror when its value stopped decoding; the deletion after that removed no state the mirror held: %+v", deltas)
			assert.Equal(t, held[0], deletions[0].Object, "the deletion carries the last state the mirror held")
		})
	}
}

// mustList lists every object of lw, which must decode.
func mustList[T any](t *testing.T, lw source.ListWatcher[T]) []T {
	t.Helper()
	res := listAll(t, lw, "", 0)
	require.Empty(t, res.Skipped)
	return res.Items
}
