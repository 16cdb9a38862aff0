package mirror

import (
	"context"
	"errors"
	"iter"
	"sync"
	"sync/atomic"
)

// FIFO is a queue that keeps the latest value of each key, as client-go's
// FIFO: a key is popped once, with its newest value, in order of first
// arrival; a deleted object is never popped. Create it with NewFIFO; it
// is safe for concurrent use.
type FIFO[K comparable, T any] struct {
	queueBase

	// q holds the queued keys, each once, in pop order. A key whose value
	// was deleted stays queued, so that deleting needs no search through
	// the queue; Pop drops it.
	q    keyedQueue[K, fifoItem[T]]
	live int // queued keys that hold a value

	keyFunc KeyFunc[K, T]
}

type fifoItem[T any] struct {
	obj     T
	deleted bool
}

// NewFIFO returns an empty FIFO that keys objects with keyFunc. It panics
// if keyFunc is nil.
func NewFIFO[K comparable, T any](keyFunc KeyFunc[K, T]) *FIFO[K, T] {
	if keyFunc == nil {
		panic("mirror: NewFIFO with a nil KeyFunc")
	}
	f := &FIFO[K, T]{keyFunc: keyFunc}
	f.init()
	return f
}

var _ Store[string, int] = (*FIFO[string, int])(nil)

// Add stores obj as the value of its key and queues the key if it is not
// queued. If the key function fails or panics, it returns a *KeyError and
// changes nothing.
func (f *FIFO[K, T]) Add(obj T) error { return f.put(obj, true) }

// Update is Add: a FIFO does not tell new objects from changed ones.
func (f *FIFO[K, T]) Update(obj T) error { return f.Add(obj) }

// AddIfNotPresent is Add, except that it never overwrites a stored value.
func (f *FIFO[K, T]) AddIfNotPresent(obj T) error { return f.put(obj, false) }

func (f *FIFO[K, T]) put(obj T, overwrite bool) (err error) {
	inKey, locked := true, false
	defer settleKey(&f.queueBase, &inKey, &locked, obj, &err)
	key, err := keyOf(f.keyFunc, obj)
	inKey = false
	if err != nil {
		return err
	}
	f.mu.Lock()
	locked = true
	f.initial.populateLocked()
	f.putLocked(key, obj, overwrite)
	return nil
}

// putLocked stores obj under key, queueing the key if it is not queued.
// If overwrite is false, an existing value is kept.
func (f *FIFO[K, T]) putLocked(key K, obj T, overwrite bool) {
	it, queued := f.q.findOrPush(key)
	if queued && !it.deleted && !overwrite {
		return
	}
	if !queued || it.deleted {
		f.live++
	}
	*it = fifoItem[T]{obj: obj}
	f.cond.Broadcast()
}

// Delete removes the value stored under obj's key, so that it is not
// popped. If the key function fails or panics, it returns a *KeyError.
func (f *FIFO[K, T]) Delete(obj T) (err error) {
	inKey, locked := true, false
	defer settleKey(&f.queueBase, &inKey, &locked, obj, &err)
	key, err := keyOf(f.keyFunc, obj)
	inKey = false
	if err != nil {
		return err
	}
	f.mu.Lock()
	locked = true
	f.initial.populateLocked()
	if it, queued := f.q.find(key); queued && !it.deleted {
		// The key stays queued (removing it would mean searching the
		// queue); Pop skips it. Dropping the value lets it be collected.
		*it = fifoItem[T]{deleted: true}
		f.live--
	}
	return nil
}

// Replace makes list the whole content of the queue: listed keys already
// queued keep their place, others follow in list order, the rest are
// dropped. Of several objects with one key the last wins. Objects whose
// key cannot be computed are skipped and their *KeyErrors returned
// joined. The version is not used.
func (f *FIFO[K, T]) Replace(list []T, _ string) error {
	l := fifoList[K, T]{vals: make(map[K]T, len(list))}
	f.mu.Lock()
	defer f.mu.Unlock()
	for n := 0; n < len(list); {
		n = f.keysLocked(&l, list, n)
	}
	vals, fresh, errs := l.vals, l.fresh, l.errs
	var next keyedQueue[K, fifoItem[T]]
	next.reserve(len(vals))
	for key := range f.q.all() {
		if obj, listed := vals[key]; listed {
			it, _ := next.findOrPush(key)
			it.obj = obj
		}
	}
	for _, key := range fresh {
		it, _ := next.findOrPush(key)
		it.obj = vals[key]
	}
	f.q, f.live = next, next.len()
	f.initial.replacedLocked(f.q.len())
	if f.q.len() > 0 {
		f.cond.Broadcast()
	}
	return errors.Join(errs...)
}

// fifoList is a list Replace is reading.
type fifoList[K comparable, T any] struct {
	vals  map[K]T
	fresh []K // listed keys not queued, in list order
	errs  []error
}

// keysLocked reads list[n:] into l and returns len(list), or, if the key
// function panics on an object, the position after it, which it leaves
// out; the caller goes on from there. One deferred call per list, not per
// object.
func (f *FIFO[K, T]) keysLocked(l *fifoList[K, T], list []T, n int) (next int) {
	inKey := false
	defer func() {
		if inKey {
			if v := recover(); v != nil {
				l.errs = append(l.errs, &KeyError{Object: list[next], Err: panicked(v)})
				next++
			}
		}
	}()
	for next = n; next < len(list); next++ {
		obj := list[next]
		inKey = true
		key, err := keyOf(f.keyFunc, obj)
		inKey = false
		if err != nil {
			l.errs = append(l.errs, err)
			continue
		}
		if _, dup := l.vals[key]; !dup {
			if _, queued := f.q.find(key); !queued {
				l.fresh = append(l.fresh, key)
			}
		}
		l.vals[key] = obj
	}
	return next
}

// Resync does nothing and returns nil: every stored key is queued.
func (f *FIFO[K, T]) Resync() error { return nil }

// Get returns the value stored under obj's key, or a *KeyError.
func (f *FIFO[K, T]) Get(obj T) (T, bool, error) {
	key, err := keyOfGuarded(f.keyFunc, obj)
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
	it, ok := f.q.find(key)
	if !ok || it.deleted {
		var zero T
		return zero, false
	}
	return it.obj, true
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

// ListKeys is List for the keys.
func (f *FIFO[K, T]) ListKeys() []K {
	f.mu.Lock()
	defer f.mu.Unlock()
	keys := make([]K, 0, f.live)
	for k := range f.allLocked() {
		keys = append(keys, k)
	}
	return keys
}

// All yields every key and stored value in pop order, holding the lock:
// the loop body must not call the FIFO.
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
		for key, it := range f.q.all() {
			if !it.deleted && !yield(key, it.obj) {
				return
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
// HasSynced). process runs with the lock held and must not call the FIFO.
// An error wrapping ErrRequeue puts the value back at the back. Pop
// returns process's error; ctx.Err() if ctx is done (checked first); or
// ErrClosed once the FIFO is closed and empty.
func (f *FIFO[K, T]) Pop(ctx context.Context, process func(key K, obj T, isInInitialList bool) error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for {
		if err := waitLocked(ctx, &f.queueBase, &f.q); err != nil {
			return err
		}
		key, it := f.q.pop()
		initial := f.initial.poppedLocked()
		if it.deleted {
			continue
		}
		f.live--
		err := process(key, it.obj, initial)
		if errors.Is(err, ErrRequeue) {
			f.initial.populateLocked()
			f.putLocked(key, it.obj, false)
		}
		return err
	}
}

// HasSynced reports whether the FIFO has handed out its initial content:
// every key queued by the first Replace has been popped (deleted ones
// count), or Add, Update, Delete or AddIfNotPresent came first. Once true
// it stays true. It does not take the lock.
func (f *FIFO[K, T]) HasSynced() bool { return f.initial.synced.Load() }

// Close makes Pop return ErrClosed once the FIFO is empty. Producers may
// still add.
func (f *FIFO[K, T]) Close() { f.close() }

// IsClosed reports whether Close was called.
func (f *FIFO[K, T]) IsClosed() bool { return f.isClosed() }

// queueBase is what FIFO and DeltaFIFO share: the lock, the condition
// poppers wait on, closing, and the initial-list tracking of HasSynced.
type queueBase struct {
	mu      sync.Mutex
	cond    sync.Cond // L is &mu; broadcast whenever a key is queued or the queue closes
	closed  bool
	initial initialList
}

func (q *queueBase) init() { q.cond.L = &q.mu }

// settleKey is what the methods that compute the key of an object they
// are given defer: it releases q's lock if *locked, and turns a panic of
// the key function, which runs while *inKey is set, into obj's *KeyError
// in *err. One deferred call serves both, as a second would cost every
// call.
func settleKey[T any](q *queueBase, inKey, locked *bool, obj T, err *error) {
	if *locked {
		q.mu.Unlock()
	}
	if *inKey {
		if v := recover(); v != nil {
			*err = &KeyError{Object: obj, Err: panicked(v)}
		}
	}
}

func (q *queueBase) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	q.cond.Broadcast()
}

func (q *queueBase) isClosed() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.closed
}

// initialList tracks a queue's initial content for HasSynced. Its methods
// are called with the queue's lock held; synced may be read without it.
type initialList struct {
	populated bool
	left      int // keys queued by the first Replace not yet popped
	synced    atomic.Bool
}

// populateLocked records that the queue has content that did not come
// from a first Replace, so there is no initial list to wait for.
func (s *initialList) populateLocked() {
	if !s.populated {
		s.populated = true
		s.synced.Store(s.left == 0)
	}
}

// replacedLocked records a Replace that left queued keys in the queue;
// the first one defines the initial list.
func (s *initialList) replacedLocked(queued int) {
	if !s.populated {
		s.left = queued
		s.populateLocked()
	}
}

// listedLocked records that a first list taken chunk by chunk queued n
// keys: until the list is done (populateLocked), they are the initial
// list so far.
func (s *initialList) listedLocked(n int) {
	if !s.populated {
		s.left += n
	}
}

// poppedLocked records that a key was taken from the queue and returns
// whether it belonged to the initial list, judged before this pop.
func (s *initialList) poppedLocked() (isInInitialList bool) {
	isInInitialList = !s.synced.Load()
	if s.left > 0 {
		s.left--
		if s.left == 0 && s.populated {
			s.synced.Store(true)
		}
	}
	return isInInitialList
}

// waitLocked waits, with b's lock held, until q is not empty. It returns
// ctx.Err() if ctx is done (even when q is not empty, so that a cancelled
// consumer stops at once), or ErrClosed if b is closed and q is empty.
func waitLocked[K comparable, V any](ctx context.Context, b *queueBase, q *keyedQueue[K, V]) error {
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
			b.mu.Lock()
			b.cond.Broadcast()
			b.mu.Unlock()
		})
		defer stop()
	}
	for q.len() == 0 {
		if b.closed {
			return ErrClosed
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		b.cond.Wait()
	}
	return ctx.Err()
}
