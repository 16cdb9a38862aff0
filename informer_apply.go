package mirror

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// afterFunc is context.AfterFunc whose stop also waits for f to return if
// it has started, so that f's goroutine does not outlive the caller.
func afterFunc(ctx context.Context, f func()) (stop func()) {
	done := make(chan struct{})
	cancel := context.AfterFunc(ctx, func() {
		defer close(done)
		f()
	})
	return func() {
		if !cancel() {
			<-done
		}
	}
}

// applyLoop pops and applies batches until ctx ends.
func (inf *Informer[K, T]) applyLoop(ctx context.Context) {
	if inf.fifo != nil {
		for {
			err := inf.fifo.PopBatch(ctx, inf.opts.BatchSize, inf.applyDeltas)
			if ctx.Err() != nil || errors.Is(err, ErrClosed) {
				return
			}
			if err != nil {
				inf.applyErrors.Add(1)
				inf.report(err)
			}
			inf.checkFIFOSynced()
		}
	}
	defer afterFunc(ctx, inf.inOrder.interrupt)()
	batch := make([]inOrderEntry[K, T], 0, inf.opts.BatchSize)
	for {
		var err error
		batch, err = inf.inOrder.popBatch(ctx, inf.opts.BatchSize, batch[:0])
		if err != nil {
			return
		}
		inf.applyEntries(batch)
		clear(batch) // drop references to popped objects
		inf.applied += uint64(len(batch))
		inf.measureWait()
	}
}

// measureWait reports how long the sample of the entries applied so far
// waited in the queue, if the informer has metrics.
func (inf *Informer[K, T]) measureWait() {
	if inf.measured != nil {
		inf.queueArrivals().applied(inf.applied, inf.measured.Applied)
	}
}

// applyDeltas applies a DeltaFIFO batch; it runs with the queue's lock
// held, so a relist cannot compute tombstones from a cache that has not
// yet applied these deltas.
func (inf *Informer[K, T]) applyDeltas(batch []QueuedDeltas[K, T]) error {
	inf.applyMu.Lock()
	defer inf.applyMu.Unlock()
	for i, j := 0, 0; i < len(batch); {
		i, j = inf.applyDeltasFrom(batch, i, j)
	}
	inf.applying = applyCall[K, T]{} // drop the reference to an object
	// Keys pop in the order they were first queued, not in the order of
	// their changes: the cache is at a version only once the queue has
	// drained.
	if v, drained := inf.fifo.drainedVersionLocked(); drained && v != "" {
		inf.appliedRV = v
		inf.versions.publish(v, false)
	}
	inf.proc.publish()
	inf.applied += uint64(len(batch))
	inf.measureWait()
	return nil
}

// applyDeltasFrom applies batch from the j-th delta of its i-th key on,
// and returns len(batch), 0. If SameObject or ResourceVersion panics on a
// delta, it undoes that delta (see undoApplying) and returns the position
// of the next, and the caller goes on from there: one deferred call per
// batch, not per delta.
func (inf *Informer[K, T]) applyDeltasFrom(batch []QueuedDeltas[K, T], i, j int) (ni, nj int) {
	defer func() {
		if inf.applying.fn != noCallback {
			if v := recover(); v != nil {
				inf.undoApplying(v)
				if nj++; nj == len(batch[ni].Deltas) {
					ni, nj = ni+1, 0
				}
			}
		}
	}()
	for ni, nj = i, j; ni < len(batch); ni, nj = ni+1, 0 {
		item := &batch[ni]
		for ; nj < len(item.Deltas); nj++ {
			d := item.Deltas[nj]
			inf.applyDelta(item.Key, d, item.IsInInitialList, deltaOrigin(d, item.IsInInitialList))
		}
	}
	return ni, nj
}

// applyEntries applies an in-order batch. The queue's lock is not held:
// only this goroutine writes the cache, so each entry sees the cache as
// every earlier entry left it.
func (inf *Informer[K, T]) applyEntries(batch []inOrderEntry[K, T]) {
	inf.applyMu.Lock()
	defer inf.applyMu.Unlock()
	for i := 0; i < len(batch); {
		i = inf.applyEntriesFrom(batch, i)
	}
	inf.applying = applyCall[K, T]{} // drop the reference to an object
	inf.versions.publish(inf.appliedRV, inf.partial.open)
	inf.proc.publish()
}

// applyEntriesFrom applies batch[i:] and returns len(batch). If
// SameObject or ResourceVersion panics on the change of an entry, it
// undoes that change (see undoApplying), completes the entry, and returns
// the position of the next, and the caller goes on from there: one
// deferred call per batch, not per entry. (Entries of many changes, list
// chunks and ends, go on past such a change themselves.)
func (inf *Informer[K, T]) applyEntriesFrom(batch []inOrderEntry[K, T], i int) (next int) {
	defer func() {
		if inf.applying.fn != noCallback {
			if v := recover(); v != nil {
				inf.undoApplying(v)
				inf.entryApplied(&batch[next])
				next++
			}
		}
	}()
	for next = i; next < len(batch); next++ {
		e := &batch[next]
		inf.applyEntry(e)
		inf.entryApplied(e)
	}
	return next
}

// applyEntry applies the change, list chunk or end, or resync of e.
func (inf *Informer[K, T]) applyEntry(e *inOrderEntry[K, T]) {
	initial := e.completesSync && !inf.synced.Load()
	switch e.kind {
	case entryAdded:
		inf.applyDelta(e.key, Delta[T]{Type: Added, Object: e.obj}, false, OriginLive)
	case entryUpdated:
		inf.applyDelta(e.key, Delta[T]{Type: Updated, Object: e.obj}, false, OriginLive)
	case entryDeleted:
		inf.applyDelete(e.key, Delta[T]{Type: Deleted, Object: e.obj}, false, OriginLive)
	case entryDeletedKeyOnly:
		inf.applyDelete(e.key, Delta[T]{Type: Deleted, Object: e.obj}, true, OriginLive)
	case entryEvicted:
		inf.applyDelete(e.key, Delta[T]{Type: Deleted, Tombstone: true}, true, OriginLive)
	case entryListChunk:
		inf.applyListPart(e.part, e.initialList)
	case entryListEnd:
		inf.applyListEnd(initial)
	case entryListAbort:
		// What a direct list applied stays: the next list, read at
		// a version no older, corrects it (see listApplier).
		inf.listing = nil
	case entryResync:
		inf.resyncLocked(time.Now())
	case entryProgress, entryResumed:
	}
}

// entryApplied records that e is applied: the version it brings the cache
// to, and the sync it completes.
func (inf *Informer[K, T]) entryApplied(e *inOrderEntry[K, T]) {
	if e.rv != "" {
		inf.appliedRV = e.rv
		inf.partial.set(position{rv: e.rv, more: e.more})
	}
	if e.completesSync {
		// The listeners must count the initial-list adds before they
		// may see the informer synced.
		inf.proc.publish()
		inf.markSynced()
	}
}

// listing is the list whose chunks the in-order queue is handing over.
type listing[K comparable, T any] struct {
	// direct is set if the cache was empty when the list began: its
	// chunks are applied as they come, since nothing is cached that the
	// list could find gone, and nothing that changes the cache is queued
	// between the chunks of a list (a resync round may be; it offers
	// what is cached so far), so the result is the one-step relist's. The
	// list and the cache it fills are then never both held whole.
	direct bool
	// staged are the chunks of any other list, applied as one step at
	// its end; diff, if not nil, is what they were found to be as they
	// came (see relist_diff.go).
	staged relist[K, T]
	diff   *relistDiff[K, T]
}

// applyListPart applies or stages the next chunk of the list in
// progress. initialList says whether the list will complete the sync.
func (inf *Informer[K, T]) applyListPart(part *listPart[K, T], initialList bool) {
	l := inf.listing
	if l == nil {
		l = &listing[K, T]{direct: inf.cache.Len() == 0}
		if !l.direct && inf.opts.ResourceVersion != nil {
			l.diff = &relistDiff[K, T]{}
		}
		inf.listing = l
	}
	if !l.direct {
		l.staged.add(part)
		if l.diff != nil {
			inf.diffPart(l.diff, part)
		}
		return
	}
	inf.applyPart(part, initialList && !inf.synced.Load())
}

// applyPart applies the objects of a list chunk as Replaced deltas.
func (inf *Informer[K, T]) applyPart(part *listPart[K, T], initial bool) {
	for i := 0; i < len(part.objs); {
		i = inf.applyPartFrom(part, i, initial)
	}
}

// applyPartFrom applies the objects of part from the i-th on, as
// applyPart, and returns len(part.objs). If SameObject or ResourceVersion
// panics on one, it undoes that object's delta (see undoApplying) and
// returns the position of the next: one deferred call per chunk, not per
// object.
func (inf *Informer[K, T]) applyPartFrom(part *listPart[K, T], i int, initial bool) (next int) {
	defer func() {
		if inf.applying.fn != noCallback {
			if v := recover(); v != nil {
				inf.undoApplying(v)
				next++
			}
		}
	}()
	skip := part.skip
	for len(skip) > 0 && skip[0] < i {
		skip = skip[1:]
	}
	for next = i; next < len(part.objs); next++ {
		if len(skip) > 0 && skip[0] == next {
			skip = skip[1:]
			continue
		}
		inf.applyDelta(part.keys[next], Delta[T]{Type: Replaced, Object: part.objs[next]}, initial, listOrigin(initial))
	}
	return next
}

// applyListEnd completes the list in progress: a staged list is applied
// as one step, a direct one is already applied.
func (inf *Informer[K, T]) applyListEnd(initial bool) {
	l := inf.listing
	inf.listing = nil
	if l == nil {
		l = &listing[K, T]{} // an empty list
	}
	if !l.direct && (l.diff == nil || !inf.applyDiffed(&l.staged, l.diff, initial)) {
		inf.applyReplace(&l.staged, initial)
	}
}

// applyReplace applies a relist as one step: deletes for every cached key
// it does not list, then adds and updates.
func (inf *Informer[K, T]) applyReplace(list *relist[K, T], initial bool) {
	if inf.cache.Len() > 0 {
		inf.deleteUnlisted(list, listOrigin(initial))
	}
	// What is left are listed keys: make room for the whole list at once
	// rather than growing the cache step by step as it fills.
	inf.cache.reserve(list.n)
	for _, p := range list.parts {
		inf.applyPart(p, initial)
	}
}

// deleteUnlisted deletes every cached key that list lacks and tells the
// handlers, with origin, that its final state is unknown.
func (inf *Informer[K, T]) deleteUnlisted(list *relist[K, T], origin Origin) {
	inf.deleteKeys(inf.cache.unlisted(func(yield func(K) bool) {
		for k := range list.all() {
			if !yield(k) {
				return
			}
		}
		for _, p := range list.parts {
			for _, k := range p.kept {
				if !yield(k) {
					return
				}
			}
		}
	}), origin)
}

// deleteKeys deletes the cached keys gone, which a list lacks, and tells
// the handlers, with origin, that their final state is unknown.
func (inf *Informer[K, T]) deleteKeys(gone []K, origin Origin) {
	for _, k := range gone {
		if old, ok := inf.cache.DeleteKey(k); ok {
			inf.proc.distribute(notification[K, T]{kind: notifyDelete, key: k, obj: old, unknown: true, origin: origin}, false)
		}
	}
}

// applyDelta updates the cache with one delta and notifies the handlers,
// with origin, which identity changes keep (see SameObject).
func (inf *Informer[K, T]) applyDelta(key K, d Delta[T], initial bool, origin Origin) {
	switch d.Type {
	case Deleted:
		inf.applyDelete(key, d, false, origin)
	default: // Added, Updated, Replaced, Sync
		old, existed, err := inf.cache.Set(key, d.Object)
		if err != nil {
			inf.applyErrors.Add(1)
			inf.report(err)
			return
		}
		if existed && d.Type != Sync && inf.opts.SameObject != nil {
			inf.applying = applyCall[K, T]{fn: inSameObject, key: key, old: old}
			same := inf.opts.SameObject(old, d.Object)
			inf.applying.fn = noCallback
			if !same {
				// The key now names another object: the one cached
				// left the source unseen (deleted, then the key
				// re-created), so an update from one to the other
				// would be a lie.
				inf.proc.distribute(notification[K, T]{kind: notifyDelete, key: key, obj: old, unknown: true, origin: origin}, false)
				existed = false
			}
		}
		if !existed {
			inf.proc.distribute(notification[K, T]{kind: notifyAdd, key: key, obj: d.Object, initial: initial, origin: origin}, false)
			return
		}
		isSync := d.Type == Sync
		if d.Type == Replaced && inf.opts.ResourceVersion != nil {
			inf.applying = applyCall[K, T]{fn: inResourceVersion, key: key, old: old}
			isSync = inf.opts.ResourceVersion(old) == inf.opts.ResourceVersion(d.Object)
			inf.applying.fn = noCallback
		}
		if isSync {
			// Unchanged: offered, as a resync, to the handlers due
			// for one.
			origin = OriginResync
		}
		inf.proc.distribute(notification[K, T]{kind: notifyUpdate, key: key, old: old, obj: d.Object, origin: origin}, isSync)
	}
}

// applyCall is a change the cache has made while a user function judges
// it: the function, the key, and the state the cache held before.
type applyCall[K comparable, T any] struct {
	fn  callback
	key K
	old T
}

// undoApplying undoes the change whose SameObject or ResourceVersion
// panicked with v, and reports the panic as the failure of that change's
// object: as for an object the cache refuses, the cache holds what it held
// before, and no handler hears of the change. The function that recovered
// must call it (see panicked).
func (inf *Informer[K, T]) undoApplying(v any) {
	a := inf.applying
	inf.applying = applyCall[K, T]{}
	err := &ObjectError{Key: fmt.Sprint(a.key), Err: fmt.Errorf("mirror: %v: %w", a.fn, panicked(v))}
	// a.old was stored, so its key and index values compute.
	_, _, _ = inf.cache.Set(a.key, a.old)
	inf.applyErrors.Add(1)
	inf.report(err)
}

// applyDelete removes key from the cache and notifies the handlers of the
// Deleted delta d, with origin. keyOnly says that d's object holds only
// the key.
func (inf *Informer[K, T]) applyDelete(key K, d Delta[T], keyOnly bool, origin Origin) {
	old, existed := inf.cache.DeleteKey(key)
	if !existed {
		// Never applied here, so no handler has seen it: there is
		// nothing to delete. (The in-order queue relies on this; it
		// queues deletes without knowing the cache.)
		return
	}
	obj := d.Object
	if d.Tombstone || keyOnly {
		// The cache holds the last state this side applied. For a
		// deletion the watch saw, that is the final state: every
		// earlier change to the key was applied before it.
		obj = old
	}
	inf.proc.distribute(notification[K, T]{kind: notifyDelete, key: key, obj: obj, unknown: d.Tombstone, origin: origin}, false)
}

// listOrigin is the origin of what a list finds: the initial list's if
// the list completes the informer's first sync (initial), a relist's
// otherwise.
func listOrigin(initial bool) Origin {
	if initial {
		return OriginInitialList
	}
	return OriginRelist
}

// deltaOrigin is the origin of a DeltaFIFO's delta d, popped with
// isInInitialList: the watch's for a change or deletion it observed, a
// list's for what a list queued (Replaced, a tombstone), a resync's for
// Sync. An eviction's tombstone looks like a list's, and is taken for one.
func deltaOrigin[T any](d Delta[T], isInInitialList bool) Origin {
	switch {
	case d.Type == Sync:
		return OriginResync
	case d.Type == Replaced, d.Tombstone:
		return listOrigin(isInInitialList)
	}
	return OriginLive
}

func (inf *Informer[K, T]) markSynced() {
	if inf.synced.Load() {
		return
	}
	inf.syncedOnce.Do(func() {
		inf.synced.Store(true)
		close(inf.syncedCh)
	})
	inf.proc.signalSynced()
}

func (inf *Informer[K, T]) checkFIFOSynced() {
	// HasSynced alone turns true as the last initial key is popped,
	// before applyDeltas has applied it; processedInitial waits for that.
	if inf.synced.Load() || !inf.fifo.processedInitial() {
		return
	}
	// Under applyMu, the listeners have been told of every notification
	// the initial list made.
	inf.applyMu.Lock()
	defer inf.applyMu.Unlock()
	inf.markSynced()
}

// fifoSyncWatch is the Reflector's view of a DeltaFIFO: it notices when
// the queue becomes synced without anything to pop (an empty first list).
type fifoSyncWatch[K comparable, T any] struct{ inf *Informer[K, T] }

func (s fifoSyncWatch[K, T]) Add(obj T) error { return s.after(s.inf.fifo.Add(obj)) }

func (s fifoSyncWatch[K, T]) Update(obj T) error { return s.after(s.inf.fifo.Update(obj)) }

func (s fifoSyncWatch[K, T]) Delete(obj T) error { return s.after(s.inf.fifo.Delete(obj)) }

func (s fifoSyncWatch[K, T]) Resync() error { return s.inf.fifo.Resync() }

func (s fifoSyncWatch[K, T]) Replace(list []T, rv string) error {
	return s.after(s.inf.fifo.Replace(list, rv))
}

func (s fifoSyncWatch[K, T]) listChunk(items []T) error { return s.inf.fifo.listChunk(items) }

func (s fifoSyncWatch[K, T]) listDone(rv string) error { return s.after(s.inf.fifo.listDone(rv)) }

// event is the Reflector's path for every watch event. An addition or an
// update queues its key, so the pop that applies it publishes the version
// (one whose key or transform fails leaves it to the next event); only
// the other events, which may queue nothing, look for a drained queue.
func (s fifoSyncWatch[K, T]) event(ev Event[T]) error {
	err := s.inf.fifo.event(ev)
	if ev.Type == EventAdded || ev.Type == EventModified {
		s.inf.checkFIFOSynced()
		return err
	}
	return s.after(err)
}

func (s fifoSyncWatch[K, T]) listFailed() { s.inf.fifo.listFailed() }

func (s fifoSyncWatch[K, T]) DeleteKeyOnly(obj T) error {
	return s.after(s.inf.fifo.DeleteKeyOnly(obj))
}
func (s fifoSyncWatch[K, T]) Evict(obj T) error { return s.after(s.inf.fifo.Evict(obj)) }

func (s fifoSyncWatch[K, T]) after(err error) error {
	s.inf.checkFIFOSynced()
	// A bookmark, or a list that found nothing changed, reaches a queue
	// with nothing to pop: the cache is at its version all the same.
	f := s.inf.fifo
	f.mu.Lock()
	if v, drained := f.drainedVersionLocked(); drained && v != "" {
		// No pop is in progress while the lock is held.
		s.inf.versions.publish(v, false)
	}
	f.mu.Unlock()
	return err
}
