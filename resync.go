package mirror

import (
	"context"
	"time"
)

// The periodic resync: every handler with a resync period is offered the
// whole cache again, as OnUpdate(obj, obj), once every period.
//
// Each handler keeps a schedule of its own: due times a whole number of
// periods after its start (the informer's first sync, or its registration
// if later). A round finds due every handler whose due time has come and
// moves that handler's due time on by periods, never to "now plus a
// period": a round that runs late, as rounds do by however long the
// scheduler or the queue kept them, then neither shifts the handler's
// schedule nor makes the next round find it not yet due. The informer
// waits for the earliest due time of its handlers, whatever their
// periods and whenever they were added, so no handler waits for a round
// timed for another.
//
// A round is applied as one step against the cache, under applyMu: the
// cache then holds exactly what the handlers have been told, so offering
// it again, ordered after every notification distributed before, can
// neither roll a handler back nor go ahead of a change. Who is due is
// decided in that same step, so a round waiting to be applied is never
// handed to the handlers found due by a later one. The queue applies a
// round in turn with the changes queued before it.

// resyncLoop runs the informer's resync rounds, from its first sync until
// ctx ends.
func (inf *Informer[K, T]) resyncLoop(ctx context.Context) {
	select {
	case <-inf.syncedCh:
	case <-ctx.Done():
		return
	}
	p := &inf.proc
	p.startResync(time.Now())
	t := time.NewTimer(time.Hour)
	t.Stop()
	defer t.Stop()
	// asked is the due time of the last round asked of the queue: until
	// the queue applies it, the schedule still says so.
	var asked time.Time
	for {
		due := p.nextResync()
		var fire <-chan time.Time
		if !due.IsZero() && due.After(asked) {
			t.Reset(time.Until(due))
			fire = t.C
		}
		select {
		case <-ctx.Done():
			return
		case <-p.resyncMoved:
			t.Stop()
			continue
		case <-fire:
		}
		asked = due
		// One round waiting serves every handler due when it is applied,
		// so a second is not queued behind it.
		_ = inf.queue.Resync()
	}
}

// resyncLocked applies a resync round at now: every handler due offers
// itself every cached object again. applyMu must be held.
func (inf *Informer[K, T]) resyncLocked(now time.Time) {
	if !inf.proc.shouldResync(now) {
		return
	}
	for k, obj := range inf.cache.All() {
		inf.proc.distribute(notification[K, T]{kind: notifyUpdate, key: k, old: obj, obj: obj, origin: OriginResync}, true)
	}
}

// startResync starts the schedule of every listener with a resync period
// at now, the informer's first sync: their rounds then fall together
// wherever their periods allow. Listeners added later start from their
// registration.
func (p *processor[K, T]) startResync(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.listeners {
		if l.resyncPeriod > 0 {
			l.nextResync = now.Add(l.resyncPeriod)
		}
	}
}

// nextResync returns the earliest time a listener is due for a resync;
// zero if no listener has a resync period.
func (p *processor[K, T]) nextResync() time.Time {
	p.mu.RLock()
	defer p.mu.RUnlock()
	var next time.Time
	for _, l := range p.listeners {
		if l.resyncPeriod > 0 && (next.IsZero() || l.nextResync.Before(next)) {
			next = l.nextResync
		}
	}
	return next
}

// shouldResync finds the listeners due for a resync at now, records them
// in syncing, moves their next resync on (see nextDue) and reports whether
// there are any.
func (p *processor[K, T]) shouldResync(now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.syncing = p.syncing[:0]
	for _, l := range p.listeners {
		if l.resyncPeriod > 0 && !now.Before(l.nextResync) {
			p.syncing = append(p.syncing, l)
			l.nextResync = nextDue(l.nextResync, l.resyncPeriod, now)
		}
	}
	if len(p.syncing) == 0 {
		return false
	}
	p.resyncChanged()
	return true
}

// resyncChanged tells the resync loop that a listener's next resync was
// set or moved.
func (p *processor[K, T]) resyncChanged() {
	select {
	case p.resyncMoved <- struct{}{}:
	default:
	}
}

// nextDue returns the first of due+period, due+2*period, … that is after
// now: the due time after a round at now for a round due at due. A round
// late by less than a period leaves the next where it was; one later than
// that stands for the rounds it missed instead of being followed by them
// at once.
func nextDue(due time.Time, period time.Duration, now time.Time) time.Time {
	if next := due.Add(period); next.After(now) {
		return next
	}
	return due.Add((now.Sub(due)/period + 1) * period)
}
