package mirror

import "iter"

// seqQueue is a FIFO of entries addressed by sequence number: push
// numbers entries consecutively, and an entry keeps its number until it is
// popped. So an index from key to sequence number (keyedQueue's) finds a
// queued entry, and the pops of other entries do not move it. The
// in-order queue and the listeners use it as a plain FIFO. Its zero value
// is empty and ready to use.
//
// Entries live in fixed-size chunks. Growing adds a chunk and never copies
// entries; a chunk is released as soon as its last entry is popped, so
// memory follows the queue's length down after a burst (a long-lived
// re-sliced slice, q = q[1:], would keep its whole backing array), and
// filling and draining a large queue costs no copying either way.
type seqQueue[E any] struct {
	chunks [][]E  // chunks[i] holds sequence numbers base+i*chunkLen up to base+(i+1)*chunkLen
	base   uint64 // first sequence number of chunks[0], a multiple of chunkLen
	head   uint64 // sequence number of the front entry
	tail   uint64 // sequence number the next push gets
	spare  []E    // an emptied chunk kept for reuse, so that a queue hovering at a chunk boundary does not allocate
}

const chunkLen = 256

func (q *seqQueue[E]) len() int { return int(q.tail - q.head) }

// at returns the queued entry numbered seq; head <= seq < tail.
func (q *seqQueue[E]) at(seq uint64) *E {
	off := seq - q.base
	return &q.chunks[off/chunkLen][off%chunkLen]
}

// front returns the front entry; the queue must not be empty.
func (q *seqQueue[E]) front() *E { return q.at(q.head) }

// seqs yields the sequence numbers of the queued entries, front first.
// The queue must not change during the loop.
func (q *seqQueue[E]) seqs() iter.Seq[uint64] {
	return func(yield func(uint64) bool) {
		for seq := q.head; seq != q.tail; seq++ {
			if !yield(seq) {
				return
			}
		}
	}
}

// push appends e and returns its sequence number.
func (q *seqQueue[E]) push(e E) uint64 {
	if q.tail-q.base == uint64(len(q.chunks))*chunkLen {
		c := q.spare
		if c == nil {
			c = make([]E, chunkLen)
		}
		q.spare = nil
		q.chunks = append(q.chunks, c)
	}
	seq := q.tail
	*q.at(seq) = e
	q.tail++
	return seq
}

// pop removes and returns the front entry; the queue must not be empty.
func (q *seqQueue[E]) pop() E {
	slot := q.at(q.head)
	e := *slot
	var zero E
	*slot = zero // let what the entry points to be collected
	q.head++
	if q.head-q.base == chunkLen {
		// The first chunk is used up. Shifting the chunk list down
		// copies a pointer per chunk once per chunkLen pops, which is
		// cheap, and unlike re-slicing it keeps nothing alive.
		q.spare = q.chunks[0]
		n := copy(q.chunks, q.chunks[1:])
		q.chunks[n] = nil
		q.chunks = q.chunks[:n]
		q.base += chunkLen
	}
	return e
}
