package workqueue

import (
	"math"
	"time"
)

// The delayed keys wait in a heap ordered by the time they are due (ties
// in the order they were delayed), under one timer set for the earliest:
// no goroutine or timer per key.

type delayedEntry struct {
	at  int64 // when the key is due, in nanoseconds since Queue.epoch
	seq uint64
	idx int32
}

func (a delayedEntry) before(b delayedEntry) bool {
	return a.at < b.at || a.at == b.at && a.seq < b.seq
}

const noTimer = math.MaxInt64

// AddAfter queues key after delay d, at its priority: the one it is
// queued, delayed or in process at, or PriorityLive for a key the queue
// does not hold. A key already queued (or to be queued again at Done)
// stays as it is; a delayed key is due at the earlier of its time and d
// from now. A d of zero or less queues key now. After ShutDown or
// ShutDownWithDrain, AddAfter does nothing.
func (q *Queue[K]) AddAfter(key K, d time.Duration) {
	q.mu.Lock()
	if !q.closing {
		idx, ok := q.index[key]
		q.addAfterLocked(key, idx, ok, d)
	}
	q.mu.Unlock()
}

// AddRateLimited adds key after its backoff, as AddAfter does: BaseDelay
// doubled for each AddRateLimited since key was forgotten, at most
// MaxDelay; and counts the retry. It may be called before Done for the
// key or soon after it: Done keeps the retry count for a while (see
// Queue).
func (q *Queue[K]) AddRateLimited(key K) {
	q.mu.Lock()
	if !q.closing {
		idx, ok := q.index[key]
		if !ok {
			idx, ok = q.newRecLocked(key, PriorityLive), true
		}
		r := &q.recs[idx]
		d := q.backoff(r.fails)
		if r.fails < math.MaxInt32 {
			r.fails++
		}
		q.retries++
		q.addAfterLocked(key, idx, ok, d)
	}
	q.mu.Unlock()
}

// backoff returns the delay of a key that failed fails times before.
func (q *Queue[K]) backoff(fails int32) time.Duration {
	d := q.baseDelay
	for ; fails > 0 && d < q.maxDelay; fails-- {
		d *= 2
	}
	return min(d, q.maxDelay)
}

// addAfterLocked is AddAfter for key, held in record idx if ok.
func (q *Queue[K]) addAfterLocked(key K, idx int32, ok bool, d time.Duration) {
	if d <= 0 {
		p := PriorityLive
		if ok {
			p = q.recs[idx].prio
		}
		q.addLocked(key, p)
		return
	}
	now := q.nowLocked()
	at := now + int64(d)
	if at < now {
		at = noTimer - 1 // overflow: as good as never
	}
	if !ok {
		idx = q.newRecLocked(key, PriorityLive)
		q.adds++
		q.delayLocked(idx, at, now)
		return
	}
	r := &q.recs[idx]
	switch {
	case r.state&stReady != 0:
	case r.state&stDelayed != 0:
		if i := r.heap; at < q.delayed[i].at {
			q.delayed[i].at = at
			q.heapUp(int(i))
			q.armDelayLocked(now)
		}
	default:
		q.adds++
		q.delayLocked(idx, at, now)
	}
}

// delayLocked makes record idx, which has nothing pending, due at at.
func (q *Queue[K]) delayLocked(idx int32, at, now int64) {
	r := &q.recs[idx]
	r.state = r.state&^stRemembered | stDelayed
	r.heap = int32(len(q.delayed))
	q.delaySeq++
	q.delayed = append(q.delayed, delayedEntry{at: at, seq: q.delaySeq, idx: idx})
	q.heapUp(len(q.delayed) - 1)
	q.nDelayed++
	q.armDelayLocked(now)
}

// undelayLocked takes record idx out of the delayed heap.
func (q *Queue[K]) undelayLocked(idx int32) {
	r := &q.recs[idx]
	i := int(r.heap)
	r.state &^= stDelayed
	r.heap = -1
	q.nDelayed--
	last := len(q.delayed) - 1
	if i != last {
		q.heapSet(i, q.delayed[last])
	}
	q.delayed = q.delayed[:last]
	if i != last {
		q.heapDown(i)
		q.heapUp(i)
	}
	// The timer may stay set for a key no longer delayed: it then finds
	// nothing due, which costs less than resetting it here.
}

// armDelayLocked sets the timer for the earliest delayed key, if it is
// not set for it or earlier.
func (q *Queue[K]) armDelayLocked(now int64) {
	if len(q.delayed) == 0 {
		return
	}
	at := q.delayed[0].at
	if at >= q.delayArmedAt {
		return
	}
	q.delayArmedAt = at
	d := time.Duration(at - now)
	if q.delayTimer == nil {
		q.delayTimer = time.AfterFunc(d, q.fireDelayed)
	} else {
		q.delayTimer.Reset(d)
	}
}

// fireDelayed queues the keys that are due and sets the timer for the
// next.
func (q *Queue[K]) fireDelayed() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.delayArmedAt = noTimer
	if q.closing {
		return
	}
	now := q.nowLocked()
	for len(q.delayed) > 0 && q.delayed[0].at <= now {
		idx := q.delayed[0].idx
		q.undelayLocked(idx)
		q.readyLocked(idx)
	}
	q.armDelayLocked(now)
}

func (q *Queue[K]) heapSet(i int, e delayedEntry) {
	q.delayed[i] = e
	q.recs[e.idx].heap = int32(i)
}

func (q *Queue[K]) heapUp(i int) {
	h := q.delayed
	e := h[i]
	for i > 0 {
		parent := (i - 1) / 2
		if !e.before(h[parent]) {
			break
		}
		q.heapSet(i, h[parent])
		i = parent
	}
	q.heapSet(i, e)
}

func (q *Queue[K]) heapDown(i int) {
	h := q.delayed
	e := h[i]
	for {
		child := 2*i + 1
		if child >= len(h) {
			break
		}
		if r := child + 1; r < len(h) && h[r].before(h[child]) {
			child = r
		}
		if !h[child].before(e) {
			break
		}
		q.heapSet(i, h[child])
		i = child
	}
	q.heapSet(i, e)
}
