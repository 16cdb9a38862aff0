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
// with it (see PopFunc). process runs with the queue's lock held, so it
// must not call the queue and should be quick; the lock keeps the
// consumer's cache (KnownObjects) in step with the queue.
//
// If process returns an error wrapping ErrRequeue, the deltas go back at
// the back of the queue. Pop returns process's error; ctx.Err() if ctx is
// done (checked first); or ErrClosed once the queue is closed and empty.
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

// PopBatch is Pop for up to maxKeys of the oldest keys at once (maxKeys
// < 1 means 1), in queue order. batch is valid only until process returns;
// the Deltas in it may be kept. ErrRequeue requeues the whole batch.
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
// every key queued by the first Replace (its tombstones included) has been
// popped, or, before any Replace, a successful Add, Update, Delete,
// DeleteKeyOnly, Evict or AddIfNotPresent came first. Once true it stays
// true. It does not take the lock.
func (f *DeltaFIFO[K, T]) HasSynced() bool { return f.initial.synced.Load() }

// Close makes Pop and PopBatch return ErrClosed once the queue is empty.
// Producers may still add.
func (f *DeltaFIFO[K, T]) Close() { f.close() }

// IsClosed reports whether Close was called.
func (f *DeltaFIFO[K, T]) IsClosed() bool { return f.isClosed() }
