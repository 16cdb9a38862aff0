package mirror

import (
	"context"
	"errors"
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
	remove  func(ctx context.Context, wait bool) error
}

// HasSynced reports whether the informer has synced and this handler has
// been handed every object of the initial list (or of its late replay of
// the cache). It never goes back to false.
func (r *Registration) HasSynced() bool { return r.l.hasSynced() }

// WaitForSync waits until HasSynced is true and returns nil, or returns
// ctx.Err() or the informer's permanent failure (see Informer.WaitForSync).
func (r *Registration) WaitForSync(ctx context.Context) error {
	return waitSynced(ctx, r.l.syncedChan(), r.failure)
}

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

// AddEventHandler registers h, before or while Run runs. A handler added
// to a running informer first receives every cached object as OnAdd(obj,
// true), then every later change; one added while Run loads a checkpoint
// counts as registered before Run. Once Run's context has ended it returns
// ErrStopped. client-go's AddEventHandlerWithResyncPeriod(h, p) is
// AddEventHandler(h, HandlerOptions{ResyncPeriod: p}).
func (inf *Informer[K, T]) AddEventHandler(h Handler[T], opts HandlerOptions) (*Registration, error) {
	if h == nil {
		return nil, errors.New("mirror: AddEventHandler with a nil handler")
	}
	return inf.addHandler(h, nil, opts)
}

// AddChangeHandler is AddEventHandler for a function of Changes, which
// carry each notification's key and Origin too; a late handler's replay
// comes as Added with OriginInitialList.
func (inf *Informer[K, T]) AddChangeHandler(f func(Change[K, T]), opts HandlerOptions) (*Registration, error) {
	if f == nil {
		return nil, errors.New("mirror: AddChangeHandler with a nil function")
	}
	return inf.addHandler(nil, f, opts)
}

// addHandler registers h or f, whichever is not nil.
func (inf *Informer[K, T]) addHandler(h Handler[T], f func(Change[K, T]), opts HandlerOptions) (*Registration, error) {
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
	l := newListener(h, f, period, opts.MaxBacklog, inf.report, inf.HasSynced)
	l.name, l.changesOnly = opts.Name, opts.ChangesOnly
	l.stuckAfter = stuckAfter(opts.StuckAfter)

	inf.applyMu.Lock()
	err := inf.proc.add(l, func() {
		l.follow(&inf.proc.feed)
		if inf.live {
			l.replay(collectReplay(inf.cache.All()), l.pos.seq)
		}
	})
	inf.applyMu.Unlock()
	if err != nil {
		return nil, err
	}
	reg := &Registration{owner: inf, l: l, failure: &inf.failure}
	reg.remove = func(ctx context.Context, wait bool) error {
		inf.proc.remove(l)
		if wait {
			// Even if it was removed before: the call in progress
			// then may not have returned yet.
			return l.waitStopped(ctx)
		}
		return nil
	}
	return reg, nil
}

// errForeignRegistration is RemoveEventHandler's error for a
// Registration that is not the receiver's. It is unexported: the doc
// promises that it is the only error, so err != nil tells it.
var errForeignRegistration = errors.New("mirror: registration of another informer")

// RemoveEventHandler unregisters r's handler. Once it returns no call of
// the handler begins (one already begun finishes) and its waiting
// notifications are dropped. Removing again does nothing; it may be called
// from a handler. Its only error is for r nil or another informer's.
func (inf *Informer[K, T]) RemoveEventHandler(r *Registration) error {
	return inf.removeEventHandler(context.Background(), r, false)
}

// RemoveEventHandlerAndWait is RemoveEventHandler that also waits until
// the handler's call in progress, if any, has returned. If ctx ends first
// it returns ctx.Err(), the handler removed all the same. Called from the
// handler itself it waits until ctx ends: use RemoveEventHandler there.
func (inf *Informer[K, T]) RemoveEventHandlerAndWait(ctx context.Context, r *Registration) error {
	return inf.removeEventHandler(ctx, r, true)
}

func (inf *Informer[K, T]) removeEventHandler(ctx context.Context, r *Registration, wait bool) error {
	if r == nil || r.owner != any(inf) {
		return errForeignRegistration
	}
	return r.remove(ctx, wait)
}
