package etcd

import (
	"context"
	"fmt"
	"testing"
	"time"

	etcdmirror "github.com/listwatch/mirror/adapters/etcd"
	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// getKVs reads the keys under prefix with a linearizable Get and returns
// them with the revision of the read.
func getKVs(t testing.TB, c *clientv3.Client, prefix string) (map[string]etcdmirror.KV, int64) {
	t.Helper()
	resp, err := c.Get(context.Background(), prefix, clientv3.WithPrefix())
	require.NoError(t, err)
	out := make(map[string]etcdmirror.KV, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = etcdmirror.KV{
			Key: string(kv.Key), Value: kv.Value,
			CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision,
			Version: kv.Version, Lease: kv.Lease,
		}
	}
	return out, resp.Header.Revision
}

// The mirror's only way to etcd is member 0, through a proxy. While the
// proxy is cut, the other members delete keys, delete keys and create them
// again, and update others, and etcd compacts past all of it, so that the
// mirror can only relist when it is back. A key the relist finds under a
// new CreateRevision is another object: the handler must hear that the
// one it knew is gone, then of the new one, never an update from one to
// the other.
//
// Checked to fail without identities: with identityOptions' SameObject
// left nil, every re-created key reaches the handler as one OnUpdate
// across CreateRevisions, on both queues.
func TestInformer_KeyRecreatedWhileCutOffFromThreeMembersIsOneDeleteThenOneAdd(t *testing.T) {
	t.Parallel()
	for _, q := range informerQueues {
		t.Run(q.name, func(t *testing.T) {
			t.Parallel()
			cl := startCluster(t, 3)
			p := newProxy(t, cl.members[0].cliURL.Host)
			others := newClient(t, cl.members[1].endpoint(), cl.members[2].endpoint())
			ctx := context.Background()
			const prefix = "/rc/"
			putN(t, others, prefix, 40)

			log := &errorLog{}
			opts := identityOptions[[]byte](log.add)
			r, err := runInformer(etcdmirror.New(newClient(t, p.endpoint()), prefix, fastOptions), opts)
			require.NoError(t, err)
			t.Cleanup(func() { assert.NoError(t, r.stop()) })
			before, rev := getKVs(t, others, prefix)
			requireMirrored(t, r, before, rev)
			mark := r.calls.len()

			p.Cut()
			require.Eventually(t, func() bool { return log.has(source.ErrUnavailable) }, convergeTimeout, 10*time.Millisecond,
				"the informer notices the cut")
			put := func(k, v string) {
				t.Helper()
				_, err := others.Put(ctx, k, v)
				require.NoError(t, err)
			}
			del := func(k string) {
				t.Helper()
				_, err := others.Delete(ctx, k)
				require.NoError(t, err)
			}
			var deleted, recreated, updated []string
			var dels []clientv3.Op
			for i := range 8 {
				dels = append(dels, clientv3.OpDelete(nthKey(prefix, i)))
				deleted = append(deleted, nthKey(prefix, i))
			}
			_, err = others.Txn(ctx).Then(dels...).Commit()
			require.NoError(t, err)
			for i := 8; i < 20; i++ {
				del(nthKey(prefix, i))
				put(nthKey(prefix, i), "again")
				if i >= 16 {
					put(nthKey(prefix, i), "again, changed")
				}
				recreated = append(recreated, nthKey(prefix, i))
			}
			for i := 20; i < 30; i++ {
				put(nthKey(prefix, i), "changed")
				if i >= 28 {
					put(nthKey(prefix, i), "changed twice")
				}
				updated = append(updated, nthKey(prefix, i))
			}
			// Deleted, created and deleted again: the object the mirror
			// knew is gone, and it never knew the other.
			del(nthKey(prefix, 30))
			put(nthKey(prefix, 30), "short-lived")
			del(nthKey(prefix, 30))
			deleted = append(deleted, nthKey(prefix, 30))
			// Never known to the mirror: no notification.
			put(prefix+"ephemeral", "x")
			del(prefix + "ephemeral")
			var created []string
			for i := range 4 {
				k := fmt.Sprintf("%snew-%d", prefix, i)
				put(k, "new")
				created = append(created, k)
			}
			// Keys 31 to 39 stay as they were.
			_, last := getKVs(t, others, prefix)
			_, err = others.Compact(ctx, last, clientv3.WithCompactPhysical())
			require.NoError(t, err)
			p.Resume()

			after, rev := getKVs(t, others, prefix)
			requireMirrored(t, r, after, rev)
			assert.True(t, log.has(source.ErrExpired), "the watch found its revision compacted")
			assert.Positive(t, r.inf.Stats().Reflector.Relists, "the informer relisted")

			calls := r.calls.all()[mark:]
			for _, c := range calls {
				if c.kind == callUpdate {
					assert.Equal(t, c.old.CreateRevision, c.obj.CreateRevision,
						"OnUpdate of %s from one object to another", c.obj.Key)
				}
			}
			want := make(map[string][]call[[]byte])
			for _, k := range deleted {
				want[k] = []call[[]byte]{{kind: callDelete, obj: before[k], unknown: true}}
			}
			for _, k := range recreated {
				require.NotEqual(t, before[k].CreateRevision, after[k].CreateRevision, k)
				want[k] = []call[[]byte]{
					{kind: callDelete, obj: before[k], unknown: true},
					{kind: callAdd, obj: after[k]},
				}
			}
			for _, k := range updated {
				want[k] = []call[[]byte]{{kind: callUpdate, old: before[k], obj: after[k]}}
			}
			for _, k := range created {
				want[k] = []call[[]byte]{{kind: callAdd, obj: after[k]}}
			}
			assert.Equal(t, want, byKey(calls), "the handler's calls since the cut, by key")
		})
	}
}
