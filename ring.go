package mirror

import (
	"iter"
	"unsafe"
)

// ringMinCap is the smallest capacity a Ring allocates. Below it, resizing
// would cost more than the memory it saves.
const ringMinCap = 16

// ringKeepBytes is how much storage a draining ring keeps. A consumer that
// keeps up with a bursty producer empties its ring after every burst;
// shrinking all the way would reallocate and copy the ring on every burst,
// which measured as most of the informer's allocated bytes.
const ringKeepBytes = 64 << 10

// Ring is a first-in, first-out queue of values held in a circular buffer
// that grows when it is full and shrinks again as it drains, so that a
// burst does not pin its peak memory for the rest of the program's life
// (client-go's ring never shrinks).
//
// Ring suits a single consumer whose backlog stays moderate. The library's
// own queues keep their entries in fixed-size chunks instead (the informer's
// queue and the handlers' shared feed): a backlog that swings between empty
// and tens of thousands of values makes a Ring copy itself on every swing,
// which bench/NOTES.md measured as most of the garbage of an informer with
// 16 handlers.
//
// Capacity is zero or a power of two no smaller than 16. A full ring
// doubles; a ring whose length falls to a quarter of its capacity halves,
// but not below the capacity that fits in 64 KiB (1024 values of 64
// bytes). The gap between the two thresholds means that pushing and popping
// around either of them does not resize again and again, so Push and Pop
// are O(1) amortised and allocate nothing while the length stays within a
// steady range; and bursts that fit in 64 KiB reuse the same storage. A
// larger burst's storage is given back as the ring drains. Clear releases
// the storage entirely.
//
// The zero value is an empty ring ready to use. A Ring is not safe for
// concurrent use: its owner must serialise calls.
type Ring[T any] struct {
	buf  []T // len(buf) is zero or a power of two
	head int // index of the oldest value
	n    int // number of values held
}

// Push appends v at the tail of the ring, growing it if it is full.
func (r *Ring[T]) Push(v T) {
	if r.n == len(r.buf) {
		r.resize(max(ringMinCap, 2*len(r.buf)))
	}
	r.buf[(r.head+r.n)&(len(r.buf)-1)] = v
	r.n++
}

// Pop removes and returns the oldest value, or reports false if the ring is
// empty. The slot it occupied is zeroed, so the ring does not keep popped
// values reachable.
func (r *Ring[T]) Pop() (T, bool) {
	var zero T
	if r.n == 0 {
		return zero, false
	}
	v := r.buf[r.head]
	r.buf[r.head] = zero
	r.head = (r.head + 1) & (len(r.buf) - 1)
	r.n--
	if c := len(r.buf); c > ringMinCap && r.n <= c/4 && c > r.keepCap() {
		r.resize(c / 2)
	}
	return v, true
}

// Peek returns the oldest value without removing it, or reports false if
// the ring is empty.
func (r *Ring[T]) Peek() (T, bool) {
	if r.n == 0 {
		var zero T
		return zero, false
	}
	return r.buf[r.head], true
}

// Len returns the number of values in the ring.
func (r *Ring[T]) Len() int { return r.n }

// Cap returns the number of values the ring can hold before it grows.
func (r *Ring[T]) Cap() int { return len(r.buf) }

// All yields the values in the ring, oldest first, without removing them.
// The ring must not be changed during the iteration; if it is, the values
// yielded after the change are unspecified (but no call panics).
func (r *Ring[T]) All() iter.Seq[T] {
	return func(yield func(T) bool) {
		// Work on a copy of the header so that a loop body that breaks
		// the rule above cannot make this index out of range.
		buf, head, n := r.buf, r.head, r.n
		for i := range n {
			if !yield(buf[(head+i)&(len(buf)-1)]) {
				return
			}
		}
	}
}

// Clear removes every value and releases the ring's storage.
func (r *Ring[T]) Clear() {
	*r = Ring[T]{}
}

// keepCap is the capacity a draining ring shrinks to: the largest power of
// two whose values fit in ringKeepBytes, and at least ringMinCap.
func (r *Ring[T]) keepCap() int {
	var zero T
	size := int(unsafe.Sizeof(zero))
	c := ringMinCap
	for size > 0 && 2*c*size <= ringKeepBytes {
		c *= 2
	}
	if size == 0 {
		c = ringMinCap
	}
	return c
}

// resize moves the values, oldest first, into a new buffer of capacity c,
// which must be a power of two no smaller than r.n.
func (r *Ring[T]) resize(c int) {
	buf := make([]T, c)
	if r.n > 0 {
		// The values occupy at most two runs: from head to the end of the
		// buffer, then from its start.
		k := copy(buf, r.buf[r.head:min(r.head+r.n, len(r.buf))])
		copy(buf[k:], r.buf[:r.n-k])
	}
	r.buf = buf
	r.head = 0
}
