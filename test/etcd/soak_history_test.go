package etcd

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"

	etcdmirror "github.com/listwatch/mirror/adapters/etcd"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// change is one change of a key in etcd's history.
type change struct {
	// rev is the change's revision: a put's ModRevision, or the revision
	// of the deletion.
	rev     int64
	deleted bool
	// The put's metadata and value; zero for a deletion.
	createRev, version, lease int64
	value                     string
}

// object is the state a put left, as an etcd adapter of decode would
// produce it, and whether decode took its value.
func (c change) object(key string, decode etcdmirror.DecodeFunc[string]) (etcdmirror.Object[string], bool) {
	v, err := decode(key, []byte(c.value))
	return etcdmirror.Object[string]{
		Key: key, Value: v,
		CreateRevision: c.createRev, ModRevision: c.rev,
		Version: c.version, Lease: c.lease,
	}, err == nil
}

// history is every change etcd made under a prefix, in revision order, as
// a raw watch of every member saw it from before the first. Its methods
// are safe for concurrent use.
type history struct {
	mu     sync.Mutex
	keys   map[string][]change // each key's changes, in revision order
	rev    int64               // the revision of the last change recorded
	events int
	err    error // why the recording ended early
}

// recordHistory records every change under prefix from revision from on,
// watching through c, until ctx ends; wait waits for that. If etcd no
// longer has a revision it needs, the recording ends and err says so:
// whoever compacts must stay behind lastRev.
func recordHistory(ctx context.Context, c *clientv3.Client, prefix string, from int64) (h *history, wait func()) {
	h = &history{keys: make(map[string][]change), rev: from - 1}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			// The client resumes a watch whose member is lost through
			// another one, from where it stopped; a watch that ends
			// anyway starts again from the last revision recorded.
			wch := c.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(h.lastRev()+1))
			for resp := range wch {
				if err := resp.Err(); err != nil {
					if resp.CompactRevision != 0 {
						h.fail(fmt.Errorf("history lost: watch from rev %d found history compacted up to rev %d", h.lastRev()+1, resp.CompactRevision))
						return
					}
					break
				}
				h.add(resp.Events)
			}
		}
	}()
	return h, func() { <-done }
}

func (h *history) add(events []*clientv3.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, ev := range events {
		kv := ev.Kv
		c := change{rev: kv.ModRevision}
		if ev.Type == clientv3.EventTypeDelete {
			c.deleted = true
		} else {
			c.createRev, c.version, c.lease, c.value = kv.CreateRevision, kv.Version, kv.Lease, string(kv.Value)
		}
		if c.rev < h.rev {
			h.err = fmt.Errorf("history out of order: rev %d after rev %d", c.rev, h.rev)
		}
		k := string(kv.Key)
		h.keys[k] = append(h.keys[k], c)
		h.rev = c.rev
		h.events++
	}
}

func (h *history) fail(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.err = err
}

// lastRev is the revision of the last change recorded.
func (h *history) lastRev() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.rev
}

// failure returns why the recording went wrong, or nil.
func (h *history) failure() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

// changes returns key's changes, in revision order. The slice must not be
// changed.
func (h *history) changes(key string) []change {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.keys[key]
}

// put returns the put of key at rev, if there was one.
func (h *history) put(key string, rev int64) (change, bool) {
	cs := h.changes(key)
	i, ok := slices.BinarySearchFunc(cs, rev, func(c change, rev int64) int { return cmp.Compare(c.rev, rev) })
	if !ok || cs[i].deleted {
		return change{}, false
	}
	return cs[i], true
}

// after returns key's changes after rev, in revision order.
func (h *history) after(key string, rev int64) []change {
	cs := h.changes(key)
	i, found := slices.BinarySearchFunc(cs, rev, func(c change, rev int64) int { return cmp.Compare(c.rev, rev) })
	if found {
		i++
	}
	return cs[i:]
}

// state returns what etcd held under the prefix after the last change
// recorded: each key's last put, unless a deletion came after it.
func (h *history) state() map[string]change {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]change)
	for k, cs := range h.keys {
		if last := cs[len(cs)-1]; !last.deleted {
			out[k] = last
		}
	}
	return out
}
