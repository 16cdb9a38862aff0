package mirror

import (
	"context"
	"errors"
	"iter"
	"sync"
	"sync/atomic"
)

// FIFO is a queue that keeps the latest value of each key: an object
// updated several times before it is popped is popped once, with its newest
// value. Keys are popped in the order they were first queued. An object
// deleted before it is popped is never popped.
//
// Use FIFO when the consumer only needs the current state of each object;
// use DeltaFIFO when it needs every change, deletions included.
//
// A FIFO must be created with NewFIFO. It is safe for concurrent use.
type FIFO[K comparable, T any] struct {
	mu   sync.Mutex
	cond sync.Cond // L is &mu; broadcast whenever a key is queued or the queue closes

	// items holds one entry per queued key, and queue holds each of those
	// keys once. An entry whose value was deleted stays queued so that
	// deleting needs no search through the queue; Pop drops it.
	items map[K]fifoItem[T]
	queue keyQueue[K]
	live  int // entries in items that hold a value

	keyFunc KeyFunc[K, T]
	sync    syncState
	closed  bool
}

type fifoItem[T any] struct {
	obj     T
	deleted bool
}

// NewFIFO returns an empty FIFO that keys objects with keyFunc.
// It panics if keyFunc is nil: that is a programming error, not bad data.
func NewFIFO[K comparable, T any](keyFunc KeyFunc[K, T]) *FIFO[K, T] {
	if keyFunc == nil {
		panic("mirror: NewFIFO with a nil KeyFunc")
	}
	f := &FIFO[K, T]{items: make(map[K]fifoItem[T]), keyFunc: keyFunc}
	f.cond.L = &f.mu
	return f
}

var _ Store[string, int] = (*FIFO[string, int])(nil)

// Add stores obj as the value of its key, replacing any value not yet
// popped, and queues the key if it is not queued. A key that stays queued
// keeps its place. If the key function fails, Add returns a *KeyError and
// changes nothing.
func (f *FIFO[K, T]) Add(obj T) error {
	key, err := keyOf(f.keyFunc, obj)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sync.populateLocked()
	f.putLocked(key, obj, true)
	return nil
}

// Update is Add: a FIFO does not tell new objects from changed ones.
func (f *FIFO[K, T]) Update(obj T) error { return f.Add(obj) }

// AddIfNotPresent stores obj and queues its key only if no value is
// stored under that key; it never overwrites a value. A consumer uses it
// to put back an object it failed to process without clobbering a newer
// value a producer stored meanwhile. If the key function fails it returns
// a *KeyError and changes nothing.
func (f *FIFO[K, T]) AddIfNotPresent(obj T) error {
	key, err := keyOf(f.keyFunc, obj)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sync.populateLocked()
	f.putLocked(key, obj, false)
	return nil
}

// putLocked stores obj under key, queueing the key if it is not queued.
// If overwrite is false, an existing value is kept.
func (f *FIFO[K, T]) putLocked(key K, obj T, overwrite bool) {
	it, queued := f.items[key]
	if queued && !it.deleted && !overwrite {
		return
	}
	if !queued {
		f.queue.push(key)
	}
	if !queued || it.deleted {
		f.live++
	}
	f.items[key] = fifoItem[T]{obj: obj}
	f.cond.Broadcast()
}

// Delete removes the value stored under obj's key, so that it is not
// popped. Deleting a key with no value does nothing. If the key function
// fails, Delete returns a *KeyError and changes nothing.
func (f *FIFO[K, T]) Delete(obj T) error {
	key, err := keyOf(f.keyFunc, obj)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sync.populateLocked()
	if it, ok := f.items[key]; ok && !it.deleted {
		// The key stays queued (removing it would mean searching the
		// queue); Pop skips it. Dropping the value lets it be collected.
		f.items[key] = fifoItem[T]{deleted: true}
		f.live--
	}
	return nil
}

// Replace makes list the whole content of the queue. Keys that were queued
// and are listed keep their place; listed keys that were not queued are
// queued after them, in list order; every other key is dropped. Of
// several objects with the same key the last wins. Objects whose key
// cannot be computed are skipped; Replace applies the rest and returns
// the errors joined (each a *KeyError). The version is not used.
func (f *FIFO[K, T]) Replace(list []T, _ string) error {
	var errs []error
	f.mu.Lock()
	defer f.mu.Unlock()
	next := make(map[K]fifoItem[T], len(list))
	for _, obj := range list {
		key, err := keyOf(f.keyFunc, obj)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if _, seen := next[key]; !seen {
			if _, queued := f.items[key]; !queued {
				f.queue.push(key)
				// Mark the key queued in the outgoing map so that a
				// duplicate in list is not queued twice. The map is
				// discarded below.
				f.items[key] = fifoItem[T]{}
			}
		}
		next[key] = fifoItem[T]{obj: obj}
	}
	f.queue.retain(func(k K) bool {
		_, ok := next[k]
		return ok
	})
	f.items = next
	f.live = len(next)
	f.sync.replacedLocked(f.queue.len())
	if f.queue.len() > 0 {
		f.cond.Broadcast()
	}
	return errors.Join(errs...)
}

// Resync queues every stored key that is not queued. A FIFO keeps a value
// only until it is popped, so every stored key is queued already and
// Resync has nothing to do; it exists so that FIFO satisfies
// ReflectorStore, and always returns nil.
func (f *FIFO[K, T]) Resync() error { return nil }

// Get returns the value stored under obj's key, if any. If the key
// function fails it returns a *KeyError.
func (f *FIFO[K, T]) Get(obj T) (T, bool, error) {
	key, err := keyOf(f.keyFunc, obj)
	if err != nil {
		var zero T
		return zero, false, err
	}
	item, ok := f.GetByKey(key)
	return item, ok, nil
}

// GetByKey returns the value stored under key, if any.
func (f *FIFO[K, T]) GetByKey(key K) (T, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	it, ok := f.items[key]
	return it.obj, ok && !it.deleted
}

// List returns every stored value, in the order they will be popped.
func (f *FIFO[K, T]) List() []T {
	f.mu.Lock()
	defer f.mu.Unlock()
	list := make([]T, 0, f.live)
	for _, it := range f.allLocked() {
		list = append(list, it)
	}
	return list
}

// ListKeys returns the key of every stored value, in the order they will
// be popped.
func (f *FIFO[K, T]) ListKeys() []K {
	f.mu.Lock()
	defer f.mu.Unlock()
	keys := make([]K, 0, f.live)
	for k := range f.allLocked() {
		keys = append(keys, k)
	}
	return keys
}

// All yields every key and stored value, in the order they will be
// popped. It holds the FIFO's lock while it yields, so the loop body must
// not call the FIFO's methods.
func (f *FIFO[K, T]) All() iter.Seq2[K, T] {
	return func(yield func(K, T) bool) {
		f.mu.Lock()
		defer f.mu.Unlock()
		for k, obj := range f.allLocked() {
			if !yield(k, obj) {
				return
			}
		}
	}
}

// allLocked yields the queued keys that hold a value, in queue order.
func (f *FIFO[K, T]) allLocked() iter.Seq2[K, T] {
	return func(yield func(K, T) bool) {
		for i := range f.queue.len() {
			k := f.queue.at(i)
			if it := f.items[k]; !it.deleted {
				if !yield(k, it.obj) {
					return
				}
			}
		}
	}
}

// Len returns the number of stored values.
func (f *FIFO[K, T]) Len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.live
}

// Pop waits until a value is queued, removes the oldest and calls process
// with its key, the value, and whether it belongs to the initial list (see
// HasSynced). process runs with the FIFO's lock held, so producers wait
// until it returns and nothing can queue the key meanwhile; process must
// therefore not call the FIFO's methods.
//
// If process returns an error wrapping ErrRequeue, the value is queued
// again, at the back, unless a value was stored under its key meanwhile.
// Pop returns process's error, ctx.Err() if ctx is done (checked first,
// even if values are queued), or ErrClosed once the FIFO is closed and
// empty. Values queued before Close are still handed out.
func (f *FIFO[K, T]) Pop(ctx context.Context, process func(key K, obj T, isInInitialList bool) error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for {
		if err := waitLocked(ctx, &f.cond, &f.queue, &f.closed); err != nil {
			return err
		}
		key := f.queue.pop()
		it := f.items[key]
		delete(f.items, key)
		initial := f.sync.poppedLocked()
		if it.deleted {
			continue
		}
		f.live--
		err := process(key, it.obj, initial)
		if errors.Is(err, ErrRequeue) {
			f.sync.populateLocked()
			f.putLocked(key, it.obj, false)
		}
		return err
	}
}

// HasSynced reports whether the FIFO has handed out its initial content:
// every key queued by the first Replace has been popped (deleted ones
// count), or Add, Update, Delete or AddIfNotPresent was called before
// any Replace. Once true it stays true. It does not take the lock.
func (f *FIFO[K, T]) HasSynced() bool { return f.sync.synced.Load() }

// Close wakes every Pop waiting on an empty FIFO; from then on Pop hands
// out what is still queued and then returns ErrClosed. Producers may still
// add; their values are popped too.
func (f *FIFO[K, T]) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	f.cond.Broadcast()
}

// IsClosed reports whether Close was called.
func (f *FIFO[K, T]) IsClosed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.closed
}

// syncState tracks the initial population of a queue for HasSynced. Its
// methods are called with the queue's lock held; synced may be read
// without it.
type syncState struct {
	populated bool
	initial   int // keys of the first Replace not yet popped
	synced    atomic.Bool
}

// populateLocked records that the queue has content that did not come
// from a first Replace, so there is no initial list to wait for.
func (s *syncState) populateLocked() {
	if !s.populated {
		s.populated = true
		s.synced.Store(s.initial == 0)
	}
}

// replacedLocked records a Replace that left queued keys in the queue;
// the first one defines the initial list.
func (s *syncState) replacedLocked(queued int) {
	if !s.populated {
		s.initial = queued
		s.populateLocked()
	}
}

// poppedLocked records that a key was taken from the queue and returns
// whether it belonged to the initial list, judged before this pop.
func (s *syncState) poppedLocked() (isInInitialList bool) {
	isInInitialList = !s.synced.Load()
	if s.initial > 0 {
		s.initial--
		if s.initial == 0 && s.populated {
			s.synced.Store(true)
		}
	}
	return isInInitialList
}

// waitLocked waits on cond, with its lock held, until q is not empty. It
// returns ctx.Err() if ctx is done (even when q is not empty, so that a
// cancelled consumer stops at once), or ErrClosed if *closed and q is
// empty.
func waitLocked[K any](ctx context.Context, cond *sync.Cond, q *keyQueue[K], closed *bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if q.len() > 0 {
		return nil
	}
	// cond.Wait cannot watch ctx, so ctx's end must broadcast. The
	// broadcast takes the lock: between our check of ctx and Wait we hold
	// it, so the wake-up cannot fall into that gap and be lost.
	var stop func() bool
	if ctx.Done() != nil {
		stop = context.AfterFunc(ctx, func() {
			cond.L.Lock()
			cond.Broadcast()
			cond.L.Unlock()
		})
		defer stop()
	}
	for q.len() == 0 {
		if *closed {
			return ErrClosed
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		cond.Wait()
	}
	return ctx.Err()
}

// keyQueue is a FIFO of keys in a ring buffer whose size is a power of
// two. Unlike re-slicing a slice (q = q[1:]), popping frees the slot for
// reuse, so a long-lived queue does not keep reallocating; it also shrinks
// when mostly empty, so a burst does not pin memory forever.
type keyQueue[K any] struct {
	buf  []K
	head int
	n    int
}

const keyQueueMinSize = 16

func (q *keyQueue[K]) len() int { return q.n }

// at returns the i-th key from the front; 0 <= i < q.len().
func (q *keyQueue[K]) at(i int) K { return q.buf[(q.head+i)&(len(q.buf)-1)] }

func (q *keyQueue[K]) push(k K) {
	if q.n == len(q.buf) {
		q.resize(max(2*len(q.buf), keyQueueMinSize))
	}
	q.buf[(q.head+q.n)&(len(q.buf)-1)] = k
	q.n++
}

// pop removes and returns the front key; the queue must not be empty.
func (q *keyQueue[K]) pop() K {
	k := q.buf[q.head]
	var zero K
	q.buf[q.head] = zero // let a key that holds pointers be collected
	q.head = (q.head + 1) & (len(q.buf) - 1)
	q.n--
	// Shrinking at a quarter (not a half) leaves room to grow again
	// without reallocating, so a queue hovering at a boundary does not
	// thrash.
	if len(q.buf) > keyQueueMinSize && q.n <= len(q.buf)/4 {
		q.resize(len(q.buf) / 2)
	}
	return k
}

// retain keeps, in order, only the keys for which keep returns true.
func (q *keyQueue[K]) retain(keep func(K) bool) {
	j := 0
	for i := range q.n {
		k := q.at(i)
		if keep(k) {
			q.buf[(q.head+j)&(len(q.buf)-1)] = k
			j++
		}
	}
	var zero K
	for i := j; i < q.n; i++ {
		q.buf[(q.head+i)&(len(q.buf)-1)] = zero
	}
	q.n = j
}

// resize moves the keys, in order, to a buffer of size (a power of two
// not smaller than q.n).
func (q *keyQueue[K]) resize(size int) {
	buf := make([]K, size)
	if q.n > 0 {
		end := q.head + q.n
		if end <= len(q.buf) {
			copy(buf, q.buf[q.head:end])
		} else {
			c := copy(buf, q.buf[q.head:])
			copy(buf[c:], q.buf[:end-len(q.buf)])
		}
	}
	q.buf = buf
	q.head = 0
}
