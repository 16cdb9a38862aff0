package workqueue

import (
	"context"
	"time"
)

// ShutDown shuts the queue down at once: Get hands out no more keys and
// returns ErrShutdown, adds are ignored, and the queued and delayed keys
// are dropped. Keys in process stay so until Done is called for them,
// and are then dropped too. ShutDown does not wait for them; it may be
// called any number of times, and during a ShutDownWithDrain, which it
// cuts short.
func (q *Queue[K]) ShutDown() {
	q.mu.Lock()
	if q.shutdown {
		q.mu.Unlock()
		return
	}
	q.closing, q.shutdown = true, true
	q.dropLocked(true)
	q.cond.Broadcast()
	stopMetrics := q.settleLocked()
	q.mu.Unlock()
	if stopMetrics {
		q.m.Stop()
	}
}

// ShutDownWithDrain shuts the queue down once the work in it is done. At
// once, adds are ignored and the delayed keys are dropped: their delays
// ask for a later that will not come. Then Get goes on handing out the
// queued keys (and those in process that were added again, after their
// Done) and returns ErrShutdown once none is left.
//
// ShutDownWithDrain returns nil when every queued key has been processed
// and Done has been called for every key in process. If ctx ends first, it
// shuts the queue down as ShutDown does and returns ctx.Err() at once. If
// ShutDown cut the drain short, dropping queued keys, it returns
// ErrShutdown once the keys in process are done. It may be called any
// number of times, from any number of goroutines.
func (q *Queue[K]) ShutDownWithDrain(ctx context.Context) error {
	q.mu.Lock()
	if !q.closing {
		q.closing = true
		q.dropLocked(false)
		q.cond.Broadcast()
	}
	if q.drained == nil {
		q.drained = make(chan struct{})
		if q.finished {
			close(q.drained)
		}
	}
	stopMetrics := q.settleLocked()
	drained := q.drained
	q.mu.Unlock()
	if stopMetrics {
		q.m.Stop()
	}
	select {
	case <-drained:
	case <-ctx.Done():
		select {
		case <-drained:
		default:
			q.ShutDown()
			return ctx.Err()
		}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.dropped {
		return ErrShutdown
	}
	return nil
}

// dropLocked drops the delayed keys and, if all, the queued keys and the
// marks of keys in process to be queued again.
func (q *Queue[K]) dropLocked(all bool) {
	if all && (q.nReady > 0 || q.nDirty > 0) {
		q.dropped = true
	}
	for _, idx := range q.index {
		r := &q.recs[idx]
		r.state &^= stDelayed
		if all {
			r.state &^= stReady | stSampled
		}
		if r.state&(stReady|stWorking) == 0 {
			q.releaseLocked(idx) // deleting from the map being ranged over is fine
		}
	}
	q.delayed, q.nDelayed = nil, 0
	q.remembered.reset() // the remembered keys were let go of above
	if q.delayTimer != nil {
		q.delayTimer.Stop()
	}
	if all {
		q.nReady, q.nDirty = 0, 0
		q.readyEmptiedLocked()
		q.levels = nil
		q.stopTimersLocked()
	}
	q.tidyLocked(true)
}

// settleLocked finishes a shutdown once nothing is queued or in process,
// and reports whether the metrics are to be stopped now.
func (q *Queue[K]) settleLocked() (stopMetrics bool) {
	if !q.closing || q.finished || q.nReady > 0 || q.nWorking > 0 {
		return false
	}
	q.shutdown, q.finished = true, true
	q.stopTimersLocked()
	q.cond.Broadcast()
	if q.drained != nil {
		close(q.drained)
	}
	return q.stopMetricsLocked()
}

// stopTimersLocked stops the queue's timers; their functions, if already
// running, find the queue shut down and do nothing.
func (q *Queue[K]) stopTimersLocked() {
	for _, t := range [...]*time.Timer{q.tickTimer, q.delayTimer, q.sampleTimer} {
		if t != nil {
			t.Stop()
		}
	}
	q.tickArmed, q.sampleArmed = false, false
	q.delayArmedAt = noTimer
}
