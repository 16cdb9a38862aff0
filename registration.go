package mirror

import (
	"context"
	"errors"
	"time"
)

// Registration is a handler's registration with an Informer.
type Registration struct {
	l interface {
		hasSynced() bool
		syncedChan() <-chan struct{}
		backlog() int
	}
	remove func(ctx context.Context, wait bool) error
}

// HasSynced reports whether the informer has synced and this handler has
// been handed every object of the initial list (or, for a handler added
// late, of its replay of the cache). It never goes back to false.
func (r *Registration) HasSynced() bool { return r.l.hasSynced() }

// Synced returns a channel that is closed once HasSynced is true.
func (r *Registration) Synced() <-chan struct{} { return r.l.syncedChan() }

// Backlog returns the number of notifications waiting for the handler.
func (r *Registration) Backlog() int { return r.l.backlog() }

func (l *listener[K, T]) syncedChan() <-chan struct{} {
	// The channel closes from the listener's goroutine; poke it in case
	// the upstream sync happened with nothing left to deliver.
	if !l.hasSynced() {
		l.wakeUp()
	}
	return l.syncedCh
}

// AddEventHandler registers h. It may be called before or after Run. A
// handler added to a running informer first receives every cached object
// as OnAdd(obj, true), then every later change.
func (inf *Informer[K, T]) AddEventHandler(h Handler[T], opts HandlerOptions) (*Registration, error) {
	if h == nil {
		return nil, errors.New("mirror: AddEventHandler with a nil handler")
	}
	period := opts.ResyncPeriod
	if period == 0 {
		period = inf.opts.ResyncPeriod
	}
	if period < 0 {
		period = 0
	}
	if period > 0 && period < minResyncPeriod {
		period = minResyncPeriod
	}
	if running := time.Duration(inf.resyncPeriod.Load()); inf.started.Load() && period > 0 && period < running {
		// The resync timer is already set; it cannot tick faster for
		// this handler.
		inf.logger.Warn("mirror: handler resync period raised to the informer's", "requested", period, "used", running)
		period = running
	}
	l := newListener[K](h, period, opts.MaxBacklog, inf.report, inf.HasSynced)
	l.nextResync = time.Now().Add(period)

	inf.applyMu.Lock()
	l.follow(&inf.proc.feed)
	if inf.started.Load() {
		for k, obj := range inf.cache.All() {
			l.pushOwn(notification[K, T]{kind: notifyAdd, key: k, obj: obj, initial: true}, l.pos.seq)
		}
	}
	inf.proc.add(l)
	inf.applyMu.Unlock()

	reg := &Registration{l: l}
	reg.remove = func(ctx context.Context, wait bool) error {
		if !inf.proc.remove(l) {
			return errors.New("mirror: handler not registered")
		}
		if !wait || !inf.started.Load() {
			return nil
		}
		select {
		case <-l.done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return reg, nil
}

// RemoveEventHandler unregisters a handler. Its pending notifications are
// dropped; a call in progress finishes on its own.
func (inf *Informer[K, T]) RemoveEventHandler(r *Registration) error {
	return r.remove(context.Background(), false)
}

// RemoveEventHandlerAndWait unregisters a handler and waits until a call
// in progress has returned, or ctx ends.
func (inf *Informer[K, T]) RemoveEventHandlerAndWait(ctx context.Context, r *Registration) error {
	return r.remove(ctx, true)
}

// Syncer is anything with a channel that closes once it has synced:
// an Informer or a Registration.
type Syncer interface {
	Synced() <-chan struct{}
}

// WaitForCacheSync waits until every syncer has synced, or ctx ends (then
// it returns ctx.Err()).
func WaitForCacheSync(ctx context.Context, syncers ...Syncer) error {
	for _, s := range syncers {
		select {
		case <-s.Synced():
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
