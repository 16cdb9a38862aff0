package workqueue

import "time"

// Metrics receives what queues measure, for a metrics system to export.
// Give it to a queue in Options.Metrics: nil, the default, measures
// nothing and costs nothing.
//
// New calls Queue once. Counters and gauges are read when the metrics
// system asks, through the StatsSource given to Queue, so they cost the
// queue nothing but the counting it does anyway; distributions (time in
// queue, work duration) are pushed to the QueueMetrics that Queue returns,
// for a sample of the keys, so that no key pays for a clock read of its
// own.
type Metrics interface {
	// Queue is called when the queue named name is made. src reads its
	// counters and gauges; it is safe to use from any goroutine, at any
	// time, and cheap enough for every scrape. A nil QueueMetrics
	// receives nothing.
	Queue(name string, src StatsSource) QueueMetrics
}

// StatsSource is what a Metrics implementation reads of a queue; *Queue
// implements it.
type StatsSource interface {
	// Stats returns the queue's counters and gauges.
	Stats() Stats
}

// QueueMetrics receives one queue's distributions. Its methods are called
// from the goroutines that call the queue, concurrently: they must be safe
// for concurrent use and quick, and must not call the queue.
type QueueMetrics interface {
	// Waited is called, for a sample of the keys handed out (about one
	// every 10 ms, if keys come that often), with how long the key waited
	// queued, from when it was queued to when Get handed it out, and the
	// priority it was handed out at.
	Waited(p Priority, wait time.Duration)
	// Processed is called, for a sample of the keys handed out (about
	// two every 10 ms), with the time from Get handing the key out to Done.
	Processed(took time.Duration)
	// Stop is called once the queue is shut down and no key is in
	// process; nothing is called after it.
	Stop()
}

// Stats is a snapshot of a queue's counters and gauges (see Queue.Stats).
type Stats struct {
	// Depth holds the number of queued keys at each priority that has
	// any, highest priority first. Its sum is Len.
	Depth []PriorityDepth
	// Delayed is the number of keys waiting out a delay (AddAfter,
	// AddRateLimited).
	Delayed int
	// InProcess is the number of keys handed out and not yet Done.
	InProcess int
	// Adds counts the keys the queue took: an add of a key that was
	// neither queued nor delayed, nor marked to be queued again at Done.
	Adds int64
	// Retries counts the calls of AddRateLimited.
	Retries int64
	// LongestRunning is how long the key longest in process has been,
	// and UnfinishedWork the sum of that time over the keys in process;
	// both are measured only when the queue has Metrics (zero without),
	// to within 10 ms.
	LongestRunning, UnfinishedWork time.Duration
}

// PriorityDepth is the number of keys queued at a priority.
type PriorityDepth struct {
	// Priority is the priority.
	Priority Priority
	// Keys is the number of keys queued at it.
	Keys int
}

// Stats returns the queue's counters and gauges. It is safe for
// concurrent use and cheap enough for every scrape of a metrics system:
// it takes the queue's lock for a time that grows with the number of
// priorities in use and of keys in process, not of keys queued.
func (q *Queue[K]) Stats() Stats {
	q.mu.Lock()
	defer q.mu.Unlock()
	s := Stats{
		Delayed:   q.nDelayed,
		InProcess: q.nWorking,
		Adds:      q.adds,
		Retries:   q.retries,
	}
	for _, l := range q.levels {
		if l.n > 0 {
			s.Depth = append(s.Depth, PriorityDepth{Priority: l.prio, Keys: l.n})
		}
	}
	if q.m != nil && q.workHead >= 0 {
		now := q.nowLocked()
		s.LongestRunning = time.Duration(now - q.recs[q.workHead].stamp)
		for i := q.workHead; i >= 0; i = q.recs[i].next {
			s.UnfinishedWork += time.Duration(now - q.recs[i].stamp)
		}
	}
	return s
}

// A clock read costs a good share of what a key costs the queue, so the
// times the metrics need are sampled: at most one clock read per
// samplePeriod on each of the paths that queue keys and hand them out.
const samplePeriod = 10 * time.Millisecond

// sampling is the state of a queue's metrics.
type sampling struct {
	m QueueMetrics // nil: no metrics
	// dueQueued and dueStarted say that a sample is due when a key is
	// queued, and when one is handed out. A timer sets them, and is set
	// again only when a sample is taken, so an idle queue costs nothing.
	dueQueued, dueStarted bool
	sampleTimer           *time.Timer
	sampleArmed           bool
	// coarse is a recent time: when a key is handed out, at most
	// samplePeriod before now. Keys handed out take it as their start,
	// unless they read the clock.
	coarse int64
	// workHead and workTail end the list of the keys in process, in the
	// order they were handed out, so by start; -1 when empty.
	workHead, workTail int32
	// mCalls counts the calls of m's Waited and Processed under way, made
	// outside the lock: Stop waits for the last (stopMetricsLocked).
	mCalls   int
	mStopped bool
}

// stopMetricsLocked reports whether the caller is to call m.Stop now:
// once, when the queue has finished and no other call of m is under way,
// so that nothing is called after Stop.
func (q *Queue[K]) stopMetricsLocked() bool {
	if q.m == nil || !q.finished || q.mCalls > 0 || q.mStopped {
		return false
	}
	q.mStopped = true
	return true
}

// endCall notes that a call of m's Waited or Processed counted in mCalls
// has returned, and stops the metrics if it was the last call before
// Stop.
func (q *Queue[K]) endCall() {
	q.mu.Lock()
	q.mCalls--
	stop := q.stopMetricsLocked()
	q.mu.Unlock()
	if stop {
		q.m.Stop()
	}
}

func (q *Queue[K]) startMetrics(name string, m Metrics) {
	q.m = m.Queue(name, q)
	q.dueQueued, q.dueStarted = true, true
}

func (q *Queue[K]) armSampleLocked() {
	if q.sampleArmed {
		return
	}
	q.sampleArmed = true
	if q.sampleTimer == nil {
		q.sampleTimer = time.AfterFunc(samplePeriod, q.sampleDue)
	} else {
		q.sampleTimer.Reset(samplePeriod)
	}
}

func (q *Queue[K]) sampleDue() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.sampleArmed = false
	if !q.finished {
		q.dueQueued, q.dueStarted = true, true
	}
}

// stampQueuedLocked stamps r, just queued, with the time if a sample is
// due.
func (q *Queue[K]) stampQueuedLocked(r *rec[K]) {
	if !q.dueQueued {
		r.state &^= stSampled
		return
	}
	q.dueQueued = false
	q.armSampleLocked()
	r.stamp = q.nowLocked()
	r.state |= stSampled
	q.coarse = max(q.coarse, r.stamp)
}

// startWorkLocked notes that record idx was just handed out, and returns
// its priority and, if it was sampled when queued, how long it waited.
func (q *Queue[K]) startWorkLocked(idx int32) (p Priority, wait time.Duration, sampled bool) {
	r := &q.recs[idx]
	now := q.coarse
	switch {
	case r.state&stSampled != 0:
		now = q.nowLocked()
		wait, sampled = time.Duration(now-r.stamp), true
		r.state = r.state&^stSampled | stTimed
	case q.dueStarted:
		q.dueStarted = false
		q.armSampleLocked()
		now = q.nowLocked()
		r.state |= stTimed
	}
	q.coarse = now
	r.stamp = now
	r.prev, r.next = q.workTail, -1
	if q.workTail >= 0 {
		q.recs[q.workTail].next = idx
	} else {
		q.workHead = idx
	}
	q.workTail = idx
	return r.prio, wait, sampled
}

// endWorkLocked notes that record idx is done, and returns how long it
// was in process if that was timed exactly.
func (q *Queue[K]) endWorkLocked(idx int32) (took time.Duration, timed bool) {
	r := &q.recs[idx]
	if r.prev >= 0 {
		q.recs[r.prev].next = r.next
	} else {
		q.workHead = r.next
	}
	if r.next >= 0 {
		q.recs[r.next].prev = r.prev
	} else {
		q.workTail = r.prev
	}
	r.prev, r.next = -1, -1
	if r.state&stTimed == 0 {
		return 0, false
	}
	r.state &^= stTimed
	return time.Duration(q.nowLocked() - r.stamp), true
}
