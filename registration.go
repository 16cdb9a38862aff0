package mirror

import (
	"context"
	"errors"
	"time"
)

// Registration is a handler's registration with an Informer.
type Registration struct {
	owner any // the *Informer it belongs to
	l     interface {
		hasSynced() bool
		syncedChan() <-chan struct{}
		backlog() int
	}
	failure *syncFailure
	remove  func(ctx context.Context, wait bool)
}

// HasSynced reports whether the informer has synced and this handler has
// been handed every object of the initial list (or, for a handler added
// late, of its replay of the cache). It never goes back to false.
func (r *Registration) HasSynced() bool { return r.l.hasSynced() }

// Synced returns a channel that is closed once HasSynced is true.
func (r *Registration) Synced() <-chan struct{} { return r.l.syncedChan() }

// SyncFailed returns a channel that is closed once the informer has
// stopped waiting for its first sync (see Informer.SyncFailed).
func (r *Registration) SyncFailed() <-chan struct{} { return r.failure.ch }

// SyncErr returns why the informer stopped waiting for its first sync, or
// nil (see Informer.SyncErr).
func (r *Registration) SyncErr() error { return r.failure.get() }

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

// AddEventHandler registers h. It may be called before Run or while Run
// runs. A handler added to a running informer first receives every cached
// object as OnAdd(obj, true), then every later change. A handler added
// while Run loads a checkpoint (see CheckpointOptions) is one registered
// before Run: once the load is complete it receives the checkpoint's
// objects, each once, unless HandlerOptions.ChangesOnly is set, then every
// later change. Once the context given to Run has ended, even before Run
// has returned, it returns ErrStopped.
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

	inf.applyMu.Lock()
	// Under applyMu, Run has either fixed its resync period and the
	// cache's content for the handlers (live), or does both later, with
	// this handler among those registered.
	requested := period
	if running := time.Duration(inf.resyncPeriod.Load()); inf.live && period > 0 && period < running {
		// The resync timer is already set; it cannot tick faster for
		// this handler.
		period = running
	}
	l := newListener[K](h, period, opts.MaxBacklog, inf.report, inf.HasSynced)
	l.name, l.changesOnly = opts.Name, opts.ChangesOnly
	l.nextResync = time.Now().Add(period)
	err := inf.proc.add(l, func() {
		l.follow(&inf.proc.feed)
		if inf.live {
			l.replay(inf.cache.All(), l.pos.seq)
		}
	})
	inf.applyMu.Unlock()
	if err != nil {
		return nil, err
	}
	if period != requested {
		inf.logger.Warn("mirror: handler resync period raised to the informer's", "requested", requested, "used", period)
	}
	reg := &Registration{owner: inf, l: l, failure: &inf.failure}
	reg.remove = func(ctx context.Context, wait bool) {
		if inf.proc.remove(l) && wait {
			l.waitStopped(ctx)
		}
	}
	return reg, nil
}

// errForeignRegistration is returned for a Registration that is not the
// receiver's.
var errForeignRegistration = errors.New("mirror: registration of another informer")

// RemoveEventHandler unregisters the handler of r, a registration with
// inf. Its pending notifications are dropped; a call in progress finishes
// on its own. Removing a handler again does nothing.
func (inf *Informer[K, T]) RemoveEventHandler(r *Registration) error {
	return inf.removeEventHandler(context.Background(), r, false)
}

// RemoveEventHandlerAndWait is RemoveEventHandler that also waits until a
// call in progress has returned, or ctx ends (then it returns ctx.Err()).
func (inf *Informer[K, T]) RemoveEventHandlerAndWait(ctx context.Context, r *Registration) error {
	return inf.removeEventHandler(ctx, r, true)
}

func (inf *Informer[K, T]) removeEventHandler(ctx context.Context, r *Registration, wait bool) error {
	if r == nil || r.owner != any(inf) {
		return errForeignRegistration
	}
	r.remove(ctx, wait)
	if wait {
		return ctx.Err()
	}
	return nil
}
