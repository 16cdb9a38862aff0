package k8s

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/listwatch/mirror"
)

// Handle is one consumer's hold on an informer of a Factory. The informer
// runs, shared with the other consumers of the same objects, until every
// handle on it is released.
//
// A Handle is safe for concurrent use. Once released it holds nothing:
// Informer and Lister return nil, and the other methods ErrReleased.
type Handle[T Object] struct {
	e   *entry
	inf atomic.Pointer[mirror.Informer[Key, T]]

	mu       sync.Mutex
	released bool
	regs     []*mirror.Registration

	// releasedCtx ends when h is released, so that a WaitForSync in
	// progress returns.
	releasedCtx context.Context
	endRelease  context.CancelFunc
}

func newHandle[T Object](e *entry, inf *mirror.Informer[Key, T]) *Handle[T] {
	h := &Handle[T]{e: e}
	h.inf.Store(inf)
	h.releasedCtx, h.endRelease = context.WithCancel(context.Background())
	return h
}

// Informer returns the shared informer, for reading its cache (Get, List,
// ByIndex, ...), or nil once h is released. The factory runs it: the
// caller must not call its Run. A handler added through its
// AddEventHandler stays when h is released; add them through h's.
func (h *Handle[T]) Informer() *mirror.Informer[Key, T] { return h.inf.Load() }

// Lister returns a Lister of the shared informer's cache, which serves
// label selectors from the informer's label index, or nil once h is
// released.
func (h *Handle[T]) Lister() *Lister[T] {
	inf := h.inf.Load()
	if inf == nil {
		return nil
	}
	return &Lister[T]{inf: inf}
}

// AddEventHandler adds a handler to the shared informer (see
// mirror.Informer.AddEventHandler): added once the informer runs, it
// first gets every cached object. Releasing h removes it.
func (h *Handle[T]) AddEventHandler(handler mirror.Handler[T], opts mirror.HandlerOptions) (*mirror.Registration, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	inf := h.inf.Load()
	if h.released || inf == nil {
		return nil, ErrReleased
	}
	r, err := inf.AddEventHandler(handler, opts)
	if err != nil {
		return nil, err
	}
	h.regs = append(h.regs, r)
	return r, nil
}

// HasSynced reports whether the shared informer has synced; false once h
// is released.
func (h *Handle[T]) HasSynced() bool {
	inf := h.inf.Load()
	return inf != nil && inf.HasSynced()
}

// WaitForSync waits until the shared informer has synced, as
// mirror.Informer.WaitForSync does; it returns ErrReleased once h is
// released, a wait in progress included. It makes a Handle a mirror.SyncWaiter, for
// mirror.WaitForCacheSync over several.
func (h *Handle[T]) WaitForSync(ctx context.Context) error {
	inf := h.inf.Load()
	if inf == nil {
		return ErrReleased
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(h.releasedCtx, cancel)
	defer stop()
	err := inf.WaitForSync(wctx)
	if err != nil && h.releasedCtx.Err() != nil && ctx.Err() == nil {
		return ErrReleased
	}
	return err
}

// Gone reports whether the informer's resource has gone away after the
// informer synced (see ErrResourceGone) and not come back yet. The cache
// keeps what it held meanwhile.
func (h *Handle[T]) Gone() bool { return h.e.gone.is() }

// Release gives up h's hold on the informer and removes the handlers
// added through h. If h was the informer's last handle, the informer
// stops and Release returns once it has: its watch has ended, its
// goroutines have returned (a handler's call in progress included, so do
// not release from a handler of the same informer), and the factory no
// longer holds it or its cache. Release of a released handle does
// nothing.
func (h *Handle[T]) Release() {
	h.mu.Lock()
	if h.released {
		h.mu.Unlock()
		return
	}
	h.released = true
	h.endRelease()
	inf := h.inf.Swap(nil)
	regs := h.regs
	h.regs = nil
	h.mu.Unlock()
	for _, r := range regs {
		_ = inf.RemoveEventHandler(r) // only fails for another informer's
	}
	h.e.f.release(h.e)
}
