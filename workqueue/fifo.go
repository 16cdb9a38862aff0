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
	chunks []*[chunkLen]entry // chunks[first:] hold the entries
	first  int
	head   int // index of the front entry in chunks[first]
	tail   int // index the next push takes in the last chunk
	n      int
	// spare is an emptied chunk kept for reuse, so that a queue hovering
	// at a chunk boundary does not allocate.
	spare *[chunkLen]entry
}

const (
	chunkLen = 128
	// smallChunks is the room for chunk pointers an empty FIFO keeps.
	smallChunks = 8
)

func (f *fifo) len() int { return f.n }

// front returns the front entry; the FIFO must not be empty.
func (f *fifo) front() entry { return f.chunks[f.first][f.head] }

func (f *fifo) push(e entry) {
	if len(f.chunks) == f.first || f.tail == chunkLen {
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
	switch {
	case f.n == 0:
		// Start the last chunk over rather than move on to a new one.
		c := f.chunks[f.first]
		if cap(f.chunks) > smallChunks {
			f.chunks, f.spare = nil, c // let a burst's room go
		} else {
			clear(f.chunks)
			f.chunks = append(f.chunks[:0], c)
		}
		f.first, f.head, f.tail = 0, 0, 0
	case f.head == chunkLen:
		f.spare = f.chunks[f.first]
		f.chunks[f.first] = nil
		f.first++
		f.head = 0
		if f.first >= smallChunks && 2*f.first >= len(f.chunks) {
			// Move the chunk pointers down, to a smaller array if this
			// one is mostly room for what is gone.
			rest := f.chunks[f.first:]
			if cap(f.chunks) > 4*len(rest) {
				f.chunks = append(make([]*[chunkLen]entry, 0, 2*len(rest)), rest...)
			} else {
				n := copy(f.chunks, rest)
				clear(f.chunks[n:])
				f.chunks = f.chunks[:n]
			}
			f.first = 0
		}
	}
}

// reset empties the FIFO, keeping one chunk for reuse.
func (f *fifo) reset() {
	if f.spare == nil && len(f.chunks) > f.first {
		f.spare = f.chunks[f.first]
	}
	f.chunks = nil
	f.first, f.head, f.tail, f.n = 0, 0, 0, 0
}

// filter keeps the entries for which keep returns true, in order, after
// rewriting them as keep does through its pointer.
func (f *fifo) filter(keep func(*entry) bool) {
	old := *f
	f.chunks = nil
	f.first, f.head, f.tail, f.n = 0, 0, 0, 0
	for i := old.first; i < len(old.chunks); i++ {
		lo, hi := 0, chunkLen
		if i == old.first {
			lo = old.head
		}
		if i == len(old.chunks)-1 {
			hi = old.tail
		}
		for j := lo; j < hi; j++ {
			if e := old.chunks[i][j]; keep(&e) {
				f.push(e)
			}
		}
	}
}
