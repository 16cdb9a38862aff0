package etcd

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/listwatch/mirror"
	etcdmirror "github.com/listwatch/mirror/adapters/etcd"
	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// listAll reads every page of a list and checks that they all name the
// same revision.
func listAll[T any](t testing.TB, lw source.ListWatcher[T], rv string, limit int64) source.ListResult[T] {
	t.Helper()
	ctx := context.Background()
	var all source.ListResult[T]
	opts := source.ListOptions{ResourceVersion: rv, Limit: limit}
	for {
		page, err := lw.List(ctx, opts)
		require.NoError(t, err)
		if all.ResourceVersion == "" {
			all.ResourceVersion = page.ResourceVersion
		}
		require.Equal(t, all.ResourceVersion, page.ResourceVersion, "every page names the list's revision")
		all.Items = append(all.Items, page.Items...)
		all.Skipped = append(all.Skipped, page.Skipped...)
		if page.Continue == "" {
			return all
		}
		opts.Continue = page.Continue
	}
}

// kvsAt reads the keys under prefix at rev in one request.
func kvsAt(t testing.TB, c *clientv3.Client, prefix string, rev int64) []etcdmirror.KV {
	t.Helper()
	resp, err := c.Get(context.Background(), prefix, clientv3.WithPrefix(), clientv3.WithRev(rev))
	require.NoError(t, err)
	out := make([]etcdmirror.KV, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		out = append(out, etcdmirror.KV{
			Key: string(kv.Key), Value: kv.Value,
			CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision,
			Version: kv.Version, Lease: kv.Lease,
		})
	}
	return out
}

func mustRev(t testing.TB, rv string) int64 {
	t.Helper()
	rev, err := strconv.ParseInt(rv, 10, 64)
	require.NoError(t, err)
	return rev
}

func TestList_PagesPinnedToFirstRevisionWhileWritersRun(t *testing.T) {
	t.Parallel() // its writers and list wait on the server as much as they run
	const keys = 100_000
	m := startEtcd(t)
	c := newClient(t, m.endpoint())
	putN(t, c, "/big/", keys)
	lw := etcdmirror.New(c, "/big/", etcdmirror.Options{})
	ctx := context.Background()

	// Writers delete and add keys all through the list: one as fast as it
	// can, the other once after each page, before the next is read, so
	// that every page after the first sees a store that moved on.
	stop := make(chan struct{})
	write, written := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			_, err := c.Delete(ctx, fmt.Sprintf("/big/%08d", (i*7)%keys))
			assert.NoError(t, err)
			_, err = c.Put(ctx, fmt.Sprintf("/big/free-%d", i), "new")
			assert.NoError(t, err)
		}
	})
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-write:
			}
			_, err := c.Delete(ctx, fmt.Sprintf("/big/%08d", keys-1-i*1000))
			assert.NoError(t, err)
			_, err = c.Put(ctx, fmt.Sprintf("/big/paced-%d", i), "new")
			assert.NoError(t, err)
			written <- struct{}{}
		}
	})

	opts := source.ListOptions{Limit: 9_000}
	var items []etcdmirror.KV
	var rv string
	pages := 0
	for {
		page, err := lw.List(ctx, opts)
		require.NoError(t, err)
		pages++
		if rv == "" {
			rv = page.ResourceVersion
		}
		require.Equal(t, rv, page.ResourceVersion, "page %d", pages)
		require.Empty(t, page.Skipped)
		items = append(items, page.Items...)
		if page.Continue == "" {
			break
		}
		opts.Continue = page.Continue
		write <- struct{}{}
		<-written
	}
	close(stop)
	wg.Wait()

	require.Greater(t, pages, 10)
	rev := mustRev(t, rv)
	now, err := c.Get(ctx, "/big/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	require.NoError(t, err)
	require.Greater(t, now.Header.Revision, rev, "writers wrote while the list was read")
	require.Equal(t, kvsAt(t, c, "/big/", rev), items, "the list is the state at its revision")
}

func TestList_ResourceVersionSelectsTheRead(t *testing.T) {
	m := startEtcd(t)
	c := newClient(t, m.endpoint())
	rev := putN(t, c, "/rv/", 10)
	lw := etcdmirror.New(c, "/rv/", etcdmirror.Options{})
	ctx := context.Background()

	for _, rv := range []string{"", "0", strconv.FormatInt(rev, 10), "1"} {
		t.Run("rv="+rv, func(t *testing.T) {
			res, err := lw.List(ctx, source.ListOptions{ResourceVersion: rv})
			require.NoError(t, err)
			assert.Equal(t, strconv.FormatInt(rev, 10), res.ResourceVersion, "served at the newest revision")
			assert.Len(t, res.Items, 10)
			assert.Empty(t, res.Continue)
		})
	}
	t.Run("future", func(t *testing.T) {
		_, err := lw.List(ctx, source.ListOptions{ResourceVersion: strconv.FormatInt(rev+1000, 10)})
		require.ErrorIs(t, err, source.ErrTooLargeResourceVersion)
	})
	t.Run("malformed", func(t *testing.T) {
		_, err := lw.List(ctx, source.ListOptions{ResourceVersion: "abc"})
		require.Error(t, err)
		_, err = lw.List(ctx, source.ListOptions{Continue: "!!"})
		require.Error(t, err)
	})
}

func TestList_ContinueAfterCompactionIsExpired(t *testing.T) {
	m := startEtcd(t)
	c := newClient(t, m.endpoint())
	putN(t, c, "/cmp/", 10)
	lw := etcdmirror.New(c, "/cmp/", etcdmirror.Options{})
	ctx := context.Background()

	first, err := lw.List(ctx, source.ListOptions{Limit: 3})
	require.NoError(t, err)
	require.NotEmpty(t, first.Continue)
	put, err := c.Put(ctx, "/cmp/later", "x")
	require.NoError(t, err)
	_, err = c.Compact(ctx, put.Header.Revision, clientv3.WithCompactPhysical())
	require.NoError(t, err)

	_, err = lw.List(ctx, source.ListOptions{Limit: 3, Continue: first.Continue})
	require.ErrorIs(t, err, source.ErrExpired)
	require.ErrorContains(t, err, "compacted", "etcd's own error stays visible")
}

func TestList_DecodeFailureSkipsOnlyThatKey(t *testing.T) {
	m := startEtcd(t)
	c := newClient(t, m.endpoint())
	ctx := context.Background()
	for k, v := range map[string]string{"/d/a": "1", "/d/b": "bad", "/d/c": "3"} {
		_, err := c.Put(ctx, k, v)
		require.NoError(t, err)
	}
	lw := etcdmirror.NewTyped(c, "/d/", decodeInt, etcdmirror.Options{})

	res := listAll(t, lw, "", 1)
	keys := make([]string, 0, len(res.Items))
	for _, o := range res.Items {
		keys = append(keys, o.Key)
	}
	assert.Equal(t, []string{"/d/a", "/d/c"}, keys)
	assert.Equal(t, 3, res.Items[1].Value)
	require.Len(t, res.Skipped, 1)
	var oe *mirror.ObjectError
	require.ErrorAs(t, res.Skipped[0], &oe)
	assert.Equal(t, "/d/b", oe.Key)
	assert.ErrorIs(t, oe, strconv.ErrSyntax)
}

// decodeInt decodes decimal values.
func decodeInt(_ string, v []byte) (int, error) { return strconv.Atoi(string(v)) }

func TestList_EmptyPrefixListsEveryKey(t *testing.T) {
	m := startEtcd(t)
	c := newClient(t, m.endpoint())
	putN(t, c, "a/", 3)
	putN(t, c, "b/", 3)
	res := listAll(t, etcdmirror.New(c, "", etcdmirror.Options{}), "", 2)
	require.Len(t, res.Items, 6)
}

func TestList_UnreachableMemberIsUnavailable(t *testing.T) {
	m := startEtcd(t)
	p := newProxy(t, m.cliURL.Host)
	c := newClient(t, p.endpoint())
	lw := etcdmirror.New(c, "/u/", etcdmirror.Options{RequestTimeout: 300 * time.Millisecond})
	_, err := lw.List(context.Background(), source.ListOptions{})
	require.NoError(t, err)

	p.Cut()
	_, err = lw.List(context.Background(), source.ListOptions{})
	require.ErrorIs(t, err, source.ErrUnavailable)
}
