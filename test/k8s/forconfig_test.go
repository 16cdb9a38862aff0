package k8s

import (
	"context"
	"testing"
	"time"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/adapters/k8s"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
)

// An informer over k8s.NewForConfig, which decodes the server's protobuf
// (or JSON) itself, syncs with a real kube-apiserver's Pods (from its
// watch cache) and ConfigMaps (from etcd), by a streaming list or paged
// lists, and then sees their changes; with StripManagedFields it holds
// no managedFields, which the server keeps.
//
// NewForConfig's ListWatcher lists by pages unless the informer asks for
// streaming lists (ListWatchOptions.StreamingList). A streaming list from
// "" is a consistent read: the informer holds every object once synced. A
// first paged list is read at "0", from the watch cache at whatever
// version it has reached, as client-go's is: it may miss the newest
// objects, which the watch then brings.
func TestNewForConfig_SyncsAndWatchesARealServer(t *testing.T) {
	c := sharedCluster(t)
	t.Parallel()
	for _, tc := range []struct {
		name        string
		contentType string
		noStreaming bool
		strip       bool
	}{
		{"protobuf, streaming list", "", false, false},
		{"protobuf, paged lists", "", true, false},
		{"protobuf, streaming list, stripped", "", false, true},
		{"JSON, paged lists, stripped", "application/json", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := rest.CopyConfig(c.config)
			cfg.ContentType = tc.contentType
			t.Run("Pods", func(t *testing.T) {
				forConfigTest(t, c, pods, corev1.SchemeGroupVersion.WithResource("pods"), cfg, tc.noStreaming, tc.strip)
			})
			t.Run("ConfigMaps", func(t *testing.T) {
				forConfigTest(t, c, configMaps, corev1.SchemeGroupVersion.WithResource("configmaps"), cfg, tc.noStreaming, tc.strip)
			})
		})
	}
}

func forConfigTest[T k8s.Object, L runtime.Object](t *testing.T, c *cluster, k kind[T, L], gvr schema.GroupVersionResource, cfg *rest.Config, noStreaming, strip bool) {
	s := c.scope(t)
	k.populate(t, c.client, s, 30)
	lw, err := k8s.NewForConfig[T](cfg, gvr, "", k8s.Options{LabelSelector: s.selector, NoStreamingList: noStreaming, StripManagedFields: strip})
	require.NoError(t, err)
	inf := k8s.NewInformer(lw, k8s.InformerOptions[T]{ListWatch: mirror.ListWatchOptions{PageSize: 7, StreamingList: !noStreaming}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		assert.NoError(t, <-done)
	})
	wctx, wcancel := context.WithTimeout(ctx, convergeTimeout)
	defer wcancel()
	require.NoError(t, inf.WaitForSync(wctx))
	if noStreaming {
		require.Eventually(t, func() bool { return len(inf.List()) == 30 }, convergeTimeout, 10*time.Millisecond)
	} else {
		require.Len(t, inf.List(), 30, "a streaming list reads consistently")
		assert.GreaterOrEqual(t, inf.Stats().Reflector.Events, int64(30), "the objects came as events")
	}
	for _, obj := range inf.List() {
		require.Equal(t, strip, len(obj.GetManagedFields()) == 0, "managedFields of %s", obj.GetName())
	}
	key := k8s.Key{Namespace: s.ns, Name: "o3"}
	changed := k.annotate(t, c.client, key, "changed")
	require.NotEmpty(t, changed.GetManagedFields(), "the server keeps managedFields")
	k.delete(t, c.client, k8s.Key{Namespace: s.ns, Name: "o4"})
	k.create(t, c.client, s.ns, "new", s.labels)
	require.Eventually(t, func() bool {
		got, ok := inf.GetByKey(key)
		_, gone := inf.GetByKey(k8s.Key{Namespace: s.ns, Name: "o4"})
		_, added := inf.GetByKey(k8s.Key{Namespace: s.ns, Name: "new"})
		return ok && got.GetResourceVersion() == changed.GetResourceVersion() && !gone && added
	}, convergeTimeout, 10*time.Millisecond, "the informer sees the change, the deletion and the addition")
	got, _ := inf.GetByKey(key)
	assert.Equal(t, "changed", got.GetAnnotations()["n"])
	assert.Equal(t, strip, len(got.GetManagedFields()) == 0)
}
