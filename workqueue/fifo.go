package workqueue

// entry is a place in a priority level's FIFO: the record of a key, the
// generation of the record it was queued for, and the aging tick at which
// it was queued. An entry whose record has moved on (been handed out, or
// queued again under a later generation) is stale and skipped.
type entry struct {
	idx  int32
	gen  uint32
	tick uint32
}

// fifo is a FIFO of entries in fixed-size chunks. Growing adds a chunk and
// never copies entries; a chunk is released as soon as its last entry is
// popped, so memory follows the queue's length down after a burst, where a
// re-sliced slice would keep its whole backing array. Its zero value is
// empty and ready to use.
type fifo struct {
	chunks []*[chunkLen]entry
	head   int // index of the front entry in chunks[0]
	tail   int // index the next push takes in chunks[len-1]
	n      int
	// spare is an emptied chunk kept for reuse, so that a queue hovering
	// at a chunk boundary does not allocate.
	spare *[chunkLen]entry
}

const chunkLen = 128

func (f *fifo) len() int { return f.n }

// front returns the front entry; the FIFO must not be empty.
func (f *fifo) front() entry { return f.chunks[0][f.head] }

func (f *fifo) push(e entry) {
	if len(f.chunks) == 0 || f.tail == chunkLen {
		c := f.spare
		if c == nil {
			c = new([chunkLen]entry)
		}
		f.spare = nil
		f.chunks = append(f.chunks, c)
		f.tail = 0
	}
	f.chunks[len(f.chunks)-1][f.tail] = e
	f.tail++
	f.n++
}

// pop removes the front entry; the FIFO must not be empty.
func (f *fifo) pop() {
	f.head++
	f.n--
	if f.n == 0 {
		// Start the only chunk over rather than move on to a new one.
		f.head, f.tail = 0, 0
		if len(f.chunks) > 1 {
			f.reset()
		}
		return
	}
	if f.head == chunkLen {
		f.spare = f.chunks[0]
		n := copy(f.chunks, f.chunks[1:])
		f.chunks[n] = nil
		f.chunks = f.chunks[:n]
		f.head = 0
	}
}

// reset empties the FIFO, keeping one chunk for reuse.
func (f *fifo) reset() {
	if f.spare == nil && len(f.chunks) > 0 {
		f.spare = f.chunks[0]
	}
	f.chunks = nil
	f.head, f.tail, f.n = 0, 0, 0
}

// filter keeps the entries for which keep returns true, in order, after
// rewriting them as keep does through its pointer.
func (f *fifo) filter(keep func(*entry) bool) {
	old := *f
	f.chunks = nil
	f.head, f.tail, f.n = 0, 0, 0
	for i, c := range old.chunks {
		lo, hi := 0, chunkLen
		if i == 0 {
			lo = old.head
		}
		if i == len(old.chunks)-1 {
			hi = old.tail
		}
		for j := lo; j < hi; j++ {
			if e := c[j]; keep(&e) {
				f.push(e)
			}
		}
	}
}
