package mirror

import (
	"sync"
	"sync/atomic"
	"time"
)

// A clock read costs a good share of what the informer spends on an event
// (65 ns on a 2-core VM), so measurements that need the time are sampled:
// at most one per samplePeriod on a path taken per event or per batch.
const samplePeriod = 10 * time.Millisecond

// sampler says when a sample is due: at most once per period, the first
// time it is asked after the period has passed. A timer sets the flag and
// is armed again only when a sample is taken, so an idle sampler costs
// nothing. take is called from one goroutine at a time.
type sampler struct {
	period time.Duration
	due    atomic.Bool
	timer  *time.Timer
}

// start makes the first take due at once.
func (s *sampler) start(period time.Duration) {
	s.period = period
	s.due.Store(true)
	s.timer = time.AfterFunc(period, func() { s.due.Store(true) })
	s.timer.Stop()
}

// take reports whether a sample is due, and if so starts the next period.
func (s *sampler) take() bool {
	if !s.due.Load() {
		return false
	}
	s.due.Store(false)
	s.timer.Reset(s.period)
	return true
}

// stop stops the timer; take is not called after it.
func (s *sampler) stop() {
	if s.timer != nil {
		s.timer.Stop()
	}
}

// stampLog holds the times at which positions in a sequence were reached
// (notifications published, entries queued), a sample of them, for the
// consumers of the sequence to measure how long they took to get there.
// It keeps the last len(stamps) stamps; a consumer that falls further
// behind skips the ones it missed. It is safe for concurrent use.
type stampLog struct {
	mu     sync.Mutex
	stamps [64]stamp
	// n counts the stamps ever added; stamp i is at stamps[i%len]. It is
	// written under mu and read without it by passed, whose consumers
	// mostly find nothing new: one load then spares them the lock.
	n atomic.Uint64
}

type stamp struct {
	seq uint64    // the position reached: everything before it is in
	at  time.Time // when
}

// add records that the sequence reached seq at at.
func (l *stampLog) add(seq uint64, at time.Time) {
	l.mu.Lock()
	n := l.n.Load()
	l.stamps[n%uint64(len(l.stamps))] = stamp{seq, at}
	l.n.Store(n + 1)
	l.mu.Unlock()
}

// count returns the number of stamps ever added: a new consumer starts
// there.
func (l *stampLog) count() uint64 {
	return l.n.Load()
}

// passed calls observe with the age at now of each stamp, from the one
// numbered *next on, whose position a consumer has now passed (seq <=
// pos), and moves *next past them. A stamp is added before the position
// it names is handed to consumers, so one that has passed it sees it.
func (l *stampLog) passed(next *uint64, pos uint64, now func() time.Time, observe func(time.Duration)) {
	if l.n.Load() == *next {
		return // no stamp since the last pass: the common case
	}
	l.mu.Lock()
	n := l.n.Load()
	if n-*next > uint64(len(l.stamps)) {
		*next = n - uint64(len(l.stamps))
	}
	var ages [len(stampLog{}.stamps)]time.Time
	k := 0
	for *next < n {
		s := l.stamps[*next%uint64(len(l.stamps))]
		if s.seq > pos {
			break
		}
		ages[k] = s.at
		k++
		*next++
	}
	l.mu.Unlock()
	if k == 0 {
		return
	}
	t := now()
	for _, at := range ages[:k] {
		observe(t.Sub(at))
	}
}

// arrivals measures, for a sample of the entries of a queue, how long they
// waited: the producer stamps the positions it queues at, once per
// samplePeriod at most, and the consumer passes the stamps as it applies
// what it popped. The zero value measures nothing; on turns it on.
type arrivals struct {
	on     bool
	sample sampler // the producer's: under the queue's lock
	stamps stampLog
	next   uint64 // the consumer's first stamp not passed
}

// start turns measuring on; stop turns it off. Both are called while
// neither producer nor consumer runs.
func (a *arrivals) start() {
	a.on = true
	a.sample.start(samplePeriod)
}

func (a *arrivals) stop() {
	a.sample.stop()
	a.on = false
}

// queued is called by the producer, under the queue's lock, once the
// queue has taken n entries in all.
func (a *arrivals) queued(n uint64) {
	if a.on && a.sample.take() {
		a.stamps.add(n, time.Now())
	}
}

// applied is called by the consumer once it has applied n entries in
// all; observe receives how long each stamp passed had waited.
func (a *arrivals) applied(n uint64, observe func(time.Duration)) {
	if a.on {
		a.stamps.passed(&a.next, n, time.Now, observe)
	}
}
