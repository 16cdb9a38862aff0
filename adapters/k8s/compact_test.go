package k8s

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

func TestCompactInformer_HoldsEncodedObjectsAndDecodesAFreshOneOnEachRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := labelled("shop", "web-1", map[string]string{"app": "web"})
		p.ManagedFields = managed
		p.Spec.NodeName = "node-1"
		src, newLW, _ := podSource(t, p, labelled("shop", "db-1", map[string]string{"app": "db"}))
		lw := CompactListWatcher(newLW("", Options{}), func() *corev1.Pod { return new(corev1.Pod) }, StripManagedFields[*corev1.Pod])
		inf := NewCompactInformer(lw, mirror.InformerOptions[Key, *Compact[*corev1.Pod]]{
			Indexers: mirror.Indexers[*Compact[*corev1.Pod]]{LabelIndex: IndexCompactByLabels[*corev1.Pod]}})
		var deletes, adds []string
		_, err := inf.AddEventHandler(mirror.HandlerFuncs[*Compact[*corev1.Pod]]{
			AddFunc:    func(c *Compact[*corev1.Pod], _ bool) { adds = append(adds, string(c.UID())) },
			DeleteFunc: func(c *Compact[*corev1.Pod], _ bool) { deletes = append(deletes, string(c.UID())) },
		}, mirror.HandlerOptions{})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { defer close(done); _ = inf.Run(ctx) }()
		defer func() { cancel(); <-done }()
		require.NoError(t, inf.WaitForSync(ctx))

		c, ok := inf.GetByKey(Key{Namespace: "shop", Name: "web-1"})
		require.True(t, ok)
		assert.Equal(t, "web", c.Labels().Get("app"))
		assert.True(t, labels.SelectorFromSet(labels.Set{"app": "web"}).Matches(c.Labels()))
		assert.False(t, c.Labels().Has("tier"))
		assert.Positive(t, c.Len())
		got, err := c.Object()
		require.NoError(t, err)
		assert.Equal(t, "node-1", got.Spec.NodeName)
		assert.Equal(t, p.UID, got.UID)
		assert.Empty(t, got.ManagedFields, "the transform ran before encoding")
		got.Spec.NodeName = "changed by a reader"
		again, err := c.Object()
		require.NoError(t, err)
		assert.Equal(t, "node-1", again.Spec.NodeName, "each read is a fresh object")

		shop, err := inf.IndexKeys(NamespaceIndex, "shop")
		require.NoError(t, err)
		assert.Len(t, shop, 2)
		web, err := inf.ByIndex(LabelIndex, "app=web")
		require.NoError(t, err)
		require.Len(t, web, 1)
		assert.Equal(t, "web-1", web[0].Key().Name)

		// Deleted and created again under its name while the watch was
		// down: a delete then an add, as NewInformer's.
		require.NoError(t, src.requeueWithNewUID(t, "shop", "web-1"))
		time.Sleep(time.Minute) // fake time: past the pause before watching again
		synctest.Wait()
		assert.Contains(t, deletes, "shop/web-1")
		assert.Contains(t, adds, "shop/web-1-new")
	})
}

// requeueWithNewUID replaces an object with another of the same name and
// a new UID, compacting the history so that the informer relists.
func (c *countingLW) requeueWithNewUID(t *testing.T, ns, name string) error {
	t.Helper()
	p := labelled(ns, name, nil)
	p.UID += "-new"
	c.CutWatches()
	if _, ok := c.Delete(ns + "/" + name); !ok {
		t.Fatalf("no %s/%s", ns, name)
	}
	if _, err := c.Put(p); err != nil {
		return err
	}
	c.Compact(c.Revision())
	return nil
}

// An event that is part of a change (More) is passed on as one: the
// mirror must not take a checkpoint between the change's events.
func TestCompactListWatcher_PassesOnThatAnEventIsPartOfAChange(t *testing.T) {
	raw, err := templatePod("web", 1).Marshal()
	require.NoError(t, err)
	tests := []struct {
		name string
		ev   source.Event[[]byte]
	}{
		{"an update, more to come", source.Event[[]byte]{Type: source.Updated, Object: raw, ResourceVersion: "11", More: true}},
		{"an update, the last", source.Event[[]byte]{Type: source.Updated, Object: raw, ResourceVersion: "11"}},
		{"a deletion, more to come", source.Event[[]byte]{Type: source.Deleted, Object: raw, ResourceVersion: "12", More: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := &encodedPods{events: make(chan source.Event[[]byte], 1)}
			lw := CompactListWatcher[*corev1.Pod](src, newPod, nil)
			w, err := lw.Watch(t.Context(), source.WatchOptions{ResourceVersion: "10"})
			require.NoError(t, err)
			defer w.Stop()
			src.events <- tt.ev
			got, err := w.Next(t.Context())
			require.NoError(t, err)
			assert.Equal(t, tt.ev.Type, got.Type)
			assert.Equal(t, tt.ev.ResourceVersion, got.ResourceVersion)
			assert.Equal(t, tt.ev.More, got.More)
		})
	}
}
