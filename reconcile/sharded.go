package reconcile

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/listwatch/mirror/shard"
	"github.com/listwatch/mirror/workqueue"
)

// sharding is what a sharded loop (Options.Shards) keeps beside its queue.
type sharding[K comparable] struct {
	m    *shard.Member
	hash func(key any) uint64
	n    int
	wake chan struct{}

	mu     sync.Mutex
	gained map[int]bool // shards gained, their keys not yet queued
	// parked are the deletions seen in shards not held, and when: if a
	// shard comes to this member soon after, its keys are reconciled, as
	// their holder may have fallen before it did.
	parked   map[int]map[K]time.Time
	pruned   time.Time
	parkedOf time.Duration
}

func newSharding[K comparable](opts Options) *sharding[K] {
	if opts.Shards == nil {
		return nil
	}
	mo := opts.Shards.Options()
	sh := &sharding[K]{
		m:        opts.Shards,
		hash:     opts.ShardKey,
		n:        mo.Shards,
		wake:     make(chan struct{}, 1),
		gained:   map[int]bool{},
		parked:   map[int]map[K]time.Time{},
		parkedOf: 2 * mo.TTL,
	}
	if sh.hash == nil {
		sh.hash = KeyHash
	}
	return sh
}

// KeyHash is the hash a sharded loop places a key by when
// Options.ShardKey is nil: shard.KeyHash of a string key, or of the text
// fmt.Sprint makes of any other key.
func KeyHash(key any) uint64 {
	if s, ok := key.(string); ok {
		return shard.KeyHash(s)
	}
	return shard.KeyHash(fmt.Sprint(key))
}

// owns reports whether the member holds key's shard.
func (sh *sharding[K]) owns(key K) bool { return sh.m.Owns(sh.hash(key)) }

// park remembers the deletion of key, whose shard the member does not
// hold, for twice the group's lease TTL.
func (sh *sharding[K]) park(key K) {
	s := shard.Of(sh.hash(key), sh.n)
	now := time.Now()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if now.Sub(sh.pruned) >= sh.parkedOf/2 {
		sh.pruned = now
		for s, keys := range sh.parked {
			for k, at := range keys {
				if now.Sub(at) > sh.parkedOf {
					delete(keys, k)
				}
			}
			if len(keys) == 0 {
				delete(sh.parked, s)
			}
		}
	}
	if sh.parked[s] == nil {
		sh.parked[s] = map[K]time.Time{}
	}
	sh.parked[s][key] = now
}

// gain records shards the member gained, for fill to queue their keys.
func (sh *sharding[K]) gain(gained, _ []int) {
	sh.mu.Lock()
	for _, s := range gained {
		sh.gained[s] = true
	}
	sh.mu.Unlock()
	select {
	case sh.wake <- struct{}{}:
	default:
	}
}

// fill queues, at background priority, the keys of the shards gained:
// those in the watched informers' caches and the deletions parked, until
// ctx ends.
func (sh *sharding[K]) fill(ctx context.Context, q *workqueue.Queue[K], keys []func(yield func(K) bool)) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-sh.wake:
		}
		sh.mu.Lock()
		gained := sh.gained
		sh.gained = map[int]bool{}
		var deleted []K
		for s := range gained {
			for k := range sh.parked[s] {
				deleted = append(deleted, k)
			}
			delete(sh.parked, s)
		}
		sh.mu.Unlock()
		for _, k := range deleted {
			q.AddWithPriority(k, workqueue.PriorityBackground)
		}
		for _, all := range keys {
			for k := range all {
				if ctx.Err() != nil {
					return
				}
				if gained[shard.Of(sh.hash(k), sh.n)] && sh.owns(k) {
					q.AddWithPriority(k, workqueue.PriorityBackground)
				}
			}
		}
	}
}

// hold asks the member for a grant of work on key. Without one, the key is
// let go of: queued again after the member's RetryPeriod if the member
// still holds its shard (its lease may yet be renewed), forgotten if not.
func (l *Loop[K]) hold(ctx context.Context, key K) (context.Context, func(), bool) {
	h := l.sh.hash(key)
	gctx, done, ok := l.sh.m.Hold(ctx, h)
	if ok {
		return gctx, done, true
	}
	l.letGo(key, h)
	l.q.Done(key)
	return nil, nil, false
}

// letGo lets go of key, of hash h, whose work the member did not grant or
// stopped: it is queued again after the member's RetryPeriod if the member
// still holds its shard (its lease may yet be renewed), forgotten if not,
// the new holder's to reconcile.
func (l *Loop[K]) letGo(key K, h uint64) {
	if l.sh.m.Owns(h) {
		l.q.AddAfter(key, l.sh.m.Options().RetryPeriod)
	} else {
		l.forget(key)
	}
}
