package mirror

import (
	"errors"
)

// fifoListing is a list that a DeltaFIFO takes chunk by chunk.
type fifoListing[T any] struct {
	active bool
	// streaming is set if the queue and KnownObjects were both empty when
	// the list began: each chunk is then queued as it comes, so that the
	// consumer can move it to its cache while the rest is read. Such a
	// list can make no tombstone (nothing was known or queued that it
	// could find gone), so it needs no record of the keys it listed once
	// they are popped. Otherwise the chunks are kept and applied by one
	// Replace at the end.
	streaming bool
	chunks    [][]T
}

// Replace records a relist: list is the source's whole content (the
// version is not used). It queues a Sync delta (Replaced with
// EmitDeltaTypeReplaced) for each listed object, then a tombstone for
// every queued or known key the list lacks, carrying the last object the
// queue knows; a tombstone right after a queued deletion is dropped. Of
// two real deletions in a row the newer is kept (client-go keeps the
// older). An object whose key or transform fails or panics is skipped (a
// failed transform's key still counts as listed) and the failures are
// returned joined.
func (f *DeltaFIFO[K, T]) Replace(list []T, _ string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.replaceLocked([][]T{list})
}

// replaceLocked is Replace of the list made of chunks.
func (f *DeltaFIFO[K, T]) replaceLocked(chunks [][]T) error {
	var errs []error
	var failed map[K]struct{} // listed keys whose transform failed; rare
	f.replaceEpoch++
	epoch := f.replaceEpoch
	n := 0
	for _, c := range chunks {
		n += len(c)
	}
	f.q.reserve(n)
	for _, c := range chunks {
		for i := 0; i < len(c); {
			i = f.listedLocked(c, i, epoch, &failed, &errs)
		}
	}

	f.tombstoneUnlistedLocked(epoch)
	if f.known != nil {
		for key, obj := range f.known.All() {
			if _, queued := f.q.find(key); queued {
				continue // listed, or got its tombstone above
			}
			if _, ok := failed[key]; ok {
				continue
			}
			f.queueLocked(key, Delta[T]{Type: Deleted, Object: obj, FinalStateUnknown: true}, listRoom)
		}
	}

	// Every queued key is now one this Replace listed or tombstoned (or,
	// rarely, one whose transform failed and that was queued already),
	// so the initial list is the whole queue.
	f.initial.replacedLocked(f.q.len())
	return errors.Join(errs...)
}

// listedLocked queues the listed deltas of objs[i:] for the relist
// numbered epoch, appending the errors of the objects it skips to errs. A
// key whose transform fails counts as listed: it is marked so if it is
// queued, and added to *failed otherwise. It returns len(objs), or, if the
// key function or the transformer panics on an object, the position after
// it, and the caller goes on from there: one deferred call per list, not
// per object.
func (f *DeltaFIFO[K, T]) listedLocked(objs []T, i int, epoch uint64, failed *map[K]struct{}, errs *[]error) (next int) {
	var at calling
	var key K
	defer func() {
		if at.fn != noCallback {
			if v := recover(); v != nil {
				*errs = append(*errs, callbackFailure(at.fn, key, objs[next], v))
				if at.fn == inTransform {
					f.transformFailedLocked(key, epoch, failed)
				}
				next++
			}
		}
	}()
	for next = i; next < len(objs); next++ {
		obj := objs[next]
		var err error
		at.fn = inKeyFunc
		key, err = keyOf(f.keyFunc, obj)
		at.fn = noCallback
		if err != nil {
			*errs = append(*errs, err)
			continue
		}
		if obj, err = f.transformLocked(key, obj, &at); err != nil {
			*errs = append(*errs, err)
			f.transformFailedLocked(key, epoch, failed)
			continue
		}
		f.queueLocked(key, Delta[T]{Type: f.listedType, Object: obj}, listRoom).listedIn = epoch
	}
	return next
}

// transformFailedLocked counts key, listed by the relist numbered epoch
// in a state its transform failed on, as listed.
func (f *DeltaFIFO[K, T]) transformFailedLocked(key K, epoch uint64, failed *map[K]struct{}) {
	if p, queued := f.q.find(key); queued {
		p.listedIn = epoch
		return
	}
	if *failed == nil {
		*failed = make(map[K]struct{})
	}
	(*failed)[key] = struct{}{}
}

// tombstoneUnlistedLocked appends a tombstone to every queued key that
// the relist numbered epoch did not list.
func (f *DeltaFIFO[K, T]) tombstoneUnlistedLocked(epoch uint64) {
	for _, p := range f.q.all() {
		if p.listedIn != epoch {
			last := p.deltas[len(p.deltas)-1]
			p.deltas = appendDelta(p.deltas, Delta[T]{Type: Deleted, Object: last.Object, FinalStateUnknown: true})
		}
	}
}

// listChunk takes the next chunk of a list from an informer's Reflector
// (see listApplier). The first chunk of a list decides how the list is
// taken (see fifoListing): a streaming list queues the chunk now, as
// Replace would queue its objects; any other keeps it for listDone.
func (f *DeltaFIFO[K, T]) listChunk(items []T) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := &f.listing
	if !l.active {
		*l = fifoListing[T]{active: true, streaming: f.q.len() == 0 && !f.knowsAnyLocked()}
		if l.streaming {
			f.replaceEpoch++
		}
	}
	if !l.streaming {
		l.chunks = append(l.chunks, items)
		return nil
	}
	var errs []error
	var failed map[K]struct{} // unused: a streaming list makes no tombstones
	queued := f.q.len()
	f.q.reserve(queued + len(items))
	for i := 0; i < len(items); {
		i = f.listedLocked(items, i, f.replaceEpoch, &failed, &errs)
	}
	// Until the list is done, its keys are the initial list's so far.
	f.initial.listedLocked(f.q.len() - queued)
	return errors.Join(errs...)
}

// listDone completes the list whose chunks listChunk took: as Replace of
// the whole list would, but a streaming list has queued its objects
// already and has no tombstone to make (but for keys queued meanwhile by
// something other than the list, which a Reflector does not do).
func (f *DeltaFIFO[K, T]) listDone(rv string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.listing
	f.listing = fifoListing[T]{}
	if !l.streaming {
		return f.replaceLocked(l.chunks)
	}
	f.tombstoneUnlistedLocked(f.replaceEpoch)
	f.initial.populateLocked()
	return nil
}

// listFailed ends the list listChunk was taking without completing it. A
// streaming list leaves what it queued: its keys are still at the source
// as of the list's version, and the next list corrects the rest.
func (f *DeltaFIFO[K, T]) listFailed() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listing = fifoListing[T]{}
}

// knowsAnyLocked reports whether KnownObjects holds any object.
func (f *DeltaFIFO[K, T]) knowsAnyLocked() bool {
	if f.known == nil {
		return false
	}
	for range f.known.All() {
		return true
	}
	return false
}

// Resync queues a Sync delta, carrying the known object, for every key in
// KnownObjects with no pending deltas (a Sync after them would roll the
// consumer back). Without KnownObjects it does nothing. It returns nil.
func (f *DeltaFIFO[K, T]) Resync() error {
	if f.known == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for key, obj := range f.known.All() {
		if _, queued := f.q.find(key); !queued {
			f.queueLocked(key, Delta[T]{Type: Sync, Object: obj}, listRoom)
		}
	}
	return nil
}
