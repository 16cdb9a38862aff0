package etcd

import (
	"sync"
	"testing"

	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Each key kvs makes is "/p/x" with value "v": 5 bytes.
const kvBytes = 5

func TestStats_CountListsRequestsKeysAndBytesAsTheyReachEtcd(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(t *testing.T) *ListWatcher[[]byte]
		want Stats
	}{{
		name: "a paged List, one page read again linearizably",
		run: func(t *testing.T) *ListWatcher[[]byte] {
			kv := &fakeKV{answers: []fakeGet{
				{resp: &clientv3.GetResponse{Header: header(10), Kvs: kvs("/p/a", "/p/b"), More: true}},
				{err: rpctypes.ErrFutureRev},
				{resp: &clientv3.GetResponse{Header: header(11), Kvs: kvs("/p/c")}},
			}}
			lw := New(fakeClient(kv, nil), "/p/", Options{})
			page, err := lw.List(t.Context(), source.ListOptions{Limit: 2})
			require.NoError(t, err)
			_, err = lw.List(t.Context(), source.ListOptions{Limit: 2, Continue: page.Continue})
			require.NoError(t, err)
			return lw
		},
		want: Stats{Lists: 1, ListRequests: 3, ListKeys: 3, ListBytes: 3 * kvBytes},
	}, {
		name: "a streamed list: its revision, then the stream",
		run: func(t *testing.T) *ListWatcher[[]byte] {
			kv := &fakeKV{answers: []fakeGet{{resp: &clientv3.GetResponse{Header: header(10), Count: 4}}}}
			streams := &fakeStreams{script: []fakeStream{{chunks: []*pb.RangeResponse{
				chunk("/p/a", "/p/b"), chunk("/p/c"), lastChunk(10, "/p/d"),
			}}}}
			lw := New(fakeStreamClient(kv, streams), "/p/", Options{})
			_, _, _, err := collectChunks(t, lw, source.ListOptions{})
			require.NoError(t, err)
			return lw
		},
		want: Stats{Lists: 1, ListRequests: 2, ListKeys: 4, ListBytes: 4 * kvBytes},
	}, {
		name: "a list in chunks where RangeStream is unimplemented",
		run: func(t *testing.T) *ListWatcher[[]byte] {
			kv := &fakeKV{answers: []fakeGet{
				{resp: &clientv3.GetResponse{Header: header(10)}},
				{resp: &clientv3.GetResponse{Header: header(11), Kvs: kvs("/p/a", "/p/b"), More: true}},
				{resp: &clientv3.GetResponse{Header: header(12), Kvs: kvs("/p/c")}},
			}}
			streams := &fakeStreams{script: []fakeStream{{err: status.Error(codes.Unimplemented, "unknown method RangeStream")}}}
			lw := New(fakeStreamClient(kv, streams), "/p/", Options{})
			_, _, _, err := collectChunks(t, lw, source.ListOptions{Limit: 2})
			require.NoError(t, err)
			return lw
		},
		want: Stats{Lists: 1, ListRequests: 4, ListKeys: 3, ListBytes: 3 * kvBytes},
	}, {
		name: "a list that fails",
		run: func(t *testing.T) *ListWatcher[[]byte] {
			kv := &fakeKV{answers: []fakeGet{{err: rpctypes.ErrGRPCNoLeader}}}
			lw := New(fakeClient(kv, nil), "/p/", Options{})
			_, err := lw.List(t.Context(), source.ListOptions{})
			require.Error(t, err)
			return lw
		},
		want: Stats{Lists: 1, ListRequests: 1},
	}, {
		name: "a watch, and one resumed from a version",
		run: func(t *testing.T) *ListWatcher[[]byte] {
			lw := New(fakeClient(nil, &fakeWatcher{}), "/p/", Options{ProgressInterval: -1})
			for _, rv := range []string{"", "7"} {
				w, err := lw.Watch(t.Context(), source.WatchOptions{ResourceVersion: rv})
				require.NoError(t, err)
				w.Stop()
			}
			return lw
		},
		want: Stats{Watches: 2},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			lw := tc.run(t)
			assert.Equal(t, tc.want, lw.Stats())
		})
	}
}

func TestStats_AreSafeToReadWhileListsRun(t *testing.T) {
	const lists = 8
	var answers []fakeGet
	for range lists {
		answers = append(answers, fakeGet{resp: &clientv3.GetResponse{Header: header(10), Kvs: kvs("/p/a", "/p/b")}})
	}
	lw := New(fakeClient(&fakeKV{answers: answers}, nil), "/p/", Options{})
	var wg sync.WaitGroup
	for range lists {
		wg.Go(func() {
			_, err := lw.List(t.Context(), source.ListOptions{})
			assert.NoError(t, err)
			_ = lw.Stats()
		})
	}
	wg.Wait()
	assert.Equal(t, Stats{Lists: lists, ListRequests: lists, ListKeys: 2 * lists, ListBytes: 2 * lists * kvBytes}, lw.Stats())
}
