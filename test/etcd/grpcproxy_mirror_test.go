package etcd

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	etcdmirror "github.com/listwatch/mirror/adapters/etcd"
	"github.com/listwatch/mirror/source"
)

// proxyOptions are the mirror's options through the gRPC proxy: silence
// is told apart from a quiet prefix by the members' periodic progress
// notifications (see grpcproxy_test.go), which proxyMembers sends 5 times
// per interval.
var proxyOptions = etcdmirror.Options{ProgressInterval: 500 * time.Millisecond, RequestTimeout: time.Second}

// proxyProgressNotify is how often the members behind the proxy send
// progress notifications to watches that asked for them. It is a
// process-wide setting in etcd, so they run in child processes.
const proxyProgressNotify = 100 * time.Millisecond

// proxied is a 3-member cluster with etcd's gRPC proxy in front of it:
// each member behind a TCP relay (members[i]), the proxy behind one more
// (front), and a client of the mirror through front.
type proxied struct {
	members []*proxy
	front   *proxy
	direct  *clientv3.Client // of the members, not through the proxy
	client  *clientv3.Client // through the proxy
}

// awaitMembersAt waits until every member has applied revision rev.
func (p *proxied) awaitMembersAt(t *testing.T, rev int64) {
	t.Helper()
	for _, m := range p.members {
		c := newClient(t, m.endpoint())
		require.Eventually(t, func() bool {
			resp, err := c.Get(context.Background(), "/", clientv3.WithSerializable(), clientv3.WithCountOnly())
			return err == nil && resp.Header.Revision >= rev
		}, time.Minute, 10*time.Millisecond, "member behind %s never applied revision %d", m.endpoint(), rev)
	}
}

func startProxied(t *testing.T, progressNotify time.Duration) *proxied {
	cl := startProcClusterWith(t, 3, progressNotify)
	p := &proxied{}
	var behind, direct []string
	for _, m := range cl.members {
		r := newProxy(t, m.cliURL.Host)
		p.members = append(p.members, r)
		behind = append(behind, r.endpoint())
		direct = append(direct, m.Endpoint())
	}
	gp := startGRPCProxyOf(t, behind...)
	p.front = newProxy(t, gp.addr)
	p.direct = newClient(t, direct...)
	p.client = newClient(t, p.front.endpoint())
	return p
}

// Through the gRPC proxy the mirror lists (in pages: the proxy does not
// implement RangeStream), watches, converges after puts and deletes, tells
// a quiet prefix from a silent proxy or member, and after a compaction
// while it was cut off relists with one unknown delete per deleted key.
func TestGRPCProxy_MirrorListsWatchesDetectsSilenceAndConverges(t *testing.T) {
	p := startProxied(t, proxyProgressNotify)
	ctx := context.Background()
	const prefix = "/gp/"
	rev := putN(t, p.direct, prefix, 1200)
	// The proxy reads from any member: wait until each has applied the
	// puts, so that the first list holds them all.
	p.awaitMembersAt(t, rev)

	lw := etcdmirror.New(p.client, prefix, proxyOptions)
	inf, handlers, log := startInformer(t, lw, 1)
	requireInformerConverged(t, p.direct, prefix, inf, handlers)
	st := lw.Stats()
	assert.EqualValues(t, 1, st.Lists)
	assert.EqualValues(t, 1200, st.ListKeys)
	assert.Greater(t, st.ListRequests, int64(2), "a list through the proxy reads pages with Range")

	for i := range 20 {
		_, err := p.direct.Put(ctx, nthKey(prefix, i), "changed")
		require.NoError(t, err)
		_, err = p.direct.Delete(ctx, nthKey(prefix, 100+i))
		require.NoError(t, err)
	}
	requireInformerConverged(t, p.direct, prefix, inf, handlers)

	// A quiet prefix is not a silent source: the members' progress
	// notifications come through the proxy.
	watches := lw.Stats().Watches
	require.Never(t, func() bool { return log.has(source.ErrUnavailable) }, 4*proxyOptions.ProgressInterval, 20*time.Millisecond,
		"a quiet prefix through the proxy is not taken for a silent one")
	assert.Equal(t, watches, lw.Stats().Watches, "the watch stays open")

	// A member that stops answering behind the proxy: the proxy's
	// client moves its watch to another, and the mirror follows.
	for i, m := range p.members {
		m.Pause()
		_, err := p.direct.Put(ctx, nthKey(prefix, 200+i), fmt.Sprintf("member %d paused", i))
		require.NoError(t, err)
		requireInformerConverged(t, p.direct, prefix, inf, handlers)
		m.Resume()
	}

	// The proxy itself stops answering: the mirror says so within its
	// bound, and converges once the proxy is back.
	p.front.Pause()
	require.Eventually(t, func() bool { return log.has(source.ErrUnavailable) }, convergeTimeout, 10*time.Millisecond,
		"a silent proxy is noticed")
	_, err := p.direct.Put(ctx, nthKey(prefix, 250), "while the proxy was paused")
	require.NoError(t, err)
	p.front.Resume()
	requireInformerConverged(t, p.direct, prefix, inf, handlers)

	// Cut off from the proxy while keys go, and the history with them:
	// the watch finds its revision compacted, and the relist deletes
	// each key once, with its last known state.
	known := make(map[string]etcdmirror.KV)
	for k, o := range inf.All() {
		known[k] = o
	}
	p.front.Cut()
	deleted := make(map[string]int)
	for i := range 10 {
		k := nthKey(prefix, 300+i)
		_, err := p.direct.Delete(ctx, k)
		require.NoError(t, err)
		deleted[k] = 1
	}
	resp, err := p.direct.Put(ctx, prefix+"new", "while cut off")
	require.NoError(t, err)
	_, err = p.direct.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical())
	require.NoError(t, err)
	p.front.Resume()

	requireInformerConverged(t, p.direct, prefix, inf, handlers)
	assert.True(t, log.has(source.ErrExpired), "the watch found its revision compacted")
	assert.Positive(t, inf.Stats().Reflector.Relists)
	got := make(map[string]int)
	for _, call := range handlers[0].deleteCalls() {
		if _, ok := deleted[call.obj.Key]; !ok {
			continue // the deletes before the cut
		}
		got[call.obj.Key]++
		assert.True(t, call.unknown, "delete of %s inferred by the relist", call.obj.Key)
		assert.Equal(t, known[call.obj.Key], call.obj, "delete of %s carries the last known state", call.obj.Key)
	}
	assert.Equal(t, deleted, got, "exactly one delete per key deleted while cut off")
}

// With members that send no periodic progress notifications (etcd's
// default is every 10 minutes), a quiet prefix through the proxy looks
// silent, as the proxy drops progress requests: its watch ends as
// unavailable every two intervals and is opened again from the last
// revision, without a relist and without losing a change.
func TestGRPCProxy_WithoutMemberProgressNotificationsAQuietPrefixIsReWatchedNotRelisted(t *testing.T) {
	p := startProxied(t, 0)
	ctx := context.Background()
	const prefix = "/gpquiet/"
	putN(t, p.direct, prefix, 10)

	lw := etcdmirror.New(p.client, prefix, proxyOptions)
	inf, handlers, log := startInformer(t, lw, 1)
	require.Eventually(t, func() bool { return log.has(source.ErrUnavailable) }, convergeTimeout, 10*time.Millisecond,
		"the proxy answers no progress request")
	_, err := p.direct.Put(ctx, nthKey(prefix, 3), "changed")
	require.NoError(t, err)
	requireInformerConverged(t, p.direct, prefix, inf, handlers)
	assert.Zero(t, inf.Stats().Reflector.Relists, "a watch that ends as unavailable is opened again, not relisted")
	assert.EqualValues(t, 1, lw.Stats().Lists)
}
