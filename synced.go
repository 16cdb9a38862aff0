package mirror

import (
	"context"
	"sync"
)

// defaultSyncFailureLimit is InformerOptions.SyncFailureLimit's default:
// enough to tell a refusal from a fluke, few enough that a program that
// cannot read its source hears of it within seconds.
const defaultSyncFailureLimit = 3

// syncFailure records an informer giving up waiting for its first sync.
type syncFailure struct {
	ch chan struct{} // closed when err is set

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

// HasSynced reports whether the cache holds the whole initial list (or
// the informer has applied a change that came before any list). It never
// goes back to false. To wait for it, use WaitForSync.
func (inf *Informer[K, T]) HasSynced() bool { return inf.synced.Load() }

// WaitForSync waits until HasSynced is true and returns nil. It returns
// ctx.Err() if ctx ends first, and the error that made the informer give
// up if its source refused it for good before its first sync (see
// InformerOptions.SyncFailureLimit; the error wraps ErrPermanent).
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
// It returns ctx.Err() if ctx ends first, and the first error a waiter
// returns otherwise, such as an informer's source refusing it for good
// (wrapping ErrPermanent), without waiting for the others.
//
// client-go's cache.WaitForCacheSync(stopCh, inf.HasSynced) is
// WaitForCacheSync(ctx, inf) here, and it returns an error instead of a
// bool.
func WaitForCacheSync(ctx context.Context, waiters ...SyncWaiter) error {
	switch len(waiters) {
	case 0:
		return nil
	case 1:
		return waiters[0].WaitForSync(ctx)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for _, w := range waiters {
		wg.Go(func() {
			if err := w.WaitForSync(ctx); err != nil {
				cancel(err) // the first cause sticks
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx)
}
