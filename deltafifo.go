package mirror

import (
	"slices"

	"github.com/listwatch/mirror/source"
)

// PopFunc processes one popped key: its deltas, oldest first, and whether
// they belong to the initial list (see DeltaFIFO.HasSynced). It owns
// deltas, unless it returns an error wrapping ErrRequeue.
type PopFunc[K comparable, T any] func(key K, deltas Deltas[T], isInInitialList bool) error

// QueuedDeltas is one popped key in a batch (see DeltaFIFO.PopBatch).
type QueuedDeltas[K comparable, T any] struct {
	// Key is the popped key.
	Key K
	// Deltas are its pending deltas, oldest first; the consumer may keep
	// them.
	Deltas Deltas[T]
	// IsInInitialList reports that they belong to the initial list.
	IsInInitialList bool
}

// TransformFunc rewrites an object as it enters a DeltaFIFO, typically to
// drop fields the consumer does not need. It runs once on each object
// given to Add, Update, Delete or Replace, never on objects the queue or
// KnownObjects already held. It may modify obj in place. It runs with the
// queue's lock held, so it must not call the queue. An error or a panic
// skips the object.
type TransformFunc[T any] func(obj T) (T, error)

// DeltaFIFOOptions configures a DeltaFIFO. Only KeyFunc is required.
type DeltaFIFOOptions[K comparable, T any] struct {
	// KeyFunc computes the key of an object. Required: NewDeltaFIFO
	// panics without it.
	KeyFunc KeyFunc[K, T]

	// KnownObjects is what the consumer already knows, normally its
	// cache. With it, Delete drops deletions of unknown keys, Replace
	// makes tombstones for known keys the list lacks, and Resync offers
	// known objects again; without it, only queued keys count and Resync
	// does nothing.
	KnownObjects KnownObjects[K, T]

	// EmitDeltaTypeReplaced makes Replace queue Replaced deltas, not Sync.
	EmitDeltaTypeReplaced bool

	// Transform, if set, rewrites each object as it enters the queue.
	Transform TransformFunc[T]
}

// DeltaFIFO is a queue that keeps, per key, every change (delta) since
// the key was last popped, as client-go's DeltaFIFO. A key is queued once
// however many deltas it gathers, and keys are popped in order of first
// arrival, with all their deltas at once. A Reflector is the usual
// producer. Create it with NewDeltaFIFO; it is safe for concurrent use.
type DeltaFIFO[K comparable, T any] struct {
	queueBase

	// q holds the queued keys, each once, in order of first arrival, with
	// their pending deltas (never empty).
	q keyedQueue[K, pending[T]]

	keyFunc      KeyFunc[K, T]
	known        KnownObjects[K, T]
	listedType   DeltaType // Sync or Replaced
	transform    TransformFunc[T]
	replaceEpoch uint64 // numbers Replace calls, see pending.listedIn

	// listing is the list an informer's Reflector is handing over in
	// chunks (see listApplier).
	listing fifoListing[T]

	batch []QueuedDeltas[K, T] // PopBatch's buffer, reused under the lock
}

type pending[T any] struct {
	deltas Deltas[T]
	// listedIn is the replaceEpoch of the last Replace that listed the
	// key. It spares Replace a set of the listed keys: while Replace runs
	// (with the lock held), a key was listed by it iff listedIn equals
	// the current epoch.
	listedIn uint64
}

// NewDeltaFIFO returns an empty DeltaFIFO configured by opts. It panics
// if opts.KeyFunc is nil.
func NewDeltaFIFO[K comparable, T any](opts DeltaFIFOOptions[K, T]) *DeltaFIFO[K, T] {
	if opts.KeyFunc == nil {
		panic("mirror: NewDeltaFIFO without a KeyFunc")
	}
	f := &DeltaFIFO[K, T]{
		keyFunc:    opts.KeyFunc,
		known:      opts.KnownObjects,
		listedType: Sync,
		transform:  opts.Transform,
	}
	if opts.EmitDeltaTypeReplaced {
		f.listedType = Replaced
	}
	f.init()
	return f
}

var (
	_ ReflectorStore[int] = (*DeltaFIFO[string, int])(nil)
	_ KeyOnlyDeleter[int] = (*DeltaFIFO[string, int])(nil)
	_ Evicter[int]        = (*DeltaFIFO[string, int])(nil)
)

// Add queues an Added delta for obj. If the key function (*KeyError) or
// the transformer fails or panics, it returns the error and changes
// nothing.
func (f *DeltaFIFO[K, T]) Add(obj T) error { return f.add(Added, obj) }

// Update queues an Updated delta for obj, like Add.
func (f *DeltaFIFO[K, T]) Update(obj T) error { return f.add(Updated, obj) }

// add queues a change of obj.
func (f *DeltaFIFO[K, T]) add(typ DeltaType, obj T) (err error) {
	var at calling
	var key K
	f.mu.Lock()
	defer func() {
		// One deferred call for the lock and a panic of the key function
		// or the transformer: a second would cost every call.
		if at.fn != noCallback {
			if v := recover(); v != nil {
				err = callbackFailure(at.fn, key, obj, v)
			}
		}
		f.mu.Unlock()
	}()
	at.fn = inKeyFunc
	key, err = keyOf(f.keyFunc, obj)
	at.fn = noCallback
	if err != nil {
		return err
	}
	if obj, err = f.transformLocked(key, obj, &at); err != nil {
		return err
	}
	f.initial.populateLocked()
	f.queueLocked(key, Delta[T]{Type: typ, Object: obj}, watchRoom)
	return nil
}

// Delete queues a Deleted delta for obj, unless the key is neither queued
// nor in KnownObjects. Of two deletions in a row one is kept: a real
// deletion over a tombstone, and the newer of two real ones (client-go
// keeps the older). If the key function fails or panics it returns the
// *KeyError and changes nothing; if the transformer does, the deletion is
// still queued, as DeleteKeyOnly would, and the error returned.
func (f *DeltaFIFO[K, T]) Delete(obj T) error { return f.delete(obj, false, false) }

// DeleteKeyOnly is Delete for an obj that only identifies the object (see
// Event.KeyOnly): the delta carries the last state the queue knows, the
// newest queued object or else the one in KnownObjects.
func (f *DeltaFIFO[K, T]) DeleteKeyOnly(obj T) error { return f.delete(obj, true, false) }

// Evict is DeleteKeyOnly queueing a tombstone (see Evicter).
func (f *DeltaFIFO[K, T]) Evict(obj T) error { return f.delete(obj, true, true) }

// delete queues a deletion of obj.
func (f *DeltaFIFO[K, T]) delete(obj T, keyOnly, tombstone bool) (err error) {
	var at calling
	var key K
	var last T
	f.mu.Lock()
	defer func() {
		// As in add.
		if at.fn != noCallback {
			if v := recover(); v != nil {
				err = callbackFailure(at.fn, key, obj, v)
				if at.fn == inTransform {
					// As when the transformer fails: the deletion is
					// queued with the last state the queue knows.
					f.queueLocked(key, Delta[T]{Type: Deleted, Object: last, FinalStateUnknown: tombstone}, watchRoom)
				}
			}
		}
		f.mu.Unlock()
	}()
	at.fn = inKeyFunc
	key, err = keyOf(f.keyFunc, obj)
	at.fn = noCallback
	if err != nil {
		return err
	}
	f.initial.populateLocked()
	last, ok := f.lastLocked(key)
	if !ok {
		return nil
	}
	if keyOnly {
		if p, queued := f.q.find(key); queued && p.deltas[len(p.deltas)-1].Type == Deleted {
			// The key has left already: a tombstone (a relist lacked
			// it, or its value could not be produced) or a deletion
			// says so. A deletion that names the key alone would only
			// turn that into a claim that the state the queue last
			// knew was seen deleted, when that state was not the one
			// deleted.
			return nil
		}
		obj = last
	} else if obj, err = f.transformLocked(key, obj, &at); err != nil {
		obj = last
	}
	f.queueLocked(key, Delta[T]{Type: Deleted, Object: obj, FinalStateUnknown: tombstone}, watchRoom)
	return err
}

// event queues a watch event from a Reflector (see eventStore).
func (f *DeltaFIFO[K, T]) event(ev source.Event[T]) error {
	switch ev.Type {
	case source.Added:
		return f.add(Added, ev.Object)
	case source.Updated:
		return f.add(Updated, ev.Object)
	case source.Deleted:
		return f.delete(ev.Object, ev.KeyOnly, false)
	case source.Error:
		if ev.KeyOnly {
			return f.delete(ev.Object, true, true)
		}
	}
	// A bookmark, or an error about no object in particular: nothing
	// to queue.
	return nil
}

// lastLocked returns the newest state of key the queue knows: its newest
// queued object, or else its object in KnownObjects.
func (f *DeltaFIFO[K, T]) lastLocked(key K) (T, bool) {
	if p, queued := f.q.find(key); queued {
		return p.deltas[len(p.deltas)-1].Object, true
	}
	if f.known == nil {
		var zero T
		return zero, false
	}
	return f.known.GetByKey(key)
}

// transformLocked applies the transformer, if any, to obj, whose key is
// key. It records in at that the transformer runs.
func (f *DeltaFIFO[K, T]) transformLocked(key K, obj T, at *calling) (T, error) {
	if f.transform == nil {
		return obj, nil
	}
	at.fn = inTransform
	out, err := f.transform(obj)
	at.fn = noCallback
	if err != nil {
		return obj, transformError(key, err)
	}
	return out, nil
}

// Room for deltas that a key's slice gets when the key is queued. When
// the consumer falls behind, which is when the queue's speed matters, a
// key that a watch event queued is likely to change again before it is
// popped; room for a second delta then spares an allocation and a copy,
// for the price of one unused Delta in a key popped with one. A relist
// or a resync queues every key at once, with a delta that is rarely
// followed by another before the pop: those get room for one.
const (
	watchRoom = 2
	listRoom  = 1
)

// queueLocked appends d to key's deltas, queueing the key if needed with
// room for room deltas.
func (f *DeltaFIFO[K, T]) queueLocked(key K, d Delta[T], room int) *pending[T] {
	p, queued := f.q.findOrPush(key)
	if queued {
		p.deltas = appendDelta(p.deltas, d)
	} else {
		p.deltas = append(make(Deltas[T], 0, room), d)
	}
	f.cond.Broadcast()
	return p
}

// appendDelta appends d to ds, except that two deletions in a row collapse
// into one. A watch and a relist can both report one deletion: the watch
// as a real Deleted, the relist as a tombstone. Reporting it twice would
// make consumers handle one deletion twice, so the delta that knows the
// final state wins: a real deletion over a tombstone, the newer of two
// real deletions, and the older of two tombstones (a second tombstone
// adds nothing, as it is built from the same last known object).
func appendDelta[T any](ds Deltas[T], d Delta[T]) Deltas[T] {
	if n := len(ds); n > 0 && d.Type == Deleted && ds[n-1].Type == Deleted {
		if !d.FinalStateUnknown {
			ds[n-1] = d
		}
		return ds
	}
	if n := len(ds); n > 0 && n == cap(ds) {
		// A key that outgrew its room before it is popped is likely a
		// busy one that will gather more: double, to 4 at least.
		ds = slices.Grow(ds, max(n, 4-n))
	}
	return append(ds, d)
}

// AddIfNotPresent queues a copy of deltas (popped earlier) under key,
// unless key is queued: then the newer queued deltas win. Empty deltas
// queue nothing.
func (f *DeltaFIFO[K, T]) AddIfNotPresent(key K, deltas Deltas[T]) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.initial.populateLocked()
	if len(deltas) > 0 {
		f.requeueLocked(key, slices.Clone(deltas))
	}
	return nil
}

// requeueLocked queues deltas under key if key is not queued.
func (f *DeltaFIFO[K, T]) requeueLocked(key K, deltas Deltas[T]) {
	if p, queued := f.q.findOrPush(key); !queued {
		p.deltas = deltas
		f.cond.Broadcast()
	}
}
