package mirror

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/listwatch/mirror/source"
)

// versionGate lets readers wait until the cache has applied a version. The
// goroutine applying the queue publishes the cache's version after each
// batch; a publication that moves it wakes every waiter, which then
// compares the new version with its own: there is no polling, and a cache
// that applies nothing costs its waiters nothing.
type versionGate struct {
	mu sync.Mutex
	// rv is the version the cache has applied, and open whether the
	// cache holds only part of the change made at rv.
	rv   string
	open bool
	// moved is closed, and set to nil, when the version moves; nil while
	// nobody waits.
	moved chan struct{}
	// ended is set once the informer has stopped: the version moves no
	// more.
	ended bool
}

// publish records that the cache has applied rv (part of its change, if
// open), and wakes the waiters if that is news.
func (g *versionGate) publish(rv string, open bool) {
	if rv == "" {
		return
	}
	g.mu.Lock()
	if rv != g.rv || open != g.open {
		g.rv, g.open = rv, open
		if g.moved != nil {
			close(g.moved)
			g.moved = nil
		}
	}
	g.mu.Unlock()
}

// end records that the informer has stopped and wakes the waiters.
func (g *versionGate) end() {
	g.mu.Lock()
	g.ended = true
	if g.moved != nil {
		close(g.moved)
		g.moved = nil
	}
	g.mu.Unlock()
}

// state returns the applied version, whether its change is partly
// applied, whether the informer has stopped, and a channel closed when
// any of that changes.
func (g *versionGate) state() (rv string, open, ended bool, moved <-chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.ended && g.moved == nil {
		g.moved = make(chan struct{})
	}
	return g.rv, g.open, g.ended, g.moved
}

// current returns the applied version and whether its change is partly
// applied, without arranging to be woken.
func (g *versionGate) current() (rv string, open bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.rv, g.open
}

// compareVersions returns the informer's way to order versions: the
// option, else the source's, else nil.
func (inf *Informer[K, T]) compareVersions() func(a, b string) (int, error) {
	if f := inf.opts.CompareVersions; f != nil {
		return f
	}
	if c, ok := inf.lw.(source.VersionComparer); ok {
		return c.CompareVersions
	}
	return nil
}

// StaleError reports that an informer's cache had not applied a version
// when a wait for it ended: a read would have returned older data.
type StaleError struct {
	// Want is the version waited for; "" if it could not be learnt
	// (Consistent, when the source did not say its current version
	// within the bound).
	Want string
	// Applied is the version the cache had applied when the wait ended
	// ("" if none).
	Applied string
	// Err says why the wait ended: ErrNotCurrent when a consistent
	// read's bound passed, the context's error, ErrStopped, or an error
	// wrapping ErrInvalidVersion.
	Err error
}

// Error implements error. It says "none" for an empty Applied, and
// "current version unknown" for an empty Want.
func (e *StaleError) Error() string {
	applied := e.Applied
	if applied == "" {
		applied = "none"
	}
	if e.Want == "" {
		return fmt.Sprintf("mirror: cache at version %s, current version unknown: %v", applied, e.Err)
	}
	return fmt.Sprintf("mirror: cache at version %s, not %s: %v", applied, e.Want, e.Err)
}

// Unwrap returns the reason the wait ended.
func (e *StaleError) Unwrap() error { return e.Err }

// WaitForVersion blocks until the cache has applied the source's version v
// whole, or a newer one, and returns nil; reads from then on see every
// change up to v. It may be called before Run.
//
// Otherwise it returns a *StaleError wrapping ctx.Err() if ctx ends first,
// ErrStopped if Run returns first, or an error wrapping ErrInvalidVersion
// if v (or a version the source sent) cannot be compared. Without an order
// of versions (InformerOptions.CompareVersions, VersionComparer) it returns
// an error wrapping errors.ErrUnsupported.
func (inf *Informer[K, T]) WaitForVersion(ctx context.Context, v string) error {
	return inf.waitForVersion(ctx, v, nil, nil)
}

// waitForVersion is WaitForVersion calling onTick whenever tick fires
// while it waits.
func (inf *Informer[K, T]) waitForVersion(ctx context.Context, v string, tick <-chan time.Time, onTick func()) error {
	cmp := inf.compareVersions()
	if cmp == nil {
		return fmt.Errorf("mirror: wait for version %q: source has no version order: %w", v, errors.ErrUnsupported)
	}
	if _, err := cmp(v, v); err != nil {
		return &StaleError{Want: v, Err: err}
	}
	for {
		rv, open, ended, moved := inf.versions.state()
		if rv != "" {
			c, err := cmp(rv, v)
			if err != nil {
				return &StaleError{Want: v, Applied: rv, Err: err}
			}
			if c > 0 || c == 0 && !open {
				return nil
			}
		}
		if ended {
			return &StaleError{Want: v, Applied: rv, Err: ErrStopped}
		}
		select {
		case <-moved:
		case <-tick:
			onTick()
		case <-ctx.Done():
			return &StaleError{Want: v, Applied: rv, Err: ctx.Err()}
		}
	}
}
