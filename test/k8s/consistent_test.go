package k8s

import (
	"context"
	"fmt"
	"testing"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/adapters/k8s"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestConsistent_ReadsSeeTheWriteJustMade creates ConfigMaps and reads
// each back through the mirror at once: with Informer.Consistent (whose
// current version is a list of one object, and which reads the server
// if the cache is not current within its bound: the server takes no
// progress requests, so a resource quiet while others change may not be)
// and with read-your-writes on the version the create returned.
func TestConsistent_ReadsSeeTheWriteJustMade(t *testing.T) {
	c := sharedCluster(t)
	ns := c.namespace(t)
	labels := map[string]string{"mirror-test": ns}
	lw := configMaps.lw(c.client, k8s.Options{LabelSelector: "mirror-test=" + ns})
	inf := startInformer(t, lw, informerOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), convergeTimeout)
	defer cancel()

	for i := range 5 {
		name := fmt.Sprintf("c%d", i)
		created := configMaps.create(t, c.client, ns, name, labels)
		key := k8s.Key{Namespace: ns, Name: name}

		r, err := inf.Consistent(ctx, mirror.ConsistentOptions{Fallback: true})
		require.NoError(t, err)
		got, ok := r.GetByKey(key)
		require.True(t, ok, "a consistent read sees the create")
		assert.Equal(t, created.GetResourceVersion(), got.GetResourceVersion())

		annotated := configMaps.annotate(t, c.client, key, "1")
		require.NoError(t, inf.RecordWrite(key, annotated.GetResourceVersion()))
		got, ok, err = inf.GetAfterWrite(ctx, key, mirror.ConsistentOptions{})
		require.NoError(t, err)
		require.True(t, ok)
		assert.Equal(t, annotated.GetResourceVersion(), got.GetResourceVersion(), "a read after the update sees it")
		assert.True(t, inf.WriteApplied(key))
	}
	cur, err := lw.CurrentVersion(ctx)
	require.NoError(t, err)
	c1, err := lw.CompareVersions(cur, inf.Freshness().ResourceVersion)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, c1, 0, "the server's current version is no older than the mirror's")
	assert.Empty(t, inf.log.all())
}
