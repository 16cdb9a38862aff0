package mirror

import (
	"context"
	"errors"
	"slices"
)

// Get returns a copy of the pending deltas of obj's key, oldest first. If
// the key function fails or panics it returns a *KeyError.
func (f *DeltaFIFO[K, T]) Get(obj T) (Deltas[T], bool, error) {
	key, err := keyOfGuarded(f.keyFunc, obj)
	if err != nil {
		return nil, false, err
	}
	d, ok := f.GetByKey(key)
	return d, ok, nil
}

// GetByKey returns a copy of the pending deltas of key, oldest first.
func (f *DeltaFIFO[K, T]) GetByKey(key K) (Deltas[T], bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.q.find(key)
	if !ok {
		return nil, false
	}
	return slices.Clone(p.deltas), true
}

// List returns the newest object of each queued key, in the order the
// keys will be popped.
func (f *DeltaFIFO[K, T]) List() []T {
	f.mu.Lock()
	defer f.mu.Unlock()
	list := make([]T, 0, f.q.len())
	for _, p := range f.q.all() {
		list = append(list, p.deltas[len(p.deltas)-1].Object)
	}
	return list
}

// ListKeys returns the queued keys, in the order they will be popped.
func (f *DeltaFIFO[K, T]) ListKeys() []K {
	f.mu.Lock()
	defer f.mu.Unlock()
	keys := make([]K, 0, f.q.len())
	for key := range f.q.all() {
		keys = append(keys, key)
	}
	return keys
}

// Len returns the number of queued keys.
func (f *DeltaFIFO[K, T]) Len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.q.len()
}

// Pop waits until a key is queued, removes the oldest and calls process
// with it, its deltas (oldest first) and whether they belong to the
// initial list (see HasSynced).
//
// process runs with the queue's lock held, so it must not call the
// queue's methods, and it should be quick: producers wait for it. The
// lock is what keeps a consumer's cache (the KnownObjects) in step with
// the queue: a Replace, Resync or Delete consulting the cache cannot run
// between the pop of a key and the cache update that process makes for
// it, which would, for example, make a relist miss a deletion.
//
// If process returns an error wrapping ErrRequeue, the deltas are queued
// again, at the back. The rule is AddIfNotPresent's (newer deltas queued
// under the key meanwhile would win), but as process holds the lock,
// nothing can have queued the key, so the deltas always go back. Pop
// returns process's error; ctx.Err() if ctx is done (checked first, even
// if keys are queued); or ErrClosed once the queue is closed and empty.
// Keys queued before Close are still handed out.
func (f *DeltaFIFO[K, T]) Pop(ctx context.Context, process PopFunc[K, T]) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := waitLocked(ctx, &f.queueBase, &f.q); err != nil {
		return err
	}
	key, deltas, initial := f.popLocked()
	err := process(key, deltas, initial)
	if errors.Is(err, ErrRequeue) {
		f.initial.populateLocked()
		f.requeueLocked(key, deltas)
	}
	return err
}

// PopBatch is Pop for up to maxKeys keys at once (maxKeys < 1 means 1):
// it waits until a key is queued, removes up to maxKeys of the oldest and
// calls process once with them, in queue order, with the lock held as Pop
// does. batch is valid only until process returns (the queue reuses
// it); the Deltas in it may be kept. If process returns an error wrapping
// ErrRequeue, every key of the batch is queued again, in batch order,
// under Pop's rule. PopBatch returns as Pop does.
func (f *DeltaFIFO[K, T]) PopBatch(ctx context.Context, maxKeys int, process func(batch []QueuedDeltas[K, T]) error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := waitLocked(ctx, &f.queueBase, &f.q); err != nil {
		return err
	}
	batch := f.batch[:0]
	for n := min(f.q.len(), max(maxKeys, 1)); len(batch) < n; {
		key, deltas, initial := f.popLocked()
		batch = append(batch, QueuedDeltas[K, T]{Key: key, Deltas: deltas, IsInInitialList: initial})
	}
	err := process(batch)
	if errors.Is(err, ErrRequeue) {
		f.initial.populateLocked()
		for _, q := range batch {
			f.requeueLocked(q.Key, q.Deltas)
		}
	}
	clear(batch) // drop references to the popped objects
	// Keep a modest buffer for next time, but not one a single huge
	// batch inflated.
	if cap(batch) <= maxKeptBatch {
		f.batch = batch
	} else {
		f.batch = nil
	}
	return err
}

const maxKeptBatch = 1024

// popLocked removes the front key, which must exist, and its deltas.
func (f *DeltaFIFO[K, T]) popLocked() (K, Deltas[T], bool) {
	key, p := f.q.pop()
	return key, p.deltas, f.initial.poppedLocked()
}

// HasSynced reports whether the queue has handed out its initial list:
// every key queued when the first Replace returned (its listed objects and
// its tombstones) has been popped, or, before any Replace, an Add or
// Update queued a delta or Delete, DeleteKeyOnly, Evict or AddIfNotPresent
// was called. A call that fails on its key, or an Add or Update whose
// transform fails, does not count. Once true it stays true. It does not
// take the lock.
func (f *DeltaFIFO[K, T]) HasSynced() bool { return f.initial.synced.Load() }

// Close wakes every Pop and PopBatch waiting on an empty queue; from then
// on they hand out what is still queued and then return ErrClosed.
// Producers may still add; their deltas are popped too.
func (f *DeltaFIFO[K, T]) Close() { f.close() }

// IsClosed reports whether Close was called.
func (f *DeltaFIFO[K, T]) IsClosed() bool { return f.isClosed() }
