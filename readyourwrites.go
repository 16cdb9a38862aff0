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

// RecordWrite records that the program wrote key, and that the source
// gave the write version v (etcd's revision in a Put's response header,
// the resourceVersion of the object a Kubernetes update returns). Until
// the cache has applied v, WriteApplied(key) is false and GetAfterWrite
// waits for it, so that the program's reads of that key see its own
// write: read-your-writes, as Kubernetes' KEP-5647 gives controllers. A
// second record for one key keeps the newer version.
//
// It returns an error wrapping ErrInvalidVersion if v is not a version of
// the source, and one wrapping errors.ErrUnsupported if the informer
// cannot order versions (see VersionComparer); nothing is recorded then.
// Records are dropped once the cache has applied them; memory is bounded
// by the writes the cache has yet to see. It is safe for concurrent use.
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
// revisions (etcd, NATS, memsource): it records rev without the caller
// formatting it. A negative rev is not a version (ErrInvalidVersion).
func (inf *Informer[K, T]) RecordRevision(key K, rev int64) error {
	if rev < 0 {
		return fmt.Errorf("mirror: record write at revision %d: %w", rev, source.ErrInvalidVersion)
	}
	return inf.RecordWrite(key, strconv.FormatInt(rev, 10))
}

// WriteApplied reports whether the cache holds every write of key
// recorded with RecordWrite: whether a read of key now sees them. A
// reconcile loop can skip, and requeue, a key for which it is false, as
// KEP-5647's controllers do, rather than act on a state older than its
// own write. It never blocks on the source.
func (inf *Informer[K, T]) WriteApplied(key K) bool {
	_, pending := inf.pendingWrite(key)
	return !pending
}

// GetAfterWrite returns the cached object under key once the cache has
// applied every write of key recorded with RecordWrite, waiting for that
// up to opts.Timeout and asking the source for progress meanwhile, as a
// consistent read does. It does not wait at all for a key with no such
// write pending: it is then GetByKey.
//
// If the bound passes first, it returns a *StaleError wrapping
// ErrNotCurrent, or with opts.Fallback the key as a list of the source at
// its current version has it (a whole list: see
// ConsistentOptions.Fallback). If ctx ends, or the informer stops, it
// returns a *StaleError wrapping ctx.Err() or ErrStopped.
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
