package mirror

import (
	"sync"
	"sync/atomic"
	"unsafe"
)

// feed is the log of the notifications that go to every handler: the
// informer appends each one once, and every listener reads the log from
// a position of its own. A notification therefore costs one copy however
// many handlers there are, where a buffer per handler would copy it into
// each (and grow, and shrink, each).
//
// It is the project's ring buffer, made of recycled chunks rather than
// one array that wraps around: the log is a chain of fixed-size chunks. Appending fills the last chunk
// and then links a new one, so nothing is ever copied or resized, and
// nothing points back along the chain: a chunk that every listener has
// passed is unreachable from the feed. The last listener to pass a chunk
// clears it and keeps it for reuse, up to feedKeepBytes of chunks, so a
// feed whose listeners keep up allocates nothing; the rest is left to the
// collector. Memory thus follows the slowest listener's backlog, and a
// feed whose listeners have caught up holds its last chunk, whose already
// delivered notifications (fewer than feedChunkLen) stay reachable until
// it fills, and the chunks kept for reuse, which are empty.
//
// One goroutine appends (the informer's, holding its applyMu); listeners
// read under their own lock (see listener.publish). A notification is
// never written again once appended, and a chunk's next is set before any
// notification in the next chunk is appended, so a listener that was told
// of the feed's new end by the appender, through a lock, reads everything
// before it safely. A chunk is reused only once every listener counted in
// its readers has passed it; a listener that stops reading without
// passing it (a removed handler) only leaves it to the collector.
type feed[K comparable, T any] struct {
	tail *feedChunk[K, T] // the chunk being filled; nil until first needed
	n    int              // notifications in tail
	seq  uint64           // notifications appended so far

	// followers counts the listeners reading the feed. It is raised by
	// follow, under the appender's lock, and lowered by unfollow, at any
	// time: a chunk counts as readers the followers at its creation, so
	// a count that is briefly too high only keeps a chunk from reuse.
	followers atomic.Int32

	freeMu sync.Mutex
	free   []*feedChunk[K, T]
}

// feedChunkLen is the number of notifications per chunk: few enough that
// a drained feed holds little, enough that a chunk is allocated rarely.
const feedChunkLen = 128

// feedKeepBytes bounds the cleared chunks a feed keeps for reuse, as
// one chunk at least.
const feedKeepBytes = 64 << 10

type feedChunk[K comparable, T any] struct {
	items [feedChunkLen]notification[K, T]
	next  *feedChunk[K, T]
	// readers counts the listeners that have yet to pass the chunk.
	readers atomic.Int32
}

// feedPos is a reader's position: the notification numbered seq, which is
// c.items[i], or the first of c.next if i is feedChunkLen.
type feedPos[K comparable, T any] struct {
	c   *feedChunk[K, T]
	i   int
	seq uint64
}

// append adds n at the end of the feed.
func (f *feed[K, T]) append(n notification[K, T]) {
	if f.tail == nil || f.n == feedChunkLen {
		c := f.newChunk()
		if f.tail != nil {
			f.tail.next = c
			if f.tail.readers.Load() == 0 {
				// No listener will read it: it was filled while
				// there were none.
				f.reuse(f.tail)
			}
		}
		f.tail, f.n = c, 0
	}
	f.tail.items[f.n] = n
	f.n++
	f.seq++
}

// follow registers a new listener and returns its starting position: the
// next notification to be appended.
func (f *feed[K, T]) follow() feedPos[K, T] {
	if f.tail == nil {
		f.tail = f.newChunk()
	}
	f.followers.Add(1)
	f.tail.readers.Add(1)
	return feedPos[K, T]{c: f.tail, i: f.n, seq: f.seq}
}

// unfollow unregisters a listener, which stops reading.
func (f *feed[K, T]) unfollow() { f.followers.Add(-1) }

// newChunk returns a chunk, reused if one is kept, for the current
// followers to read.
func (f *feed[K, T]) newChunk() *feedChunk[K, T] {
	var c *feedChunk[K, T]
	f.freeMu.Lock()
	if k := len(f.free); k > 0 {
		c = f.free[k-1]
		f.free[k-1] = nil
		f.free = f.free[:k-1]
	}
	f.freeMu.Unlock()
	if c == nil {
		c = new(feedChunk[K, T])
	}
	c.readers.Store(f.followers.Load())
	return c
}

// passed is called by a listener that has moved past c.
func (f *feed[K, T]) passed(c *feedChunk[K, T]) {
	if c.readers.Add(-1) == 0 {
		f.reuse(c)
	}
}

// reuse clears c, which nobody reads any more, and keeps it for a later
// chunk if the feed keeps fewer than feedKeepBytes.
func (f *feed[K, T]) reuse(c *feedChunk[K, T]) {
	f.freeMu.Lock()
	defer f.freeMu.Unlock()
	if len(f.free) >= max(1, feedKeepBytes/int(unsafe.Sizeof(*c))) {
		return
	}
	clear(c.items[:])
	c.next = nil
	f.free = append(f.free, c)
}

// read copies into dst the notifications from p on, up to (not
// including) the one numbered end and at most len(dst) of them, and
// returns how many it copied and the position after them. Everything
// before end must have been appended.
func (f *feed[K, T]) read(p feedPos[K, T], dst []notification[K, T], end uint64) (int, feedPos[K, T]) {
	n := 0
	for n < len(dst) && p.seq < end {
		if p.i == feedChunkLen {
			next := p.c.next
			f.passed(p.c)
			p.c, p.i = next, 0
		}
		k := copy(dst[n:], p.c.items[p.i:min(feedChunkLen, p.i+int(end-p.seq))])
		n += k
		p.i += k
		p.seq += uint64(k)
	}
	return n, p
}
