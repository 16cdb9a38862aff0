package etcd

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/listwatch/mirror"
	etcdmirror "github.com/listwatch/mirror/adapters/etcd"
	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// One etcd transaction is one revision, and its events reach the mirror
// one by one, all with that revision. A checkpoint written between two of
// them says "at revision R" while holding only part of R, and a mirror
// resumed from it watches from R+1 and never sees the rest: its cache
// differs from etcd for good. So every checkpoint must hold whole
// transactions: here a mirror writes one every millisecond while
// transactions that each put every key of the prefix stream in, and every
// checkpoint seen in the file (as a crash at that moment would leave it)
// must hold each key as the transaction at its version left it.
//
// Without Event.More (the etcd adapter sets it on all but the last event
// of a transaction), a few percent of the some 250 checkpoints written in
// a run held two generations, on both queues.
func TestCheckpoint_WrittenWhileTransactionsStreamInHoldsWholeTransactions(t *testing.T) {
	for _, q := range informerQueues {
		t.Run(q.name, func(t *testing.T) {
			m := startEtcd(t)
			c := newClient(t, m.endpoint())
			const prefix, keys, txns = "/cptxn/", 1000, 50
			const identity = "transactions"
			path := filepath.Join(t.TempDir(), "checkpoint")
			// The store is new: the transaction of generation g is at
			// revision g+1.
			gen := 0
			txn := func() {
				gen++
				ops := make([]clientv3.Op, 0, keys)
				for i := range keys {
					ops = append(ops, clientv3.OpPut(nthKey(prefix, i), "g"+strconv.Itoa(gen)))
				}
				resp, err := c.Txn(context.Background()).Then(ops...).Commit()
				assert.NoError(t, err)
				assert.Equal(t, int64(gen+1), resp.Header.Revision)
			}
			txn()

			inf := etcdmirror.NewInformer(etcdmirror.New(c, prefix, fastOptions), etcdmirror.InformerOptions[[]byte]{
				ErrorHandler: func(err error) {
					// fastOptions' short timeouts trip on a loaded machine;
					// a watch opened again is not the point.
					assert.ErrorIs(t, err, source.ErrUnavailable)
				},
				Checkpoint: mirror.CheckpointOptions[etcdmirror.KV]{Path: path, Interval: time.Millisecond, Identity: identity},
			})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- inf.Run(ctx) }()
			require.NoError(t, mirror.WaitForCacheSync(ctx, inf))
			written := make(chan struct{})
			go func() {
				defer close(written)
				for range txns {
					txn()
				}
			}()
			var seen [][]byte
			for streaming := true; streaming; {
				select {
				case <-written:
					streaming = false
				default:
				}
				b, err := os.ReadFile(path)
				if err == nil && (len(seen) == 0 || !bytes.Equal(b, seen[len(seen)-1])) {
					seen = append(seen, b)
				}
			}
			cancel()
			require.NoError(t, <-done)

			torn := 0
			for _, b := range seen {
				rv, objs, err := loadCheckpoint(t, b, etcdmirror.KeyOf[[]byte],
					mirror.CheckpointOptions[etcdmirror.KV]{Identity: identity, Codec: etcdmirror.Codec[[]byte]{}})
				require.NoError(t, err)
				rev, err := strconv.ParseInt(rv, 10, 64)
				require.NoError(t, err)
				want := "g" + strconv.FormatInt(rev-1, 10)
				gens := map[string]int{}
				for _, o := range objs {
					gens[string(o.Value)]++
				}
				if len(objs) != keys || gens[want] != keys {
					torn++
					t.Logf("the checkpoint at revision %d holds %d keys: %v", rev, len(objs), gens)
				}
			}
			assert.Zero(t, torn, "of %d checkpoints, %d hold part of a transaction", len(seen), torn)
		})
	}
}
