package mirror

import (
	"context"
	"errors"
	"iter"
	"sync"
	"sync/atomic"

	"github.com/listwatch/mirror/source"
)

// inOrderQueue is the informer's queue: one entry per change, in
// the order the source produced them, so the cache and the handlers see
// changes to different keys in source order (a per-key queue such as
// DeltaFIFO reorders them by first arrival of the key).
//
// A relist or a resync is a single entry, applied by the consumer as one
// step against the cache at the moment it is applied. The queue therefore
// never consults the cache, and its lock is never held while the consumer
// applies a batch: a tombstone is computed from a cache that has applied
// every earlier change, so no delete is lost or invented.
type inOrderQueue[K comparable, T any] struct {
	keyFunc   KeyFunc[K, T]
	transform TransformFunc[T]

	mu   sync.Mutex
	cond sync.Cond
	// entries are in chunks: a burst allocates only the chunks it fills,
	// copies nothing as it grows, and gives them back as it drains.
	entries seqQueue[inOrderEntry[K, T]]
	// pushed is set once anything was queued; the first entry completes
	// the initial sync if it is not a relist, as in DeltaFIFO.
	pushed bool
	// resyncQueued is set while a resync entry waits: the one waiting
	// serves every handler due when it is applied (see resyncLocked), so
	// a second would find none.
	resyncQueued bool
	// changed is set once a change or a resync was queued, and listed,
	// unless changed was set first, once a list's chunk, end or abort
	// was: the list came first (see startFromList). started is set by
	// startFromList.
	changed, started bool
	listed           atomic.Bool
	// adds counts the entries ever queued; arrivals samples when.
	adds     uint64
	arrivals arrivals
}

type entryKind uint8

const (
	entryAdded entryKind = iota + 1
	entryUpdated
	entryDeleted
	// entryDeletedKeyOnly is a deletion whose object holds only the key;
	// the informer delivers the state its cache held instead.
	entryDeletedKeyOnly
	// entryEvicted drops a key the source holds in a state the mirror
	// cannot represent; the informer delivers a tombstone with the state
	// its cache held.
	entryEvicted
	// entryListChunk is a chunk of a list, entryListEnd completes the
	// list its chunks make, entryListAbort abandons it (see listApplier).
	entryListChunk
	entryListEnd
	entryListAbort
	entryResync
	// entryProgress only carries a version: a bookmark's.
	entryProgress
	// entryResumed completes the sync of an informer resumed from a
	// checkpoint: the watch from the checkpoint's version is open.
	entryResumed
)

// inOrderEntry is one queued change, list chunk, list end or abort, or
// resync.
type inOrderEntry[K comparable, T any] struct {
	kind entryKind
	// completesSync marks the entry whose application makes the informer
	// synced.
	completesSync bool
	// initialList marks the chunks of a list that, if it completes, will
	// complete the sync: their objects are the initial list's.
	initialList bool
	// key and obj are a change's: an entry of a kind up to
	// entryEvicted. part is a list chunk's, behind a pointer so that it
	// does not make every change's entry larger.
	key  K
	obj  T
	part *listPart[K, T]
	// rv is the source's version once the entry is applied: the event's,
	// or the list's for its end; "" if the entry does not say. more says
	// that more of the change at rv follows (Event.More).
	rv   string
	more bool
}

// listPart is one chunk of a list as the queue prepared it: the objects
// as the source listed them, with their keys beside them. Keeping the
// source's slice, and the keys beside it rather than in (key, object)
// pairs, spares copying every object of a list once more.
type listPart[K comparable, T any] struct {
	// objs are the objects, transformed if the queue transforms them.
	objs []T
	// keys[i] is the key of objs[i], unless skip lists i: the key or the
	// transform of the objects skip lists, in increasing order, failed,
	// and they are left out.
	keys []K
	skip []int
	// kept are the keys of the listed objects whose transform failed: the
	// cache keeps what it holds for them rather than finding them gone,
	// as a DeltaFIFO keeps them.
	kept []K
}

// skipped leaves out the object at i, whose key is k if known; its
// transform failed if kept, and the cache then keeps what it holds for k.
func (c *listPart[K, T]) skipped(i int, k K, kept bool) {
	c.skip = append(c.skip, i)
	if kept {
		c.kept = append(c.kept, k)
	}
}

// len returns the number of objects c applies.
func (c *listPart[K, T]) len() int { return len(c.keys) - len(c.skip) }

// all yields every key and object that c applies, in list order.
func (c *listPart[K, T]) all() iter.Seq2[K, T] {
	return func(yield func(K, T) bool) {
		skip := c.skip
		for i, obj := range c.objs {
			if len(skip) > 0 && skip[0] == i {
				skip = skip[1:]
			} else if !yield(c.keys[i], obj) {
				return
			}
		}
	}
}

// relist is a whole list that the informer applies as one step: its
// chunks, in order.
type relist[K comparable, T any] struct {
	parts []*listPart[K, T]
	n     int // objects the parts apply
}

// add appends the next chunk.
func (l *relist[K, T]) add(c *listPart[K, T]) {
	l.parts = append(l.parts, c)
	l.n += c.len()
}

// all yields every key and object that l applies, in list order.
func (l *relist[K, T]) all() iter.Seq2[K, T] {
	return func(yield func(K, T) bool) {
		for _, c := range l.parts {
			for k, obj := range c.all() {
				if !yield(k, obj) {
					return
				}
			}
		}
	}
}

func newInOrderQueue[K comparable, T any](keyFunc KeyFunc[K, T], transform TransformFunc[T]) *inOrderQueue[K, T] {
	q := &inOrderQueue[K, T]{keyFunc: keyFunc, transform: transform}
	q.cond.L = &q.mu
	return q
}

var (
	_ ReflectorStore[int] = (*inOrderQueue[int, int])(nil)
	_ KeyOnlyDeleter[int] = (*inOrderQueue[int, int])(nil)
	_ Evicter[int]        = (*inOrderQueue[int, int])(nil)
	_ listApplier[int]    = (*inOrderQueue[int, int])(nil)
	_ eventStore[int]     = (*inOrderQueue[int, int])(nil)
)

// discard drops every queued entry, and the queue starts again as a new
// one: for an informer whose Reflector, started before its checkpoint was
// found unusable, queued changes to a state the cache never held (see
// earlyReflector).
func (q *inOrderQueue[K, T]) discard() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.entries = seqQueue[inOrderEntry[K, T]]{}
	q.pushed, q.resyncQueued = false, false
	q.changed, q.started = false, false
	q.listed.Store(false)
}

// listNext records that the Reflector, resumed from a checkpoint, found
// its version gone and is about to list: if nothing but the resumed mark
// or a bookmark is queued yet, that list will be the first thing queued
// (see startFromList).
func (q *inOrderQueue[K, T]) listNext() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.changed {
		q.listed.Store(true)
	}
}

// startFromList makes the first list queued the informer's first, and
// reports whether it did: if the queue holds a list before any change or
// resync, it drops what it holds before the list (the resumed mark, a
// bookmark: about the checkpoint's state, which the cache will not hold),
// marks the list's chunks initial and its end, once queued, as completing
// the sync, as for an informer that starts with a list. An informer
// resumed from a checkpoint whose version the source no longer has calls
// it while it loads (see checkpointSeam.listFirst), at most until it
// returns true.
func (q *inOrderQueue[K, T]) startFromList() bool {
	if !q.listed.Load() {
		return false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.started {
		return true
	}
	q.started = true
	var kept seqQueue[inOrderEntry[K, T]]
	inList, ended := false, false
	for q.entries.len() > 0 {
		e := q.entries.pop()
		switch e.kind {
		case entryResumed, entryProgress:
			if !inList {
				continue
			}
		case entryListChunk:
			inList = true
			e.initialList = !ended
		case entryListEnd:
			inList = true
			if !ended {
				e.completesSync, ended = true, true
			}
		case entryListAbort:
			inList = true
		}
		kept.push(e)
	}
	q.entries = kept
	q.pushed = ended
	return true
}

// Add queues an addition.
func (q *inOrderQueue[K, T]) Add(obj T) error { return q.queueChange(entryAdded, obj, position{}) }

// Update queues an update.
func (q *inOrderQueue[K, T]) Update(obj T) error { return q.queueChange(entryUpdated, obj, position{}) }

// Delete queues a deletion. Whether the key is known is decided when it
// is applied.
func (q *inOrderQueue[K, T]) Delete(obj T) error { return q.queueChange(entryDeleted, obj, position{}) }

// DeleteKeyOnly queues a deletion whose object holds only the key
// (see Event.KeyOnly). It is not transformed: a transform may need more.
func (q *inOrderQueue[K, T]) DeleteKeyOnly(obj T) error {
	return q.queueKeyOnly(entryDeletedKeyOnly, obj, position{})
}

// Evict queues the eviction of the key of obj, which holds only what
// identifies it (see Evicter). Whether the key is known is decided when it
// is applied.
func (q *inOrderQueue[K, T]) Evict(obj T) error { return q.queueKeyOnly(entryEvicted, obj, position{}) }

// event queues a watch event from the Reflector with its version (see
// eventStore).
func (q *inOrderQueue[K, T]) event(ev source.Event[T]) error {
	switch ev.Type {
	case source.Added:
		return q.queueChange(entryAdded, ev.Object, at(ev))
	case source.Updated:
		return q.queueChange(entryUpdated, ev.Object, at(ev))
	case source.Deleted:
		if ev.KeyOnly {
			return q.queueKeyOnly(entryDeletedKeyOnly, ev.Object, at(ev))
		}
		return q.queueChange(entryDeleted, ev.Object, at(ev))
	case source.Error:
		if ev.KeyOnly {
			return q.queueKeyOnly(entryEvicted, ev.Object, at(ev))
		}
	}
	// A bookmark, or an error about no object in particular: progress.
	if ev.ResourceVersion != "" {
		q.push(inOrderEntry[K, T]{kind: entryProgress, rv: ev.ResourceVersion, more: ev.More})
	}
	return nil
}

// queueKeyOnly queues a deletion or eviction whose object holds only the
// key; it is not transformed, as a transform may need more.
func (q *inOrderQueue[K, T]) queueKeyOnly(kind entryKind, obj T, pos position) (err error) {
	var at calling
	defer func() {
		// push defers nothing, so that this is the one deferred call
		// of a change: a second would cost every change.
		if at.fn != noCallback {
			if v := recover(); v != nil {
				err = q.failed(kind, *new(K), false, pos, callbackFailure(at.fn, nil, obj, v))
			}
		}
	}()
	at.fn = inKeyFunc
	k, err := keyOf(q.keyFunc, obj)
	at.fn = noCallback
	if err != nil {
		q.progress(pos)
		return err
	}
	e := inOrderEntry[K, T]{kind: kind, key: k, rv: pos.rv, more: pos.more}
	if kind == entryDeletedKeyOnly {
		e.obj = obj
	}
	q.push(e)
	return nil
}

// transformed applies the transform, if any, to obj, whose key is k, as
// DeltaFIFO does. It records in at that the transform runs.
func (q *inOrderQueue[K, T]) transformed(k K, obj T, at *calling) (T, error) {
	if q.transform == nil {
		return obj, nil
	}
	at.fn = inTransform
	out, err := q.transform(obj)
	at.fn = noCallback
	if err != nil {
		return obj, transformError(k, err)
	}
	return out, nil
}

// queueChange queues a change of obj. A change whose key fails is left
// out, and so is an addition or update whose transform fails; a deletion
// whose transform fails is queued with the key alone, as DeleteKeyOnly
// queues it, since the object is gone whatever its last state looked like.
// Either way the error is returned. A key function or transform that
// panics fails (see PanicError).
func (q *inOrderQueue[K, T]) queueChange(kind entryKind, obj T, pos position) (err error) {
	var at calling
	var k K
	defer func() {
		// As in queueKeyOnly.
		if at.fn != noCallback {
			if v := recover(); v != nil {
				err = q.failed(kind, k, at.fn == inTransform, pos, callbackFailure(at.fn, k, obj, v))
			}
		}
	}()
	at.fn = inKeyFunc
	k, err = keyOf(q.keyFunc, obj)
	at.fn = noCallback
	if err != nil {
		return q.failed(kind, k, false, pos, err)
	}
	if obj, err = q.transformed(k, obj, &at); err != nil {
		return q.failed(kind, k, true, pos, err)
	}
	q.push(inOrderEntry[K, T]{kind: kind, key: k, obj: obj, rv: pos.rv, more: pos.more})
	return nil
}

// failed queues what is left of a change of kind at pos whose key or,
// if byTransform, transform failed with err, and returns err. A key
// function's failure leaves the change out; a transform's leaves out an
// addition or update, and makes a deletion one of the key k alone.
func (q *inOrderQueue[K, T]) failed(kind entryKind, k K, byTransform bool, pos position, err error) error {
	if kind == entryDeleted && byTransform {
		q.push(inOrderEntry[K, T]{kind: entryDeletedKeyOnly, key: k, rv: pos.rv, more: pos.more})
	} else {
		q.progress(pos)
	}
	return err
}

// progress queues the position of an event whose change is left out, so
// that the cache still reaches the event's version.
func (q *inOrderQueue[K, T]) progress(pos position) {
	if pos.rv != "" {
		q.push(inOrderEntry[K, T]{kind: entryProgress, rv: pos.rv, more: pos.more})
	}
}

// Replace queues the whole list: one chunk, then its end. Objects whose
// key or transform fails or panics are left out and reported; the rest are
// queued.
// The cached state of a key whose object failed its transform is kept.
func (q *inOrderQueue[K, T]) Replace(list []T, rv string) error {
	err := q.listChunk(list)
	return errors.Join(err, q.listDone(rv))
}

// listChunk queues the next chunk of a list (see listApplier) with its
// keys, computed here, on the producer's goroutine, rather than when the
// consumer applies it. Objects whose key or transform fails or panics are
// left out and reported. It keeps items, which it does not change.
func (q *inOrderQueue[K, T]) listChunk(items []T) error {
	c := &listPart[K, T]{objs: items, keys: make([]K, len(items))}
	if q.transform != nil {
		c.objs = make([]T, len(items))
	}
	var errs []error
	for i := 0; i < len(items); {
		i = q.prepare(c, items, i, &errs)
	}
	q.push(inOrderEntry[K, T]{kind: entryListChunk, part: c})
	return errors.Join(errs...)
}

// prepare fills c with the keys and transformed objects of items[i:],
// leaving out those whose key or transform fails and appending their
// errors to errs. It returns len(items), or, if the key function or the
// transform panics on an item, the position after it, which it leaves
// out; the caller goes on from there. One deferred call per chunk, not per
// object.
func (q *inOrderQueue[K, T]) prepare(c *listPart[K, T], items []T, i int, errs *[]error) (next int) {
	var at calling
	var k K
	defer func() {
		if at.fn != noCallback {
			if v := recover(); v != nil {
				*errs = append(*errs, callbackFailure(at.fn, k, items[next], v))
				c.skipped(next, k, at.fn == inTransform)
				next++
			}
		}
	}()
	for next = i; next < len(items); next++ {
		obj := items[next]
		var err error
		at.fn = inKeyFunc
		k, err = keyOf(q.keyFunc, obj)
		at.fn = noCallback
		if err != nil {
			*errs = append(*errs, err)
			c.skipped(next, k, false)
			continue
		}
		if obj, err = q.transformed(k, obj, &at); err != nil {
			*errs = append(*errs, err)
			c.skipped(next, k, true)
			continue
		}
		c.keys[next] = k
		if q.transform != nil {
			c.objs[next] = obj
		}
	}
	return next
}

// listDone queues the end of the list whose chunks were queued since the
// last end or abort (see listApplier).
func (q *inOrderQueue[K, T]) listDone(rv string) error {
	q.push(inOrderEntry[K, T]{kind: entryListEnd, rv: rv})
	return nil
}

// listFailed queues the abort of the list in progress (see listApplier).
func (q *inOrderQueue[K, T]) listFailed() {
	q.push(inOrderEntry[K, T]{kind: entryListAbort})
}

// Resync queues a resync entry unless one is already waiting. The
// informer's resync loop calls it; the entry's round is decided when it
// is applied.
func (q *inOrderQueue[K, T]) Resync() error {
	q.mu.Lock()
	queued := q.resyncQueued
	q.mu.Unlock()
	if !queued {
		q.push(inOrderEntry[K, T]{kind: entryResync})
	}
	return nil
}

// push queues e. It defers nothing (see queueChange); nothing it does
// can panic.
func (q *inOrderQueue[K, T]) push(e inOrderEntry[K, T]) {
	q.mu.Lock()
	switch e.kind {
	case entryListChunk, entryListEnd, entryListAbort:
		if !q.changed {
			q.listed.Store(true)
		}
	case entryResumed, entryProgress:
	default:
		q.changed = true
	}
	switch {
	case e.kind == entryListChunk:
		// A list completes the sync with its end, not before.
		e.initialList = !q.pushed
	case e.kind == entryListAbort, e.kind == entryProgress:
	case !q.pushed:
		q.pushed = true
		e.completesSync = true
	}
	if e.kind == entryResync {
		if q.resyncQueued {
			q.mu.Unlock()
			return
		}
		q.resyncQueued = true
	}
	q.entries.push(e)
	q.adds++
	q.arrivals.queued(q.adds)
	q.cond.Signal()
	q.mu.Unlock()
}

// stats returns the number of entries waiting and of entries ever queued.
func (q *inOrderQueue[K, T]) stats() (depth int, adds int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.entries.len(), int64(q.adds)
}

// interrupt wakes a popBatch waiting on an empty queue, so that it sees
// its context has ended. The consumer arranges for it to run when the
// context ends (context.AfterFunc), once, rather than on every call.
func (q *inOrderQueue[K, T]) interrupt() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.cond.Broadcast()
}

// popBatch waits for at least one entry and appends up to max entries to
// dst. It returns ctx.Err() when ctx ends, provided interrupt runs then.
// The informer stops its queue by ending the context, so there is no
// Close.
func (q *inOrderQueue[K, T]) popBatch(ctx context.Context, max int, dst []inOrderEntry[K, T]) ([]inOrderEntry[K, T], error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for q.entries.len() == 0 {
		if err := ctx.Err(); err != nil {
			return dst, err
		}
		q.cond.Wait()
	}
	for range min(max, q.entries.len()) {
		e := q.entries.pop()
		if e.kind == entryResync {
			q.resyncQueued = false
		}
		dst = append(dst, e)
	}
	return dst, nil
}
