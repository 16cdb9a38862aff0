package mirror

import "iter"

// replaySet is a state of the cache, each object with its key: what a
// handler is handed as initial adds when it starts from a state rather
// than from the feed (a handler registered late, or one registered before
// its informer resumed from a checkpoint). Every listener handed it reads
// the one set, at its own pace, and none changes it: the cost of handing
// a state to a handler is a read of the set on its goroutine, not a
// notification queued per object. It is in chunks, so that it grows
// without copying what it holds and reserves nothing it is not given.
type replaySet[K comparable, T any] struct {
	chunks [][]keyedObject[K, T]
	n      int
}

// keyedObject is an object with its key.
type keyedObject[K comparable, T any] struct {
	key K
	obj T
}

// replayChunk is the length of a replaySet's chunks.
const replayChunk = 1024

// collectReplay returns the set of objs.
func collectReplay[K comparable, T any](objs iter.Seq2[K, T]) *replaySet[K, T] {
	s := &replaySet[K, T]{}
	for k, obj := range objs {
		s.add(k, obj)
	}
	return s
}

// add appends obj, whose key is key.
func (s *replaySet[K, T]) add(key K, obj T) {
	if s.n%replayChunk == 0 {
		s.chunks = append(s.chunks, make([]keyedObject[K, T], 0, replayChunk))
	}
	c := &s.chunks[len(s.chunks)-1]
	*c = append(*c, keyedObject[K, T]{key: key, obj: obj})
	s.n++
}

// replayCursor is a listener's place in the set it is handed.
type replayCursor[K comparable, T any] struct {
	set  *replaySet[K, T]
	next int
	// at is the feed position the set is the cache's state at: it is
	// delivered after the feed's notifications numbered below at.
	at uint64
}

// left returns the number of objects not yet taken.
func (c *replayCursor[K, T]) left() int { return c.set.n - c.next }

// take moves up to len(dst) of the next objects into dst as initial-list
// adds and returns how many it moved.
func (c *replayCursor[K, T]) take(dst []notification[K, T]) int {
	n := 0
	for n < len(dst) && c.next < c.set.n {
		chunk := c.set.chunks[c.next/replayChunk][c.next%replayChunk:]
		for _, ko := range chunk[:min(len(chunk), len(dst)-n)] {
			dst[n] = notification[K, T]{kind: notifyAdd, key: ko.key, obj: ko.obj, initial: true, origin: OriginInitialList}
			n++
			c.next++
		}
	}
	return n
}

// replay hands this listener, after the feed's notifications numbered
// below at, an initial-list add of each object of set, which it must not
// change. Nothing may be queued for the listener yet: a listener is handed
// a state once, when it starts from it.
func (l *listener[K, T]) replay(set *replaySet[K, T], at uint64) {
	l.mu.Lock()
	if l.removed || set.n == 0 {
		l.mu.Unlock()
		return
	}
	l.replaying = &replayCursor[K, T]{set: set, at: at}
	l.initialPending += set.n
	l.boundLocked()
	l.mu.Unlock()
	l.wakeUp()
}

// takeReplayLocked moves up to len(dst) of the objects the listener is
// being handed, if it is at their place in the feed, into dst and returns
// how many it moved. Once the set is used up the listener lets go of it.
func (l *listener[K, T]) takeReplayLocked(dst []notification[K, T]) int {
	c := l.replaying
	if c == nil || c.at > l.pos.seq {
		return 0
	}
	n := c.take(dst)
	if c.left() == 0 {
		l.replaying = nil
	}
	return n
}
