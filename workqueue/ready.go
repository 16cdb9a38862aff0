package workqueue

// The ready set: the keys waiting for a worker, by priority, with aging.
//
// Each priority in use has a level: a FIFO of entries and the number of
// keys queued at that priority. Raising a queued key's priority pushes a
// second entry for it at the higher level and leaves the first where it
// was: the first keeps the key's place in age (its level's FIFO is in the
// order keys came, so its head is that level's oldest key), the second its
// place in priority. Whichever a Get reaches first hands the key out, and
// the other is then stale and skipped.
//
// Aging needs no clock read per key. Time is counted in ticks of
// MaxWait/agingSteps (tick.go), and an entry records the tick at which it
// was queued. A key queued at tick t has waited more than
// MaxWait-MaxWait/agingSteps, and at most MaxWait, once the tick reaches
// t+agingSteps: it is aged then.
//
// Aged keys get a share of the hand-outs, not precedence: one in
// agedShare goes to the oldest aged key below the highest priority
// queued (found by comparing the heads of the lower levels' FIFOs with
// the tick), the others go by priority. Precedence would make the queue a
// FIFO once a backlog larger than the workers clear in MaxWait has aged
// (an initial list of a million keys): every live key would wait behind
// it. With a share, a key of the highest priority is delayed by aging by
// at most one hand-out, and an aged key waits at most agedShare
// hand-outs for itself and for each aged key older than it. Keys of the
// highest priority need no share: they are served first anyway, in the
// order they came.

// agingSteps is the number of ticks in MaxWait.
const agingSteps = 8

// agedShare is the number of hand-outs of which aged keys below the
// highest priority get at least one.
const agedShare = 4

// maxIdleLevels is the number of levels an empty ready set keeps; a ready
// set that has seen more priorities drops them all when it empties.
const maxIdleLevels = 8

type level struct {
	prio Priority
	n    int // keys queued at prio; fifo may hold more entries, stale or older ones
	fifo fifo
}

// levelLocked returns the level of priority p, making it if need be.
func (q *Queue[K]) levelLocked(p Priority) *level {
	i := 0
	for ; i < len(q.levels); i++ {
		l := q.levels[i]
		if l.prio == p {
			return l
		}
		if l.prio < p {
			break
		}
	}
	l := &level{prio: p}
	q.levels = append(q.levels, nil)
	copy(q.levels[i+1:], q.levels[i:])
	q.levels[i] = l
	return l
}

// liveLocked reports whether e is the entry of a key still queued in the
// generation e was made for.
func (q *Queue[K]) liveLocked(e entry) bool {
	r := &q.recs[e.idx]
	return r.state&(stReady|stWorking) == stReady && r.gen == e.gen
}

// pushReadyLocked queues the held key of record idx at its priority.
func (q *Queue[K]) pushReadyLocked(idx int32) {
	r := &q.recs[idx]
	r.gen++
	r.state = r.state&^stRemembered | stReady
	l := q.levelLocked(r.prio)
	l.fifo.push(entry{idx: idx, gen: r.gen, tick: q.tick})
	l.n++
	q.entries++
	q.nReady++
	if q.m != nil {
		q.stampQueuedLocked(r)
	}
	if !q.tickArmed {
		q.armTickLocked()
	}
	q.cond.Signal()
}

// raiseLocked raises the priority of the queued key of record idx to p,
// above its current one.
func (q *Queue[K]) raiseLocked(idx int32, p Priority) {
	r := &q.recs[idx]
	q.levelLocked(r.prio).n--
	r.prio = p
	l := q.levelLocked(p)
	l.fifo.push(entry{idx: idx, gen: r.gen, tick: q.tick})
	l.n++
	q.entries++
}

// headLocked drops l's stale front entries and returns its first live
// one.
func (q *Queue[K]) headLocked(l *level) (entry, bool) {
	for l.fifo.len() > 0 {
		e := l.fifo.front()
		if q.liveLocked(e) {
			return e, true
		}
		l.fifo.pop()
		q.entries--
	}
	return entry{}, false
}

// popReadyLocked takes the next key out of the ready set, which must not
// be empty, and returns its record: the first of the highest priority,
// unless it is the turn of the aged keys below it and one has aged; then
// the oldest of those.
func (q *Queue[K]) popReadyLocked() int32 {
	var top *level
	for _, l := range q.levels {
		if l.n > 0 {
			top = l
			break
		}
	}
	from := top
	if q.sinceAged < agedShare-1 {
		q.sinceAged++
	} else if q.aging && int32(q.tick-q.ageCheck) >= 0 {
		if l := q.agedLocked(top); l != nil {
			from = l
			q.sinceAged = 0
		}
	}
	e, _ := q.headLocked(from)
	from.fifo.pop()
	q.entries--
	r := &q.recs[e.idx]
	if r.prio == from.prio {
		from.n--
	} else {
		q.levelLocked(r.prio).n-- // a raised key, handed out by age
	}
	r.state &^= stReady
	q.nReady--
	if q.nReady == 0 {
		q.readyEmptiedLocked()
	}
	return e.idx
}

// agedLocked returns the level below top whose head is the oldest aged
// key, or nil if none has aged. Then it sets ageCheck to the tick before
// which none will: that of the oldest head of any level, top's included,
// since a key of a higher priority may yet put top below the highest;
// every entry queued later is younger than the heads.
func (q *Queue[K]) agedLocked(top *level) *level {
	var oldest *level
	var tick, earliest uint32
	below, found := false, false
	for _, l := range q.levels {
		// A level with no keys of its own may still hold the older
		// entry of a raised key, which keeps its age there.
		e, ok := q.headLocked(l)
		if ok && (!found || int32(e.tick-earliest) < 0) {
			earliest, found = e.tick, true
		}
		if ok && below && (oldest == nil || int32(e.tick-tick) < 0) {
			oldest, tick = l, e.tick
		}
		below = below || l == top
	}
	if oldest != nil && q.tick-tick >= agingSteps {
		return oldest
	}
	q.ageCheck = earliest + agingSteps
	return nil
}

// readyEmptiedLocked releases what the ready set holds once no key is
// queued: the FIFOs can hold only stale entries then.
func (q *Queue[K]) readyEmptiedLocked() {
	if q.entries > 0 {
		for _, l := range q.levels {
			l.fifo.reset()
		}
		q.entries = 0
	}
	if len(q.levels) > maxIdleLevels {
		q.levels = nil
	}
	q.ageCheck = q.tick + agingSteps
}
