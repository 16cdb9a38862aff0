package k8s

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/listwatch/mirror/adapters/k8s"
	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
)

// cuttable wraps a ListWatcher so that a test can end its watches and hold
// back new ones, as a client cut off from the server would be.
type cuttable[T any] struct {
	source.ListWatcher[T]

	mu      sync.Mutex
	held    chan struct{} // closed while watches may start
	cuts    int           // counts cuts, so that a Watch started before one is stopped
	watches []source.Watcher[T]
	waiting chan struct{} // closed once a Watch waits at the hold
}

func newCuttable[T any](lw source.ListWatcher[T]) *cuttable[T] {
	open := make(chan struct{})
	close(open)
	return &cuttable[T]{ListWatcher: lw, held: open}
}

func (c *cuttable[T]) Watch(ctx context.Context, opts source.WatchOptions) (source.Watcher[T], error) {
	c.mu.Lock()
	held, cuts := c.held, c.cuts
	select {
	case <-held:
	default:
		select {
		case <-c.waiting:
		default:
			close(c.waiting)
		}
	}
	c.mu.Unlock()
	select {
	case <-held:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	w, err := c.ListWatcher.Watch(ctx, opts)
	if err == nil {
		c.mu.Lock()
		if c.cuts != cuts {
			// Cut while it started.
			w.Stop()
		}
		c.watches = append(c.watches, w)
		c.mu.Unlock()
	}
	return w, err
}

// cut stops every watch and holds new ones back until resume, and waits
// until the informer's next Watch is held.
func (c *cuttable[T]) cut(t *testing.T) {
	c.mu.Lock()
	c.held = make(chan struct{})
	c.cuts++
	c.waiting = make(chan struct{})
	waiting := c.waiting
	for _, w := range c.watches {
		w.Stop()
	}
	c.watches = nil
	c.mu.Unlock()
	select {
	case <-waiting:
	case <-time.After(convergeTimeout):
		t.Fatalf("no Watch came %v after the cut", convergeTimeout)
	}
}

// resume lets watches start again.
func (c *cuttable[T]) resume() {
	c.mu.Lock()
	close(c.held)
	c.mu.Unlock()
}

func TestInformer_ExpiredVersionRelistsAndEachHandlerGetsOneUnknownDeletePerDeletedObject(t *testing.T) {
	// Not parallel: compacting etcd expires the versions of every
	// ConfigMap watch on the shared server.
	c := sharedCluster(t)
	for _, q := range []struct{ name string }{{"InOrder"}} {
		t.Run(q.name, func(t *testing.T) {
			s := c.scope(t)
			for i := range 20 {
				configMaps.create(t, c.client, s.ns, fmt.Sprintf("c%02d", i), s.labels)
			}
			// ConfigMaps skip the watch cache (see apiserverFlags): a
			// watch from a compacted version fails in etcd.
			lw := newCuttable[*corev1.ConfigMap](configMaps.lw(c.client, s.options()))
			inf := startInformer(t, lw, informerOptions{handlers: 2})
			requireConverged(t, inf, configMaps.serverState(t, c.client, s.selector))
			known := make(map[k8s.Key]*corev1.ConfigMap)
			for k, o := range inf.All() {
				known[k] = o
			}

			lw.cut(t)
			deleted := make(map[k8s.Key]int) // key -> deletes each handler must get
			for i := range 5 {
				k := k8s.Key{Namespace: s.ns, Name: fmt.Sprintf("c%02d", i)}
				configMaps.delete(t, c.client, k)
				deleted[k] = 1
			}
			for i := 10; i < 13; i++ {
				configMaps.annotate(t, c.client, k8s.Key{Namespace: s.ns, Name: fmt.Sprintf("c%02d", i)}, "changed")
			}
			// Deleted and created again while cut: it is still there, so
			// no delete.
			configMaps.delete(t, c.client, k8s.Key{Namespace: s.ns, Name: "c15"})
			configMaps.create(t, c.client, s.ns, "c15", s.labels)
			// Created and deleted while cut: never known, so no delete.
			configMaps.create(t, c.client, s.ns, "ephemeral", s.labels)
			configMaps.delete(t, c.client, k8s.Key{Namespace: s.ns, Name: "ephemeral"})
			configMaps.create(t, c.client, s.ns, "new", s.labels)
			c.compact(t)
			lw.resume()

			requireConverged(t, inf, configMaps.serverState(t, c.client, s.selector))
			assert.True(t, inf.log.has(source.ErrExpired), "the watch found its version compacted: %v", inf.log.all())
			assert.Equal(t, int64(1), inf.Stats().Reflector.Relists, "%v", inf.log.all())
			for i, h := range inf.handlers {
				calls := h.deleteCalls()
				assert.Equal(t, deleted, deleteCounts(calls), "handler %d: exactly one delete per object deleted while cut", i)
				for _, call := range calls {
					assert.True(t, call.unknown, "handler %d: the delete of %v was inferred by the relist", i, key(call.obj))
					assert.Equal(t, known[key(call.obj)], call.obj, "handler %d: the delete of %v carries the last known state", i, key(call.obj))
				}
			}
		})
	}
}
