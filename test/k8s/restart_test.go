package k8s

import (
	"testing"
	"time"

	"github.com/listwatch/mirror/adapters/k8s"
	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
)

func TestInformer_ConvergesAfterTheAPIServerRestartsOnTheSameEtcd(t *testing.T) {
	// Not parallel, and on a cluster of its own: it stops its server.
	c, err := startCluster(t)
	require.NoError(t, err)
	s := c.scope(t)
	configMaps.populate(t, c.client, s, 8)
	pods.populate(t, c.client, s, 8)
	cms := startInformer(t, configMaps.lw(c.client, s.options()), informerOptions{})
	ps := startInformer(t, pods.lw(c.client, s.options()), informerOptions{})
	requireConverged(t, cms, configMaps.serverState(t, c.client, s.selector))
	requireConverged(t, ps, pods.serverState(t, c.client, s.selector))

	c.stopServer()
	require.Eventually(t, func() bool { return cms.log.has(source.ErrUnavailable) && ps.log.has(source.ErrUnavailable) },
		convergeTimeout, 10*time.Millisecond, "the informers find the server gone")
	// A new server on the same etcd; the informers reach it once it has
	// changed what they hold.
	require.NoError(t, c.startServer(t))
	admin := c.admin(t)
	changeWhileAway(t, configMaps, admin, s)
	changeWhileAway(t, pods, admin, s)
	require.NoError(t, c.connect())

	requireConverged(t, cms, configMaps.serverState(t, c.client, s.selector))
	requireConverged(t, ps, pods.serverState(t, c.client, s.selector))
	deleted := map[k8s.Key]int{{Namespace: s.ns, Name: "o0"}: 1, {Namespace: s.ns, Name: "o1"}: 1}
	assert.Equal(t, deleted, deleteCounts(cms.handlers[0].deleteCalls()), "ConfigMaps: one delete per deleted object")
	assert.Equal(t, deleted, deleteCounts(ps.handlers[0].deleteCalls()), "Pods: one delete per deleted object")
}

// changeWhileAway deletes o0 and o1, changes o2 and o3 and creates o8, all
// through cs.
func changeWhileAway[T k8s.Object, L runtime.Object](t *testing.T, k kind[T, L], cs kubernetes.Interface, s scope) {
	t.Helper()
	k.delete(t, cs, k8s.Key{Namespace: s.ns, Name: "o0"})
	k.delete(t, cs, k8s.Key{Namespace: s.ns, Name: "o1"})
	k.annotate(t, cs, k8s.Key{Namespace: s.ns, Name: "o2"}, "away")
	k.annotate(t, cs, k8s.Key{Namespace: s.ns, Name: "o3"}, "away")
	k.create(t, cs, s.ns, "o8", s.labels)
}
