package mirror

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/listwatch/mirror/source"
)

// writeLog is an informer's record of the versions at which its program
// wrote keys (RecordWrite), until the cache has applied them.
type writeLog[K comparable] struct {
	mu sync.Mutex
	m  map[K]string
	// pruneAt is the size at which RecordWrite next drops the records the
	// cache has applied, so that keys written and never read again do not
	// pile up: twice the size left by the last pruning.
	pruneAt int
}

// RecordWrite records that the program wrote key and the source gave the
// write version v (etcd's Put revision, a Kubernetes update's
// resourceVersion). Until the cache has applied v, WriteApplied(key) is
// false and GetAfterWrite waits for it (read-your-writes, as KEP-5647). A
// second record for a key keeps the newer version; a record is dropped
// once applied.
//
// It returns an error wrapping ErrInvalidVersion if v is not a version,
// or errors.ErrUnsupported if the informer cannot order versions; nothing
// is recorded then.
func (inf *Informer[K, T]) RecordWrite(key K, v string) error {
	cmp := inf.compareVersions()
	if cmp == nil {
		return fmt.Errorf("mirror: record write at %q: source has no version order: %w", v, errors.ErrUnsupported)
	}
	if _, err := cmp(v, v); err != nil {
		return fmt.Errorf("mirror: record write: %w", err)
	}
	if inf.reached(v) {
		return nil
	}
	w := &inf.writes
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = make(map[K]string)
	}
	if old, ok := w.m[key]; ok {
		if c, err := cmp(old, v); err == nil && c >= 0 {
			return nil
		}
	}
	w.m[key] = v
	if len(w.m) >= max(w.pruneAt, 64) {
		for k, rv := range w.m {
			if inf.reached(rv) {
				delete(w.m, k)
			}
		}
		w.pruneAt = 2 * len(w.m)
	}
	return nil
}

// pendingWrite returns the version of the write recorded for key that the
// cache has not applied yet, if any, forgetting a record it has applied.
func (inf *Informer[K, T]) pendingWrite(key K) (string, bool) {
	w := &inf.writes
	w.mu.Lock()
	defer w.mu.Unlock()
	v, ok := w.m[key]
	if !ok {
		return "", false
	}
	if inf.reached(v) {
		delete(w.m, key)
		return "", false
	}
	return v, true
}

// RecordRevision is RecordWrite for a source whose versions are decimal
// revisions (etcd, NATS, memsource). A negative rev is ErrInvalidVersion.
func (inf *Informer[K, T]) RecordRevision(key K, rev int64) error {
	if rev < 0 {
		return fmt.Errorf("mirror: record write at revision %d: %w", rev, source.ErrInvalidVersion)
	}
	return inf.RecordWrite(key, strconv.FormatInt(rev, 10))
}

// WriteApplied reports whether a read of key now sees every write of it
// recorded with RecordWrite; a reconcile loop can requeue a key for which
// it is false. It never blocks.
func (inf *Informer[K, T]) WriteApplied(key K) bool {
	_, pending := inf.pendingWrite(key)
	return !pending
}

// GetAfterWrite is GetByKey once the cache has applied every write of key
// recorded with RecordWrite, waiting as Consistent does. With no such
// write pending it does not wait. If the bound passes it returns a
// *StaleError wrapping ErrNotCurrent, or with opts.Fallback the key as a
// list of the source has it; ctx's end or the informer's stop gives a
// *StaleError wrapping ctx.Err() or ErrStopped.
func (inf *Informer[K, T]) GetAfterWrite(ctx context.Context, key K, opts ConsistentOptions) (item T, exists bool, err error) {
	v, pending := inf.pendingWrite(key)
	if !pending {
		item, exists = inf.cache.GetByKey(key)
		return item, exists, nil
	}
	r, err := inf.readAt(ctx, opts, func(context.Context) (string, error) { return v, nil })
	if err != nil {
		return item, false, err
	}
	if r == Reader[K, T](inf) {
		inf.pendingWrite(key) // forget it, if no newer write came meanwhile
	}
	item, exists = r.GetByKey(key)
	return item, exists, nil
}
