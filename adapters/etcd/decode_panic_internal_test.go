package etcd

import (
	"strconv"
	"testing"
	"testing/synctest"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// decodePanicky decodes an int and panics on the value "panic".
func decodePanicky(_ string, v []byte) (int, error) {
	if string(v) == "panic" {
		panic("boom")
	}
	return strconv.Atoi(string(v))
}

// requireDecodePanic checks that err is key's *mirror.ObjectError at rv for
// a recovered panic of decodePanicky.
func requireDecodePanic(t *testing.T, err error, key, rv string) {
	t.Helper()
	var oe *mirror.ObjectError
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, key, oe.Key)
	assert.Equal(t, rv, oe.ResourceVersion)
	var pe *mirror.PanicError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, "boom", pe.Value)
	assert.Contains(t, string(pe.Stack), "decode_panic_internal_test.go", "the stack is the panic's")
	assert.ErrorContains(t, err, "decode")
}

func kv(key, value string, mod int64) *mvccpb.KeyValue {
	return &mvccpb.KeyValue{Key: []byte(key), Value: []byte(value), CreateRevision: mod, ModRevision: mod, Version: 1}
}

func TestListWatcher_DecodePanicSkipsOnlyThatKey(t *testing.T) {
	// /p/b panics between /p/a and /p/c, which are listed.
	page := []*mvccpb.KeyValue{kv("/p/a", "1", 4), kv("/p/b", "panic", 5), kv("/p/c", "3", 6)}
	lists := []struct {
		name string
		list func(t *testing.T) (keys []string, skipped []error)
	}{
		{"List", func(t *testing.T) ([]string, []error) {
			kv := &fakeKV{answers: []fakeGet{{resp: &clientv3.GetResponse{Header: header(10), Kvs: page}}}}
			res, err := NewTyped(fakeClient(kv, nil), "/p/", decodePanicky, Options{}).List(t.Context(), source.ListOptions{})
			require.NoError(t, err)
			var keys []string
			for _, o := range res.Items {
				keys = append(keys, o.Key)
			}
			return keys, res.Skipped
		}},
		{"ListChunks", func(t *testing.T) ([]string, []error) {
			kv := &fakeKV{answers: []fakeGet{{resp: &clientv3.GetResponse{Header: header(10)}}}}
			streams := &fakeStreams{script: []fakeStream{{chunks: []*pb.RangeResponse{{Kvs: page}}}}}
			lw := NewTyped(fakeStreamClient(kv, streams), "/p/", decodePanicky, Options{})
			chunks, _, skipped, err := collectChunks(t, lw, source.ListOptions{})
			require.NoError(t, err)
			require.Len(t, chunks, 1)
			return chunks[0], skipped
		}},
	}
	for _, tc := range lists {
		t.Run(tc.name, func(t *testing.T) {
			keys, skipped := tc.list(t)
			assert.Equal(t, []string{"/p/a", "/p/c"}, keys)
			require.Len(t, skipped, 1, "reported once")
			requireDecodePanic(t, skipped[0], "/p/b", "5")
		})
	}

	t.Run("Watch", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			fw := &fakeWatcher{}
			w, err := NewTyped(fakeClient(nil, fw), "/p/", decodePanicky, Options{PrevValues: true}).
				Watch(t.Context(), source.WatchOptions{ResourceVersion: "5"})
			require.NoError(t, err)
			defer w.Stop()
			fw.watch(0).ch <- clientv3.WatchResponse{Header: header(12), Events: []*clientv3.Event{
				{Type: mvccpb.PUT, Kv: kv("/p/b", "panic", 9)},
				{Type: mvccpb.PUT, Kv: kv("/p/c", "4", 10)},
				// A deletion whose previous value panics carries the
				// key alone, as when it fails to decode.
				del("/p/c", 11, kv("/p/c", "panic", 10)),
				// A later good value of the key is decoded.
				{Type: mvccpb.PUT, Kv: prevKV("/p/b", "5", 3, 12, 2)},
			}}
			var got []source.Event[Object[int]]
			for range 4 {
				ev, err := w.Next(t.Context())
				require.NoError(t, err)
				got = append(got, ev)
			}
			requireDecodePanic(t, got[0].Err, "/p/b", "9")
			got[0].Err = nil
			assert.Equal(t, []source.Event[Object[int]]{
				{Type: source.Error, ResourceVersion: "9", Object: Object[int]{Key: "/p/b"}, KeyOnly: true},
				{Type: source.Added, ResourceVersion: "10", Object: Object[int]{Key: "/p/c", Value: 4, CreateRevision: 10, ModRevision: 10, Version: 1}},
				{Type: source.Deleted, ResourceVersion: "11", Object: Object[int]{Key: "/p/c"}, KeyOnly: true},
				{Type: source.Updated, ResourceVersion: "12", Object: Object[int]{Key: "/p/b", Value: 5, CreateRevision: 3, ModRevision: 12, Version: 2}},
			}, got)
		})
	})
}
