package etcd

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// collectChunks runs ListChunks and returns the keys of each chunk, and
// every chunk's resource version and skipped errors.
func collectChunks[T any](t *testing.T, lw *ListWatcher[T], opts source.ListOptions) (keys [][]string, rvs []string, skipped []error, err error) {
	t.Helper()
	err = lw.ListChunks(t.Context(), opts, func(c source.ListResult[Object[T]]) error {
		var ks []string
		for _, o := range c.Items {
			ks = append(ks, o.Key)
		}
		keys = append(keys, ks)
		rvs = append(rvs, c.ResourceVersion)
		skipped = append(skipped, c.Skipped...)
		assert.Empty(t, c.Continue)
		return nil
	})
	return keys, rvs, skipped, err
}

func TestListChunks_StreamsAtTheRevisionReadFirst(t *testing.T) {
	for _, tc := range []struct {
		rv                 string
		headSerializable   bool
		streamSerializable bool
	}{
		{"", false, true},
		{"0", true, true},
		{"10", true, true},
	} {
		t.Run("rv="+tc.rv, func(t *testing.T) {
			kv := &fakeKV{answers: []fakeGet{{resp: &clientv3.GetResponse{Header: header(10), Count: 1}}}}
			streams := &fakeStreams{script: []fakeStream{{chunks: []*pb.RangeResponse{
				chunk("/p/a", "/p/b"), chunk("/p/c"), lastChunk(10, "/p/d"),
			}}}}
			lw := New(fakeStreamClient(kv, streams), "/p/", Options{})

			keys, rvs, _, err := collectChunks(t, lw, source.ListOptions{ResourceVersion: tc.rv, Limit: 1})
			require.NoError(t, err)
			assert.Equal(t, [][]string{{"/p/a", "/p/b"}, {"/p/c"}, {"/p/d"}}, keys, "each chunk as etcd sent it; Limit does not cut them")
			assert.Equal(t, []string{"10", "10", "10"}, rvs)

			require.Len(t, kv.ops, 1)
			head := kv.ops[0]
			assert.True(t, head.IsCountOnly(), "the revision is read without reading the keys")
			assert.Equal(t, tc.headSerializable, head.IsSerializable())
			reqs := streams.streamRequests()
			require.Len(t, reqs, 1)
			assert.Equal(t, "/p/", string(reqs[0].Key))
			assert.Equal(t, "/p0", string(reqs[0].RangeEnd))
			assert.Equal(t, int64(10), reqs[0].Revision, "the stream reads at the revision read first")
			assert.Equal(t, tc.streamSerializable, reqs[0].Serializable)
			assert.Zero(t, reqs[0].Limit)
		})
	}
}

func TestListChunks_TooLargeVersionFailsBeforeReading(t *testing.T) {
	kv := &fakeKV{answers: []fakeGet{{resp: &clientv3.GetResponse{Header: header(10)}}}}
	streams := &fakeStreams{}
	lw := New(fakeStreamClient(kv, streams), "/p/", Options{})
	_, _, _, err := collectChunks(t, lw, source.ListOptions{ResourceVersion: "11"})
	require.ErrorIs(t, err, source.ErrTooLargeResourceVersion)
	assert.Empty(t, streams.streamRequests())
}

func TestListChunks_MemberBehindTheRevisionIsReadLinearizably(t *testing.T) {
	kv := &fakeKV{answers: []fakeGet{{resp: &clientv3.GetResponse{Header: header(10)}}}}
	streams := &fakeStreams{script: []fakeStream{
		{err: rpctypes.ErrGRPCFutureRev},
		{chunks: []*pb.RangeResponse{lastChunk(12, "/p/a")}},
	}}
	lw := New(fakeStreamClient(kv, streams), "/p/", Options{})
	keys, rvs, _, err := collectChunks(t, lw, source.ListOptions{ResourceVersion: "0"})
	require.NoError(t, err)
	assert.Equal(t, [][]string{{"/p/a"}}, keys)
	assert.Equal(t, []string{"10"}, rvs, "the list's revision is the one read first, not the last chunk's header")
	reqs := streams.streamRequests()
	require.Len(t, reqs, 2)
	assert.True(t, reqs[0].Serializable)
	assert.False(t, reqs[1].Serializable)
	assert.Equal(t, int64(10), reqs[1].Revision)
}

func TestListChunks_PagesWhereRangeStreamIsUnimplementedAndRemembers(t *testing.T) {
	for name, unimplemented := range map[string]error{
		"old server": status.Error(codes.Unimplemented, "unknown method RangeStream for service etcdserverpb.KV"),
		"grpc proxy": status.Error(codes.Unimplemented, "RangeStream is not supported by the gRPC proxy"),
	} {
		t.Run(name, func(t *testing.T) {
			kv := &fakeKV{answers: []fakeGet{
				{resp: &clientv3.GetResponse{Header: header(10)}}, // the revision
				{resp: &clientv3.GetResponse{Header: header(11), Kvs: kvs("/p/a", "/p/b"), More: true}},
				{resp: &clientv3.GetResponse{Header: header(12), Kvs: kvs("/p/c")}},
				// The second list pages at once.
				{resp: &clientv3.GetResponse{Header: header(13), Kvs: kvs("/p/a")}},
			}}
			streams := &fakeStreams{script: []fakeStream{{err: unimplemented}}}
			lw := New(fakeStreamClient(kv, streams), "/p/", Options{})

			keys, rvs, _, err := collectChunks(t, lw, source.ListOptions{Limit: 2})
			require.NoError(t, err)
			assert.Equal(t, [][]string{{"/p/a", "/p/b"}, {"/p/c"}}, keys, "pages of opts.Limit")
			assert.Equal(t, []string{"11", "11"}, rvs, "every page at the first page's revision")

			keys, rvs, _, err = collectChunks(t, lw, source.ListOptions{Limit: 2})
			require.NoError(t, err)
			assert.Equal(t, [][]string{{"/p/a"}}, keys)
			assert.Equal(t, []string{"13"}, rvs)
			assert.Len(t, streams.streamRequests(), 1, "no second try of RangeStream")
			assert.Empty(t, kv.answers)
		})
	}
}

func TestListChunks_CompactionMidStreamIsExpired(t *testing.T) {
	kv := &fakeKV{answers: []fakeGet{{resp: &clientv3.GetResponse{Header: header(10)}}}}
	streams := &fakeStreams{script: []fakeStream{{chunks: []*pb.RangeResponse{chunk("/p/a")}, err: rpctypes.ErrGRPCCompacted}}}
	lw := New(fakeStreamClient(kv, streams), "/p/", Options{})
	keys, _, _, err := collectChunks(t, lw, source.ListOptions{})
	require.ErrorIs(t, err, source.ErrExpired)
	require.ErrorIs(t, err, rpctypes.ErrCompacted, "etcd's own error stays visible")
	assert.Equal(t, [][]string{{"/p/a"}}, keys)
}

func TestListChunks_UndecodableValueIsSkippedWithItsModRevision(t *testing.T) {
	kv := &fakeKV{answers: []fakeGet{{resp: &clientv3.GetResponse{Header: header(10)}}}}
	bad := &mvccpb.KeyValue{Key: []byte("/p/b"), Value: []byte("x"), CreateRevision: 3, ModRevision: 7, Version: 2}
	streams := &fakeStreams{script: []fakeStream{{chunks: []*pb.RangeResponse{
		chunk("/p/a"), {Kvs: append([]*mvccpb.KeyValue{bad}, kvs("/p/c")...)},
	}}}}
	errBad := errors.New("bad value")
	lw := NewTyped(fakeStreamClient(kv, streams), "/p/", func(_ string, v []byte) (string, error) {
		if string(v) == "x" {
			return "", errBad
		}
		return string(v), nil
	}, Options{})
	keys, _, skipped, err := collectChunks(t, lw, source.ListOptions{})
	require.NoError(t, err)
	assert.Equal(t, [][]string{{"/p/a"}, {"/p/c"}}, keys)
	require.Len(t, skipped, 1)
	var oe *mirror.ObjectError
	require.ErrorAs(t, skipped[0], &oe)
	assert.ErrorIs(t, oe, errBad)
	assert.Equal(t, "/p/b", oe.Key)
	assert.Equal(t, "7", oe.ResourceVersion, "the key's ModRevision, which tells one bad value from the next")
}

func TestListChunks_EmptyPrefixGivesOneEmptyChunk(t *testing.T) {
	kv := &fakeKV{answers: []fakeGet{{resp: &clientv3.GetResponse{Header: header(10)}}}}
	streams := &fakeStreams{script: []fakeStream{{chunks: []*pb.RangeResponse{lastChunk(10)}}}}
	lw := New(fakeStreamClient(kv, streams), "/p/", Options{})
	keys, rvs, _, err := collectChunks(t, lw, source.ListOptions{})
	require.NoError(t, err)
	assert.Equal(t, [][]string{nil}, keys)
	assert.Equal(t, []string{"10"}, rvs)
}

func TestListChunks_RequestTimeoutBoundsEachChunkNotTheConsumer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = time.Second
		kv := &fakeKV{answers: []fakeGet{{resp: &clientv3.GetResponse{Header: header(10)}}}}
		// The member sends the second chunk only once the consumer is
		// done with the first, then stops sending.
		gate := make(chan struct{})
		streams := &fakeStreams{script: []fakeStream{{chunks: []*pb.RangeResponse{chunk("/p/a"), chunk("/p/b")}, gate: gate, hang: true}}}
		lw := New(fakeStreamClient(kv, streams), "/p/", Options{RequestTimeout: timeout})
		var got []string
		err := lw.ListChunks(t.Context(), source.ListOptions{}, func(c source.ListResult[KV]) error {
			got = append(got, c.Items[0].Key)
			if len(got) == 1 {
				// A consumer slower than the timeout.
				time.Sleep(3 * timeout)
				close(gate)
			}
			return nil
		})
		require.ErrorIs(t, err, source.ErrUnavailable, "a member that stops sending chunks")
		require.ErrorIs(t, err, errChunkTimeout)
		assert.Equal(t, []string{"/p/a", "/p/b"}, got, "the consumer's time did not count")
	})
}

func TestListChunks_ErrorFromChunkStopsTheStreamAndIsReturned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		errStop := errors.New("stop")
		kv := &fakeKV{answers: []fakeGet{{resp: &clientv3.GetResponse{Header: header(10)}}}}
		streams := &fakeStreams{script: []fakeStream{{chunks: []*pb.RangeResponse{chunk("/p/a"), chunk("/p/b")}, hang: true}}}
		lw := New(fakeStreamClient(kv, streams), "/p/", Options{})
		calls := 0
		err := lw.ListChunks(t.Context(), source.ListOptions{}, func(source.ListResult[KV]) error {
			calls++
			return errStop
		})
		require.Equal(t, errStop, err)
		assert.Equal(t, 1, calls)
		// synctest.Test fails if the stream's goroutines are still
		// blocked when this returns.
	})
}

func TestListChunks_RefusesAContinueToken(t *testing.T) {
	lw := New(fakeStreamClient(&fakeKV{}, &fakeStreams{}), "/p/", Options{})
	err := lw.ListChunks(t.Context(), source.ListOptions{Continue: encodeContinue(5, "/p/a")}, func(source.ListResult[KV]) error { return nil })
	require.ErrorIs(t, err, errBadContinue)
}
