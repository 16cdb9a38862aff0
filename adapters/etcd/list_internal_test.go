package etcd

import (
	"testing"

	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestList_LaterPagesReadAtFirstPageRevisionNotTheirHeader(t *testing.T) {
	kv := &fakeKV{answers: []fakeGet{
		{resp: &clientv3.GetResponse{Header: header(10), Kvs: kvs("/p/a", "/p/b"), More: true}},
		// etcd puts its current revision in every header; only the
		// first page's is the list's.
		{resp: &clientv3.GetResponse{Header: header(15), Kvs: kvs("/p/c", "/p/d"), More: true}},
		// A member that has not reached the list's revision yet...
		{err: rpctypes.ErrFutureRev},
		// ...is asked again linearizably.
		{resp: &clientv3.GetResponse{Header: header(17), Kvs: kvs("/p/e")}},
	}}
	lw := New(fakeClient(kv, nil), "/p/", Options{})

	first, err := lw.List(t.Context(), source.ListOptions{Limit: 2})
	require.NoError(t, err)
	assert.Equal(t, "10", first.ResourceVersion)
	second, err := lw.List(t.Context(), source.ListOptions{Limit: 2, Continue: first.Continue})
	require.NoError(t, err)
	assert.Equal(t, "10", second.ResourceVersion)
	third, err := lw.List(t.Context(), source.ListOptions{Limit: 2, Continue: second.Continue})
	require.NoError(t, err)
	assert.Equal(t, "10", third.ResourceVersion)
	assert.Empty(t, third.Continue)
	assert.Equal(t, "/p/e", third.Items[0].Key)

	type read struct {
		key          string
		rev, limit   int64
		serializable bool
	}
	var reads []read
	for _, op := range kv.ops {
		assert.Equal(t, "/p0", string(op.RangeBytes()))
		reads = append(reads, read{string(op.KeyBytes()), op.Rev(), op.Limit(), op.IsSerializable()})
	}
	assert.Equal(t, []read{
		{"/p/", 0, 2, false},
		{"/p/b\x00", 10, 2, true},
		{"/p/d\x00", 10, 2, true},
		{"/p/d\x00", 10, 2, false},
	}, reads)
}

func TestList_ResourceVersionChoosesConsistency(t *testing.T) {
	for _, tc := range []struct {
		rv           string
		serializable bool
		err          error
	}{
		{"", false, nil},
		{"0", true, nil},
		{"10", true, nil},
		{"11", true, source.ErrTooLargeResourceVersion},
	} {
		t.Run("rv="+tc.rv, func(t *testing.T) {
			kv := &fakeKV{answers: []fakeGet{{resp: &clientv3.GetResponse{Header: header(10), Kvs: kvs("/p/a")}}}}
			res, err := New(fakeClient(kv, nil), "/p/", Options{}).List(t.Context(), source.ListOptions{ResourceVersion: tc.rv})
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
			} else {
				require.NoError(t, err)
				assert.Equal(t, "10", res.ResourceVersion)
			}
			assert.Equal(t, tc.serializable, kv.ops[0].IsSerializable())
			assert.Zero(t, kv.ops[0].Rev(), "the first page reads the newest revision")
		})
	}
}

func TestContinueToken_RoundTripsAndRefusesForeignTokens(t *testing.T) {
	lw := New(nil, "/p/", Options{})
	key, rev, err := lw.decodeContinue(encodeContinue(1<<40, "/p/k\x00"))
	require.NoError(t, err)
	assert.Equal(t, "/p/k\x00", key)
	assert.Equal(t, int64(1<<40), rev)

	for name, tok := range map[string]string{
		"not base64":     "!!",
		"empty":          "",
		"other format":   "AgE", // format 2, rev 1
		"zero revision":  encodeContinue(0, "/p/k"),
		"outside prefix": encodeContinue(5, "/q/k"),
		"no revision":    "AQ",
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := lw.decodeContinue(tok)
			require.ErrorIs(t, err, errBadContinue)
		})
	}

	all := New(nil, "", Options{})
	_, _, err = all.decodeContinue(encodeContinue(5, ""))
	require.ErrorIs(t, err, errBadContinue, "etcd has no empty key")
	_, _, err = all.decodeContinue(encodeContinue(5, "any\x00"))
	require.NoError(t, err)
}
