package mirror

import (
	"context"
	"errors"
	"sync"
)

// defaultSyncFailureLimit is InformerOptions.SyncFailureLimit's default:
// enough to tell a refusal from a fluke, few enough that a program that
// cannot read its source hears of it within seconds.
const defaultSyncFailureLimit = 3

// syncFailure records an informer giving up waiting for its first sync,
// and knows its last failure, for a wait that its context ends.
type syncFailure struct {
	ch chan struct{} // closed when err is set

	// last, if set, returns the last failure to list or watch, if it is
	// not over (see Freshness.Err).
	last func() error

	mu  sync.Mutex
	n   int
	err error
}

// count records err, a permanent failure before the first sync, and gives
// up once limit of them have come.
func (f *syncFailure) count(err error, limit int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return
	}
	if f.n++; f.n >= limit {
		f.err = err
		close(f.ch)
	}
}

func (f *syncFailure) get() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// lastFailure returns the informer's last failure to list or watch, if
// it is not over: its Reflector's (see Freshness.Err).
func (inf *Informer[K, T]) lastFailure() error {
	r := inf.reflector.Load()
	if r == nil {
		return nil
	}
	return r.lastFailure()
}

// notSyncedError is the error of a wait for sync that its context ended
// while the source was failing: it names the context's error and the last
// failure to list or watch, and errors.Is finds both.
type notSyncedError struct {
	ctxErr, last error
}

func (e *notSyncedError) Error() string {
	return "mirror: not synced: " + e.ctxErr.Error() + "; last error: " + causeText(e.last)
}

func (e *notSyncedError) Unwrap() []error { return []error{e.ctxErr, e.last} }

// HasSynced reports whether the cache holds the whole initial list (or has
// applied a change that came before any list). It never goes back to false.
func (inf *Informer[K, T]) HasSynced() bool { return inf.synced.Load() }

// WaitForSync waits until HasSynced is true and returns nil. If ctx ends
// first, it returns ctx.Err(), or an error wrapping both it and the last
// failure to list or watch, if any. Failures do not end the wait, unless
// the source refused the informer for good before its first sync (see
// InformerOptions.SyncFailureLimit): then it returns that error, which
// wraps ErrPermanent.
func (inf *Informer[K, T]) WaitForSync(ctx context.Context) error {
	return waitSynced(ctx, inf.syncedCh, &inf.failure)
}

// waitSynced waits until synced is closed, failure gives up or ctx ends.
func waitSynced(ctx context.Context, synced <-chan struct{}, failure *syncFailure) error {
	select {
	case <-synced:
		return nil
	default:
	}
	select {
	case <-synced:
		return nil
	case <-failure.ch:
		select {
		case <-synced: // synced after all, in the meantime
			return nil
		default:
			return failure.get()
		}
	case <-ctx.Done():
		if failure.last != nil {
			if last := failure.last(); last != nil {
				return &notSyncedError{ctxErr: ctx.Err(), last: last}
			}
		}
		return ctx.Err()
	}
}

// SyncWaiter is anything WaitForCacheSync can wait for: an Informer or a
// Registration.
type SyncWaiter interface {
	// WaitForSync waits until it has synced, and returns nil; or returns
	// why it will not sync without help, or ctx.Err().
	WaitForSync(ctx context.Context) error
}

// WaitForCacheSync waits until every waiter has synced and returns nil.
// If ctx ends first, it returns the error of the first waiter, in order,
// that had not synced (see Informer.WaitForSync). A waiter's own error,
// such as ErrPermanent, is returned at once. It is client-go's
// cache.WaitForCacheSync(stopCh, inf.HasSynced), returning an error.
func WaitForCacheSync(ctx context.Context, waiters ...SyncWaiter) error {
	switch len(waiters) {
	case 0:
		return nil
	case 1:
		return waiters[0].WaitForSync(ctx)
	}
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	errs := make([]error, len(waiters))
	var wg sync.WaitGroup
	for i, w := range waiters {
		wg.Go(func() {
			if errs[i] = w.WaitForSync(wctx); errs[i] != nil {
				cancel(errs[i]) // the first cause sticks
			}
		})
	}
	wg.Wait()
	if ctx.Err() == nil {
		return context.Cause(wctx)
	}
	// The caller's context ended: the waiters that had not synced say
	// why, the first naming a failure best.
	for _, err := range errs {
		var ns *notSyncedError
		if errors.As(err, &ns) {
			return err
		}
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil // every waiter synced, before the context ended
}
