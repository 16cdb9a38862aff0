package etcd

import (
	"testing"
	"testing/synctest"

	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestWatch_FromACompactedRevisionExpiresWithoutWaitingForTheWatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// etcd's watch says nothing yet (it would on its next pass over
		// the watches behind); the read at the start revision says it is
		// compacted.
		fw := &fakeWatcher{}
		fkv := &fakeKV{probe: rpctypes.ErrCompacted}
		w, err := New(fakeClient(fkv, fw), "/p/", Options{ProgressInterval: -1}).
			Watch(t.Context(), source.WatchOptions{ResourceVersion: "5"})
		require.NoError(t, err)
		defer w.Stop()
		_, err = w.Next(t.Context())
		require.ErrorIs(t, err, source.ErrExpired)
		assert.Contains(t, err.Error(), "a read at rev 6")
	})
}

func TestWatch_ANotCompactedStartRevisionLeavesTheWatchAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fw := &fakeWatcher{}
		fkv := &fakeKV{probe: rpctypes.ErrFutureRev}
		w, err := New(fakeClient(fkv, fw), "/p/", Options{ProgressInterval: -1}).
			Watch(t.Context(), source.WatchOptions{ResourceVersion: "5"})
		require.NoError(t, err)
		defer w.Stop()
		synctest.Wait() // the read has answered
		fw.watch(0).ch <- clientv3.WatchResponse{Header: header(6), Events: []*clientv3.Event{
			{Type: mvccpb.PUT, Kv: kv("/p/a", "1", 6)},
		}}
		ev, err := w.Next(t.Context())
		require.NoError(t, err)
		assert.Equal(t, "6", ev.ResourceVersion)
	})
}
