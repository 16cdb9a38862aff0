package mirror

import (
	"hash/maphash"
	"iter"
)

// keyedQueue is the storage of FIFO and DeltaFIFO: a FIFO of values, at
// most one per key, that also finds a value by its key. Its zero value is
// empty and ready to use.
//
// The entries live in a seqQueue, which numbers them in push order. The
// index is a hash table of those numbers (open addressing, linear
// probing) built for the way a queue uses it, where keys leave in the
// order they came:
//
//   - A pop does not touch the table. A slot whose entry was popped
//     (numbered below order.head) is dead, and a later push whose probe
//     meets it takes it over. A key popped and queued again, as a busy
//     object is, costs one probe, not a delete and an insert.
//   - When the queue drains, every slot is dead at once: raising epoch
//     to the next number empties the table without clearing it, however
//     large the burst was, and the table keeps its size for the next one.
//   - A slot is 8 bytes and holds no pointer, so the collector never
//     scans the table, and it carries part of the key's hash, so a probe
//     reads an entry's key only when the key is very likely there.
type keyedQueue[K comparable, V any] struct {
	order seqQueue[keyedEntry[K, V]]

	// slots is the table: empty (0), or tag<<offBits | (seq-base) for
	// the entry numbered seq. len(slots) is 0 or a power of two.
	slots []uint64
	seed  maphash.Seed
	base  uint64 // the number slot offsets count from; <= order.head
	// Slots numbering entries below epoch are free: the queue has
	// drained since they were written, so no live key's probe runs
	// through them, and a probe may stop there as at an empty slot.
	// Slots numbering entries in [epoch, order.head) were popped since
	// then: free for a push, but a probe must go on past them.
	epoch uint64
	used  int // slots numbering entries at or above epoch
	limit int // used never exceeds limit, 3/4 of len(slots)

	// peak is the largest length since the queue last drained; recent
	// is the peak of recent bursts, halved at every drain that does not
	// reach it. The table shrinks when it is much larger than recent
	// needs, so memory follows the bursts down without a burst of the
	// same size having to grow it again. Until then (for ever, if the
	// queue stays idle) a burst of n keys leaves a table of at most
	// max(minSlots, 16n/3) slots.
	peak, recent int
}

type keyedEntry[K comparable, V any] struct {
	key K
	val V
}

const (
	offBits = 40 // a slot's low bits: its entry's number, less base
	offMask = 1<<offBits - 1
	// tagBit is set in every tag, so that no used slot is 0.
	tagBit   = 1 << (63 - offBits)
	minSlots = 16
)

func (q *keyedQueue[K, V]) len() int { return q.order.len() }

// hash returns key's slot tag and the table position its probe starts at.
func (q *keyedQueue[K, V]) hash(key K) (tag, pos uint64) {
	h := maphash.Comparable(q.seed, key)
	return h>>offBits | tagBit, h & uint64(len(q.slots)-1)
}

// find returns the value queued under key. The pointer stays valid until
// key is popped.
func (q *keyedQueue[K, V]) find(key K) (*V, bool) {
	if q.order.len() == 0 {
		return nil, false
	}
	tag, i := q.hash(key)
	mask := uint64(len(q.slots) - 1)
	for ; ; i = (i + 1) & mask {
		s := q.slots[i]
		seq := q.base + s&offMask
		if s == 0 || seq < q.epoch {
			return nil, false
		}
		if s>>offBits == tag && seq >= q.order.head {
			if e := q.order.at(seq); e.key == key {
				return &e.val, true
			}
		}
	}
}

// findOrPush returns the value queued under key and true or, if key is
// not queued, queues it with the zero value and returns that and false.
// The pointer stays valid until key is popped.
func (q *keyedQueue[K, V]) findOrPush(key K) (*V, bool) {
	if q.used >= q.limit || q.order.tail-q.base >= offMask {
		q.rebuild(q.order.len() + 1)
	}
	tag, i := q.hash(key)
	mask := uint64(len(q.slots) - 1)
	free := -1
	for ; ; i = (i + 1) & mask {
		s := q.slots[i]
		seq := q.base + s&offMask
		if s == 0 || seq < q.epoch {
			if free < 0 {
				free = int(i)
				q.used++
			}
			break
		}
		if seq < q.order.head {
			if free < 0 {
				free = int(i) // a popped entry's slot, counted in used
			}
			continue
		}
		if s>>offBits == tag {
			if e := q.order.at(seq); e.key == key {
				return &e.val, true
			}
		}
	}
	seq := q.order.push(keyedEntry[K, V]{key: key})
	q.slots[free] = tag<<offBits | (seq - q.base)
	q.peak = max(q.peak, q.order.len())
	return &q.order.at(seq).val, false
}

// pop removes and returns the front key and its value; the queue must not
// be empty.
func (q *keyedQueue[K, V]) pop() (K, V) {
	e := q.order.pop()
	if q.order.len() == 0 {
		q.drained()
	}
	return e.key, e.val
}

// drained empties the table of a queue that has just drained, and
// shrinks it if recent bursts were much smaller than it.
func (q *keyedQueue[K, V]) drained() {
	q.epoch, q.used = q.order.head, 0
	q.recent = max(q.peak, q.recent/2)
	q.peak = 0
	if want := slotsFor(q.recent); len(q.slots) > 4*want {
		q.newTable(want)
	}
}

// reserve prepares an empty queue for n keys, so that a large Replace
// does not grow the table step by step. It does nothing to a queue that
// holds keys: rehashing them would cost what it saves.
func (q *keyedQueue[K, V]) reserve(n int) {
	if q.order.len() == 0 && n > q.limit {
		q.newTable(slotsFor(n))
	}
}

// rebuild makes a table with room for more than n keys (the queue holds
// at most n) and fills it with the queued keys. Popped entries' slots do
// not survive, so a queue that never drains rebuilds to get rid of them.
func (q *keyedQueue[K, V]) rebuild(n int) {
	size := max(len(q.slots), minSlots)
	for n > size*3/8 {
		size *= 2
	}
	if size == len(q.slots) {
		clear(q.slots)
		q.base, q.epoch, q.used = q.order.head, q.order.head, 0
	} else {
		q.newTable(size)
	}
	mask := uint64(size - 1)
	for seq := range q.order.seqs() {
		tag, i := q.hash(q.order.at(seq).key)
		for q.slots[i] != 0 {
			i = (i + 1) & mask
		}
		q.slots[i] = tag<<offBits | (seq - q.base)
		q.used++
	}
}

// newTable replaces the table with an empty one of size slots.
func (q *keyedQueue[K, V]) newTable(size int) {
	q.slots = make([]uint64, size)
	q.seed = maphash.MakeSeed() // a new table may as well have a new seed
	q.base, q.epoch, q.used = q.order.head, q.order.head, 0
	q.limit = size / 4 * 3
}

// slotsFor returns the size of a table that takes n keys.
func slotsFor(n int) int {
	size := minSlots
	for n > size/4*3 {
		size *= 2
	}
	return size
}

// all yields every queued key and a pointer to its value, front first.
// The loop may change values but must not push or pop.
func (q *keyedQueue[K, V]) all() iter.Seq2[K, *V] {
	return func(yield func(K, *V) bool) {
		for seq := range q.order.seqs() {
			e := q.order.at(seq)
			if !yield(e.key, &e.val) {
				return
			}
		}
	}
}
