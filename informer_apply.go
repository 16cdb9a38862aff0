package mirror

import (
	"context"
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
	defer afterFunc(ctx, inf.queue.interrupt)()
	batch := make([]inOrderEntry[K, T], 0, inf.opts.BatchSize)
	for {
		var err error
		batch, err = inf.queue.popBatch(ctx, inf.opts.BatchSize, batch[:0])
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

// applyEntries applies a batch of the queue's entries. The queue's lock
// is not held:
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
	case entryAdded, entryUpdated:
		inf.applySet(e.key, e.obj, false, false, OriginLive)
	case entryDeleted:
		inf.applyDelete(e.key, e.obj, false, false)
	case entryDeletedKeyOnly:
		inf.applyDelete(e.key, e.obj, true, false)
	case entryEvicted:
		inf.applyDelete(e.key, e.obj, true, true)
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

// listing is the list whose chunks the queue is handing over.
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
	inf.halfListed.begin()
	inf.applyPart(part, initialList && !inf.synced.Load())
}

// applyPart applies the objects of a list chunk.
func (inf *Informer[K, T]) applyPart(part *listPart[K, T], initial bool) {
	for i := 0; i < len(part.objs); {
		i = inf.applyPartFrom(part, i, initial)
	}
}

// applyPartFrom applies the objects of part from the i-th on, as
// applyPart, and returns len(part.objs). If SameObject or ResourceVersion
// panics on one, it undoes that object's change (see undoApplying) and
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
		inf.applySet(part.keys[next], part.objs[next], true, initial, listOrigin(initial))
	}
	return next
}

// applyListEnd completes the list in progress: a staged list is applied
// as one step, a direct one is already applied.
func (inf *Informer[K, T]) applyListEnd(initial bool) {
	l := inf.listing
	inf.listing = nil
	// Whole from here on, whatever an earlier list left half applied.
	defer inf.halfListed.end()
	if l == nil {
		l = &listing[K, T]{} // an empty list
	}
	if !l.direct && (l.diff == nil || !inf.applyDiffed(&l.staged, l.diff, initial)) {
		inf.applyReplace(&l.staged, initial)
	}
	if inf.behind != nil {
		inf.deletedSinceCheckpoint(listOrigin(initial))
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

// applySet stores obj under key and notifies the handlers, with origin,
// which identity changes keep (see SameObject). listed says that a list
// found obj, which ResourceVersion may find unchanged; initial that the
// list completes the informer's first sync.
func (inf *Informer[K, T]) applySet(key K, obj T, listed, initial bool, origin Origin) {
	old, existed, err := inf.cache.Set(key, obj)
	if err != nil {
		inf.applyErrors.Add(1)
		inf.report(err)
		return
	}
	if !existed && listed && inf.behind != nil {
		// The listeners following the checkpoint are told what changed
		// since, the others are handed the state listed.
		inf.proc.distribute(notification[K, T]{kind: notifyAdd, key: key, obj: obj, initial: initial, origin: origin, audience: audienceState}, false)
		inf.listedSinceCheckpoint(key, obj, initial, origin)
		return
	}
	if existed && inf.opts.SameObject != nil {
		inf.applying = applyCall[K, T]{fn: inSameObject, key: key, old: old}
		same := inf.opts.SameObject(old, obj)
		inf.applying.fn = noCallback
		if !same {
			// The key now names another object: the one cached left
			// the source unseen (deleted, then the key re-created), so
			// an update from one to the other would be a lie.
			inf.proc.distribute(notification[K, T]{kind: notifyDelete, key: key, obj: old, unknown: true, origin: origin}, false)
			existed = false
		}
	}
	if !existed {
		inf.proc.distribute(notification[K, T]{kind: notifyAdd, key: key, obj: obj, initial: initial, origin: origin}, false)
		return
	}
	unchanged := false
	if listed && inf.opts.ResourceVersion != nil {
		inf.applying = applyCall[K, T]{fn: inResourceVersion, key: key, old: old}
		unchanged = inf.opts.ResourceVersion(old) == inf.opts.ResourceVersion(obj)
		inf.applying.fn = noCallback
	}
	if unchanged {
		// Offered, as a resync, to the handlers due for one.
		origin = OriginResync
	}
	inf.proc.distribute(notification[K, T]{kind: notifyUpdate, key: key, old: old, obj: obj, origin: origin}, unchanged)
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

// applyDelete removes key from the cache and notifies the handlers of a
// deletion the watch saw, whose last state is obj. keyOnly says that obj
// holds only the key; unknown that the deletion was not seen but
// inferred (an eviction: see Evicter), so its final state is unknown.
// Either way the handlers get the state the cache held instead.
func (inf *Informer[K, T]) applyDelete(key K, obj T, keyOnly, unknown bool) {
	old, existed := inf.cache.DeleteKey(key)
	if !existed {
		// Never applied here, so no handler has seen it: there is
		// nothing to delete. (The queue relies on this; it queues
		// deletes without knowing the cache.)
		return
	}
	if keyOnly || unknown {
		// The cache holds the last state this side applied. For a
		// deletion the watch saw, that is the final state: every
		// earlier change to the key was applied before it.
		obj = old
	}
	inf.proc.distribute(notification[K, T]{kind: notifyDelete, key: key, obj: obj, unknown: unknown, origin: OriginLive}, false)
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
