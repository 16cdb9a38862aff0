package workqueue

import "time"

// The tick: one timer for the queue's clockwork, set every tickPeriod
// (MaxWait/agingSteps, or DefaultMaxWait/agingSteps without aging) while
// keys are queued, retry counts are kept after Done, or the tables have
// room to give back, and stopped otherwise, so that an idle queue costs
// nothing. Each tick advances the aging clock (ready.go), forgets the
// retry counts whose time is up and tidies the tables (keys.go).

// minTick bounds the tick period from below, so that a tiny MaxWait does
// not keep the timer firing.
const minTick = time.Millisecond

// armTickLocked sets the tick timer.
func (q *Queue[K]) armTickLocked() {
	q.tickArmed = true
	if q.tickTimer == nil {
		q.tickTimer = time.AfterFunc(q.tickPeriod, q.onTick)
	} else {
		q.tickTimer.Reset(q.tickPeriod)
	}
}

func (q *Queue[K]) onTick() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.tickArmed = false
	if q.shutdown {
		return
	}
	q.tick++
	q.forgetDueLocked()
	q.tidyLocked(false)
	if q.nReady > 0 || q.remembered.len() > 0 || q.oversizedLocked() {
		q.armTickLocked()
	}
}
