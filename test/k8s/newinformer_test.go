package k8s

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/adapters/k8s"
	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
)

// noteLog records what a handler is told, one line per notification.
type noteLog struct {
	mu    sync.Mutex
	notes []string
}

func (l *noteLog) add(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.notes = append(l.notes, fmt.Sprintf(format, args...))
}

func (l *noteLog) since(i int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.notes[i:])
}

// An informer from k8s.NewInformer that relists after its version expired
// reports what changed while it was cut off, and nothing else: no update
// for the objects that did not change, and an object deleted and created
// again under its name (a new UID) as a deletion and then an addition.
func TestNewInformer_RelistAfterExpiryReportsOnlyChangesAndARecreatedObjectAsDeleteThenAdd(t *testing.T) {
	// Not parallel: compacting etcd expires the versions of every
	// ConfigMap watch on the shared server.
	c := sharedCluster(t)
	s := c.scope(t)
	for i := range 20 {
		configMaps.create(t, c.client, s.ns, fmt.Sprintf("c%02d", i), s.labels)
	}
	// ConfigMaps skip the watch cache (see apiserverFlags): a watch from a
	// compacted version fails in etcd.
	lw := newCuttable[*corev1.ConfigMap](configMaps.lw(c.client, s.options()))
	log := &errorLog{}
	inf := k8s.NewInformer(lw, k8s.InformerOptions[*corev1.ConfigMap]{
		ListWatch:    mirror.ListWatchOptions{InitialBackoff: 20 * time.Millisecond, MaxBackoff: 500 * time.Millisecond},
		ErrorHandler: log.add,
	})
	notes := &noteLog{}
	reg, err := inf.AddEventHandler(mirror.HandlerFuncs[*corev1.ConfigMap]{
		AddFunc:    func(o *corev1.ConfigMap, _ bool) { notes.add("add %s", o.Name) },
		UpdateFunc: func(_, o *corev1.ConfigMap) { notes.add("update %s %s", o.Name, o.Annotations["n"]) },
		DeleteFunc: func(o *corev1.ConfigMap, unknown bool) { notes.add("delete %s unknown=%t", o.Name, unknown) },
	}, mirror.HandlerOptions{})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		assert.NoError(t, <-done)
	})
	wctx, wcancel := context.WithTimeout(ctx, convergeTimeout)
	defer wcancel()
	require.NoError(t, mirror.WaitForCacheSync(wctx, reg))
	require.Len(t, notes.since(0), 20, "the initial adds")
	byNamespace, err := inf.IndexKeys(k8s.NamespaceIndex, s.ns)
	require.NoError(t, err)
	assert.Len(t, byNamespace, 20, "the namespace index")

	lw.cut(t)
	configMaps.annotate(t, c.client, k8s.Key{Namespace: s.ns, Name: "c10"}, "changed")
	configMaps.delete(t, c.client, k8s.Key{Namespace: s.ns, Name: "c00"})
	configMaps.delete(t, c.client, k8s.Key{Namespace: s.ns, Name: "c15"})
	configMaps.create(t, c.client, s.ns, "c15", s.labels)
	c.compact(t)
	lw.resume()

	// The relist's deletions come last; an object created after them is
	// reported after anything else the relist made.
	require.Eventually(t, func() bool { return slices.Contains(notes.since(20), "delete c00 unknown=true") },
		convergeTimeout, 10*time.Millisecond, "the relist")
	configMaps.create(t, c.client, s.ns, "later", s.labels)
	require.Eventually(t, func() bool { return slices.Contains(notes.since(20), "add later") },
		convergeTimeout, 10*time.Millisecond, "the object created after the relist")

	got := notes.since(20)
	assert.ElementsMatch(t, []string{
		"update c10 changed",
		"delete c15 unknown=true", // the first c15: its deletion was not seen
		"add c15",
		"delete c00 unknown=true",
		"add later",
	}, got, "no update for the 17 objects that did not change")
	assert.Less(t, slices.Index(got, "delete c15 unknown=true"), slices.Index(got, "add c15"), "c15: delete, then add")
	assert.True(t, log.has(source.ErrExpired), "the watch found its version compacted: %v", log.all())
}
