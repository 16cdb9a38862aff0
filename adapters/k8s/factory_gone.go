package k8s

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/listwatch/mirror/source"
)

// A resource that goes away after its informer synced — a custom
// resource whose definition is deleted — makes every list and watch fail
// with a 404 until it comes back, perhaps never. client-go's informers
// go on retrying and logging at their usual backoff, up to a line every
// few seconds per informer, forever. The factory's informers report it
// once and then ask the server only every GoneRetry, until an answer
// says the resource is back.

// goneState says whether an informer's resource is gone, and when to ask
// again.
type goneState struct {
	mu      sync.Mutex
	gone    bool
	retryAt time.Time
}

func (g *goneState) is() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.gone
}

// wait waits until the next request may go to the server: at once, unless
// the resource is gone. It returns ctx.Err() if ctx ends first.
func (g *goneState) wait(ctx context.Context, every time.Duration) error {
	g.mu.Lock()
	if !g.gone {
		g.mu.Unlock()
		return nil
	}
	d := time.Until(g.retryAt)
	g.retryAt = time.Now().Add(max(d, 0) + every)
	g.mu.Unlock()
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// observe records the outcome of a request: a 404 for the resource type
// after the informer synced makes it gone (and returns true the first
// time), a success makes it back (and returns true the first time).
func (g *goneState) observe(err error, synced bool, every time.Duration) (changed bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case err == nil && g.gone:
		g.gone = false
		return true
	case err != nil && !g.gone && synced && isResourceNotFound(err):
		g.gone, g.retryAt = true, time.Now().Add(every)
		return true
	}
	return false
}

// goneLW is a ListWatcher that keeps track of its resource going away.
type goneLW[T Object] struct {
	lw     source.ListWatcher[T]
	e      *entry
	synced func() bool
}

// goneListWatcher returns lw watched for its resource going away, for e.
func goneListWatcher[T Object](lw source.ListWatcher[T], e *entry, synced func() bool) source.ListWatcher[T] {
	g := &goneLW[T]{lw: lw, e: e, synced: synced}
	if p, ok := lw.(source.StreamingListPreferrer); ok {
		return &goneStreamingLW[T]{goneLW: g, p: p}
	}
	return g
}

// List lists through the ListWatcher, after GoneRetry if the resource is
// gone.
func (g *goneLW[T]) List(ctx context.Context, opts source.ListOptions) (source.ListResult[T], error) {
	if err := g.e.gone.wait(ctx, g.e.f.opts.GoneRetry); err != nil {
		return source.ListResult[T]{}, err
	}
	res, err := g.lw.List(ctx, opts)
	g.observe(err)
	return res, err
}

// Watch watches through the ListWatcher, after GoneRetry if the resource
// is gone.
func (g *goneLW[T]) Watch(ctx context.Context, opts source.WatchOptions) (source.Watcher[T], error) {
	if err := g.e.gone.wait(ctx, g.e.f.opts.GoneRetry); err != nil {
		return nil, err
	}
	w, err := g.lw.Watch(ctx, opts)
	g.observe(err)
	return w, err
}

func (g *goneLW[T]) observe(err error) {
	retry := g.e.f.opts.GoneRetry
	if !g.e.gone.observe(err, g.synced(), retry) {
		return
	}
	r := g.e.key.res
	if err != nil {
		g.e.f.report(r, goneError(r, retry, err))
		return
	}
	g.e.f.logger.Info("k8s: resource back", "resource", r.String())
}

// goneStreamingLW is a goneLW over a ListWatcher that may prefer
// streaming lists, and says so.
type goneStreamingLW[T Object] struct {
	*goneLW[T]
	p source.StreamingListPreferrer
}

func (g *goneStreamingLW[T]) PrefersStreamingList() bool { return g.p.PrefersStreamingList() }

// CurrentVersion passes on the current version of the ListWatcher goneLW
// wraps, so that the informer can read consistently; one that cannot say
// it gets an error wrapping errors.ErrUnsupported, as an informer of it
// would. The version order goes to the informer by
// InformerOptions.CompareVersions (see newFactoryInformer).
func (g *goneLW[T]) CurrentVersion(ctx context.Context) (string, error) {
	cv, ok := g.lw.(source.CurrentVersioner)
	if !ok {
		return "", fmt.Errorf("k8s: %s: the ListWatcher cannot say its current version: %w", g.e.key.res, errors.ErrUnsupported)
	}
	return cv.CurrentVersion(ctx)
}
