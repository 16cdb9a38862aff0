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
// goes back to false.
func (inf *Informer[K, T]) HasSynced() bool { return inf.synced.Load() }

// Synced returns a channel that is closed once HasSynced is true.
func (inf *Informer[K, T]) Synced() <-chan struct{} { return inf.syncedCh }

// SyncErr returns the error that made the informer stop waiting for its
// first sync (see InformerOptions.SyncFailureLimit), or nil if it has not
// given up. It stays set if the informer syncs later; HasSynced tells.
func (inf *Informer[K, T]) SyncErr() error { return inf.failure.get() }

// SyncFailed returns a channel that is closed once SyncErr is not nil.
func (inf *Informer[K, T]) SyncFailed() <-chan struct{} { return inf.failure.ch }

// Syncer is anything with a channel that closes once it has synced:
// an Informer or a Registration.
type Syncer interface {
	// Synced returns a channel that is closed once it has synced.
	Synced() <-chan struct{}
}

// SyncFailer is a Syncer that can tell that it will not sync without help,
// as Informer and Registration can when their source refuses them for good
// (ErrPermanent).
type SyncFailer interface {
	Syncer
	// SyncFailed returns a channel that is closed once syncing has
	// failed.
	SyncFailed() <-chan struct{}
	// SyncErr returns why syncing failed, or nil.
	SyncErr() error
}

// WaitForCacheSync waits until every syncer has synced. It returns
// ctx.Err() if ctx ends first, and the SyncErr of a SyncFailer that fails
// before it syncs.
func WaitForCacheSync(ctx context.Context, syncers ...Syncer) error {
	for _, s := range syncers {
		var failed <-chan struct{}
		f, canFail := s.(SyncFailer)
		if canFail {
			failed = f.SyncFailed()
		}
		select {
		case <-s.Synced():
			continue
		default:
		}
		select {
		case <-s.Synced():
		case <-failed:
			select {
			case <-s.Synced(): // synced after all, in the meantime
			default:
				return f.SyncErr()
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
