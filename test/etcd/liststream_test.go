package etcd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	etcdmirror "github.com/listwatch/mirror/adapters/etcd"
	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/proxy/grpcproxy"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// listChunks reads a whole list with ListChunks and returns its items, the
// size of each chunk and the list's version, checking that every chunk
// names the same version.
func listChunks[T any](t testing.TB, lw source.ChunkLister[T], opts source.ListOptions, each func()) ([]T, []int, string, error) {
	t.Helper()
	var items []T
	var sizes []int
	var rv string
	err := lw.ListChunks(context.Background(), opts, func(c source.ListResult[T]) error {
		if rv == "" {
			rv = c.ResourceVersion
		}
		require.Equal(t, rv, c.ResourceVersion, "every chunk names the list's revision")
		require.Empty(t, c.Skipped)
		items = append(items, c.Items...)
		sizes = append(sizes, len(c.Items))
		if each != nil {
			each()
		}
		return nil
	})
	return items, sizes, rv, err
}

func TestListChunks_StreamIsTheStateAtItsRevisionWhileWritersRun(t *testing.T) {
	t.Parallel() // its writers and list wait on the server as much as they run
	const keys = 100_000
	m := startEtcd(t)
	c := newClient(t, m.endpoint())
	putN(t, c, "/big/", keys)
	lw := etcdmirror.New(c, "/big/", etcdmirror.Options{})
	ctx := context.Background()

	// One writer deletes and adds keys all through the list; after each
	// chunk, before the consumer takes the next, another key changes.
	stop := make(chan struct{})
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
	n := 0
	items, sizes, rv, err := listChunks(t, lw, source.ListOptions{}, func() {
		n++
		_, err := c.Put(ctx, fmt.Sprintf("/big/paced-%d", n), "new")
		assert.NoError(t, err)
	})
	close(stop)
	wg.Wait()
	require.NoError(t, err)

	require.Greater(t, len(sizes), 10, "etcd sent the list in chunks")
	rev := mustRev(t, rv)
	now, err := c.Get(ctx, "/big/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	require.NoError(t, err)
	require.Greater(t, now.Header.Revision, rev, "writers wrote while the list was read")
	require.Equal(t, kvsAt(t, c, "/big/", rev), items, "the list is the state at its revision")
}

// putLarge writes n keys prefix+%08d with values of size bytes, so that a
// list of them is more than gRPC buffers between a server and a client
// that stops reading.
func putLarge(t testing.TB, c *clientv3.Client, prefix string, n, size int) {
	t.Helper()
	value := strings.Repeat("x", size)
	ops := make([]clientv3.Op, 0, 100)
	for i := 0; i < n; i += cap(ops) {
		ops = ops[:0]
		for j := i; j < min(n, i+cap(ops)); j++ {
			ops = append(ops, clientv3.OpPut(nthKey(prefix, j), value))
		}
		_, err := c.Txn(context.Background()).Then(ops...).Commit()
		require.NoError(t, err)
	}
}

func TestListChunks_CompactionDuringTheStreamIsExpired(t *testing.T) {
	m := startEtcd(t)
	c := newClient(t, m.endpoint())
	putLarge(t, c, "/cmp/", 20_000, 1024) // 20 MB
	lw := etcdmirror.New(c, "/cmp/", etcdmirror.Options{})
	ctx := context.Background()

	chunks := 0
	_, _, _, err := listChunks(t, lw, source.ListOptions{}, func() {
		chunks++
		if chunks > 1 {
			return
		}
		// The consumer holds the first chunk while the revision is
		// compacted away: etcd reads every chunk at that revision.
		put, err := c.Put(ctx, "/cmp/later", "x")
		require.NoError(t, err)
		_, err = c.Compact(ctx, put.Header.Revision)
		require.NoError(t, err)
	})
	require.ErrorIs(t, err, source.ErrExpired)
	require.ErrorContains(t, err, "compacted", "etcd's own error stays visible")
}

func TestListChunks_MemberThatStopsAnsweringMidStreamIsUnavailable(t *testing.T) {
	m := startEtcdProc(t)
	c := newClient(t, m.Endpoint())
	putLarge(t, c, "/pause/", 20_000, 1024)
	const timeout = 500 * time.Millisecond
	lw := etcdmirror.New(c, "/pause/", etcdmirror.Options{RequestTimeout: timeout})

	chunks := 0
	_, _, _, err := listChunks(t, lw, source.ListOptions{}, func() {
		chunks++
		if chunks > 1 {
			return
		}
		require.NoError(t, m.Pause())
	})
	require.NoError(t, m.Resume())
	require.ErrorIs(t, err, source.ErrUnavailable, "the list ends instead of hanging")
}

// startGRPCProxy serves etcd's gRPC proxy (KV and Watch) in front of c on
// a loopback port until the test ends, and returns its endpoint. The proxy
// does not offer RangeStream.
func startGRPCProxy(t testing.TB, c *clientv3.Client) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	srv := grpc.NewServer()
	kv, _ := grpcproxy.NewKvProxy(c)
	pb.RegisterKVServer(srv, kv)
	w, _ := grpcproxy.NewWatchProxy(ctx, zap.NewNop(), c)
	pb.RegisterWatchServer(srv, w)
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(ln) })
	t.Cleanup(func() {
		srv.Stop()
		cancel()
		wg.Wait()
	})
	return "http://" + ln.Addr().String()
}

func TestListChunks_ThroughTheGRPCProxyListsInPages(t *testing.T) {
	m := startEtcd(t)
	backend := newClient(t, m.endpoint())
	putN(t, backend, "/px/", 25)
	c := newClient(t, startGRPCProxy(t, backend))
	lw := etcdmirror.New(c, "/px/", etcdmirror.Options{})

	for range 2 { // the second list pages at once
		items, sizes, rv, err := listChunks(t, lw, source.ListOptions{Limit: 10}, nil)
		require.NoError(t, err)
		assert.Equal(t, []int{10, 10, 5}, sizes, "pages of opts.Limit")
		assert.Equal(t, kvsAt(t, backend, "/px/", mustRev(t, rv)), items)
	}
}

func TestInformer_ThroughTheGRPCProxyListsInPagesAndConverges(t *testing.T) {
	for _, q := range informerQueues {
		t.Run(q.name, func(t *testing.T) {
			m := startEtcd(t)
			direct := newClient(t, m.endpoint())
			putN(t, direct, "/pxi/", 1_000)
			c := newClient(t, startGRPCProxy(t, direct))

			inf, handlers, log := startInformer(t, etcdmirror.New(c, "/pxi/", fastOptions), 1)
			requireInformerConverged(t, direct, "/pxi/", inf, handlers)
			ctx := context.Background()
			_, err := direct.Delete(ctx, "/pxi/00000001")
			require.NoError(t, err)
			_, err = direct.Put(ctx, "/pxi/new", "x")
			require.NoError(t, err)
			requireInformerConverged(t, direct, "/pxi/", inf, handlers)
			assert.Equal(t, int64(1), inf.Stats().Reflector.Lists)
			for _, err := range log.all() {
				assert.NotErrorIs(t, err, errors.ErrUnsupported, "falling back to pages is not a failure")
			}
		})
	}
}
