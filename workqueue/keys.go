package workqueue

import "time"

// The records of the keys the queue holds. A key has a record from when
// the queue takes it (queued, delayed, or marked by AddRateLimited) until
// the queue lets go of it (at Done, or when a delayed key is dropped);
// its retry count lives in the record, so it goes with it. A key that
// has a retry count keeps its record after Done, in stRemembered, for
// keepTicks ticks: a worker may well call AddRateLimited just after
// Done, and must find the count there.
//
// Records live in a slice, found through a map from key to position, and
// freed records are reused; entries of the ready set and the delayed heap
// refer to records by position. Go maps and slices do not shrink, so
// after a burst the queue makes them again at the size it needs
// (tidyLocked).

// idleRecs is the number of records a queue that holds no key keeps room
// for; shrinkMin is the number of records below which the tables are not
// compacted while the queue holds keys.
const (
	idleRecs  = 64
	shrinkMin = 1024
)

// keepFails is the least time Done keeps a key's retry count.
const keepFails = time.Second

// rememberLocked keeps the record idx of a key that Done lets go of, for
// its retry count, until keepTicks ticks have passed.
func (q *Queue[K]) rememberLocked(idx int32) {
	r := &q.recs[idx]
	r.state = stRemembered
	r.heap = int32(q.tick)
	q.remembered.push(entry{idx: idx, tick: q.tick})
	if !q.tickArmed {
		q.armTickLocked()
	}
}

// forgetDueLocked lets go of the records remembered keepTicks ticks ago
// or more. An entry whose record has moved on (queued or delayed again,
// forgotten, reused) is dropped; one reused and remembered again at the
// same tick is let go of at the time its own entry would.
func (q *Queue[K]) forgetDueLocked() {
	for q.remembered.len() > 0 {
		e := q.remembered.front()
		if q.tick-e.tick < q.keepTicks {
			return
		}
		q.remembered.pop()
		if r := &q.recs[e.idx]; r.state == stRemembered && uint32(r.heap) == e.tick {
			q.releaseLocked(e.idx)
		}
	}
}

// newRecLocked gives key, which the queue does not hold, a record with
// priority p and nothing pending.
func (q *Queue[K]) newRecLocked(key K, p Priority) int32 {
	idx := q.free
	if idx >= 0 {
		q.free = q.recs[idx].heap
	} else {
		idx = int32(len(q.recs))
		q.recs = append(q.recs, rec[K]{})
	}
	r := &q.recs[idx]
	// gen carries on from the record's previous key, so that entries
	// left for that key stay stale.
	*r = rec[K]{key: key, prio: p, gen: r.gen, heap: -1, prev: -1, next: -1}
	q.index[key] = idx
	q.peak = max(q.peak, len(q.index))
	return idx
}

// releaseLocked lets go of the key of record idx, which has nothing
// pending and is not in process.
func (q *Queue[K]) releaseLocked(idx int32) {
	r := &q.recs[idx]
	delete(q.index, r.key)
	var zero K
	r.key = zero // let what the key points to be collected
	r.state = 0
	r.heap = q.free
	q.free = idx
	if !q.tickArmed && !q.closing && q.oversizedLocked() {
		q.armTickLocked() // to give the room back
	}
}

// tidyLocked makes the tables small again once the keys they grew for are
// gone. It is called at every tick, and then looks at the most keys held
// since the previous tick, so that a queue that fills and drains all the
// time keeps its tables rather than make them again at every drain; with
// now, it looks at the keys held now. If the queue holds no key, the
// tables get the size an idle queue needs; if it holds an eighth of their
// records or fewer, they are compacted to the keys held. Either way the
// work is paid for by the frees since the tables last grew.
func (q *Queue[K]) tidyLocked(now bool) {
	need := q.peak
	if now {
		need = len(q.index)
	}
	q.peak = len(q.index)
	switch {
	case need == 0:
		// Nothing refers to a record: the ready set is empty, and so is
		// the delayed heap. The levels go too, with their FIFOs' room.
		q.levels = nil
		q.remembered.reset() // only stale entries are left
		if cap(q.recs) > idleRecs {
			q.index = make(map[K]int32) // it grew along with recs
			q.recs = nil
		} else {
			q.recs = q.recs[:0]
		}
		q.free = -1
	case len(q.recs) >= shrinkMin && need <= len(q.recs)/8:
		q.compactLocked()
	}
	if c := cap(q.delayed); c > idleRecs && len(q.delayed) < c/4 {
		q.delayed = append([]delayedEntry(nil), q.delayed...)
	}
}

// oversizedLocked reports whether tidyLocked has work to do, or will
// have at the next tick.
func (q *Queue[K]) oversizedLocked() bool {
	return cap(q.recs) > max(idleRecs, 8*len(q.index)) ||
		cap(q.delayed) > max(idleRecs, 4*len(q.delayed))
}

// compactLocked moves the held keys' records into new tables of their
// size, and makes the references to them follow.
func (q *Queue[K]) compactLocked() {
	old := q.recs
	recs := make([]rec[K], 0, len(q.index))
	index := make(map[K]int32, len(q.index))
	for key, idx := range q.index {
		n := int32(len(recs))
		recs = append(recs, old[idx])
		index[key] = n
		// The copy keeps the record's own link; the old record's next
		// now tells where the record went.
		old[idx].next = n
	}
	moved := func(idx int32) int32 {
		if idx < 0 {
			return idx
		}
		return old[idx].next
	}
	for _, l := range q.levels {
		l.fifo.filter(func(e *entry) bool {
			r := &old[e.idx]
			if r.state&(stReady|stWorking) != stReady || r.gen != e.gen {
				return false // stale: drop it while at it
			}
			e.idx = r.next
			return true
		})
	}
	q.entries = 0
	for _, l := range q.levels {
		q.entries += l.fifo.len()
	}
	q.remembered.filter(func(e *entry) bool {
		r := &old[e.idx]
		if r.state != stRemembered || uint32(r.heap) != e.tick {
			return false
		}
		e.idx = r.next
		return true
	})
	for i := range q.delayed {
		q.delayed[i].idx = moved(q.delayed[i].idx)
	}
	for i := range recs {
		recs[i].prev, recs[i].next = moved(recs[i].prev), moved(recs[i].next)
	}
	q.workHead, q.workTail = moved(q.workHead), moved(q.workTail)
	q.recs, q.index = recs, index
	q.free = -1
}
