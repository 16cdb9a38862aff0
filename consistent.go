package mirror

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/listwatch/mirror/source"
)

// ErrNotCurrent is wrapped by the *StaleError of a consistent read whose
// cache did not reach the source's current version within its bound.
var ErrNotCurrent = errors.New("mirror: cache not current within the bound")

// Defaults of ConsistentOptions: the bound is Kubernetes' for consistent
// reads from its watch cache (KEP-2340); progress is asked as often as the
// kube-apiserver asks etcd.
const (
	defaultConsistentTimeout = 3 * time.Second
	defaultProgressInterval  = 100 * time.Millisecond
)

// ConsistentOptions bounds a consistent read. The zero value waits up to
// 3 s, asks for progress every 100 ms, then returns a *StaleError.
type ConsistentOptions struct {
	// Timeout bounds the wait for the cache; zero means 3 s. The
	// caller's context may end it sooner.
	Timeout time.Duration

	// ProgressInterval is how often a waiting read asks the source for
	// progress (ProgressRequester), first as soon as it finds the cache
	// behind; concurrent reads share requests. Zero means 100 ms;
	// negative, none.
	ProgressInterval time.Duration

	// Fallback, if set, makes a read whose cache is not current within
	// Timeout list the source at its current version instead, indexed
	// like the cache: a full list, for small sources or rare misses.
	Fallback bool
}

func (o ConsistentOptions) timeout() time.Duration {
	if o.Timeout > 0 {
		return o.Timeout
	}
	return defaultConsistentTimeout
}

func (o ConsistentOptions) progressInterval() time.Duration {
	if o.ProgressInterval == 0 {
		return defaultProgressInterval
	}
	return o.ProgressInterval
}

// Consistent returns a Reader that sees every change the source
// completed before the call: it learns the source's current version
// (CurrentVersioner) and waits, asking for progress, until the cache has
// applied it. The Reader is the informer itself, or with opts.Fallback a
// copy listed from the source if the cache did not catch up in time.
//
// It never returns stale data silently: it returns a *StaleError wrapping
// ErrNotCurrent if the bound passes, ctx.Err() if ctx ends, or
// ErrStopped if the informer stops. A source without CurrentVersioner or an
// order of versions (VersionComparer) gets an error wrapping
// errors.ErrUnsupported; a failure to learn the version is returned
// wrapped.
func (inf *Informer[K, T]) Consistent(ctx context.Context, opts ConsistentOptions) (Reader[K, T], error) {
	return inf.readAt(ctx, opts, inf.currentVersion)
}

// readAt is a read bounded by opts: it waits, asking the source for
// progress, until the cache has applied the version want returns (want
// runs within the bound), and returns the informer; once the bound has
// passed, a read of the source if opts.Fallback is set, else a
// *StaleError wrapping ErrNotCurrent.
func (inf *Informer[K, T]) readAt(ctx context.Context, opts ConsistentOptions, want func(context.Context) (string, error)) (Reader[K, T], error) {
	bctx, cancel := context.WithTimeout(ctx, opts.timeout())
	defer cancel()
	v, err := want(bctx)
	if err == nil {
		err = inf.waitProgressing(bctx, v, opts.progressInterval())
	}
	if err == nil {
		return inf, nil
	}
	err = inf.boundPassed(ctx, err)
	if !opts.Fallback || !errors.Is(err, ErrNotCurrent) {
		return nil, err
	}
	return inf.readSource(ctx)
}

// currentVersion asks the source for its current version.
func (inf *Informer[K, T]) currentVersion(ctx context.Context) (string, error) {
	cv, ok := inf.lw.(source.CurrentVersioner)
	if !ok {
		return "", fmt.Errorf("mirror: consistent read: source cannot say its current version: %w", errors.ErrUnsupported)
	}
	if inf.compareVersions() == nil {
		return "", fmt.Errorf("mirror: consistent read: source has no version order: %w", errors.ErrUnsupported)
	}
	v, err := cv.CurrentVersion(ctx)
	if err != nil {
		return "", fmt.Errorf("mirror: consistent read: current version: %w", err)
	}
	return v, nil
}

// boundPassed turns the end of a wait for the bound's sake, not the
// caller's, into ErrNotCurrent.
func (inf *Informer[K, T]) boundPassed(ctx context.Context, err error) error {
	var se *StaleError
	if ctx.Err() == nil && errors.As(err, &se) && errors.Is(se.Err, context.DeadlineExceeded) {
		return &StaleError{Want: se.Want, Applied: se.Applied, Err: ErrNotCurrent}
	}
	if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		// The source did not even say its version within the bound: the
		// error says what the cache had applied, and that the version
		// it should have reached is unknown (Want is "").
		applied, _ := inf.versions.current()
		return &StaleError{Applied: applied, Err: fmt.Errorf("%w: %w", ErrNotCurrent, err)}
	}
	return err
}

// waitProgressing is WaitForVersion asking the source for progress every
// interval (never if it is negative) while the cache is behind.
func (inf *Informer[K, T]) waitProgressing(ctx context.Context, v string, interval time.Duration) error {
	pr, ok := inf.lw.(source.ProgressRequester)
	if !ok || interval < 0 {
		return inf.WaitForVersion(ctx, v)
	}
	if inf.reached(v) {
		return nil
	}
	since := time.Now() // after v was learned
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	inf.progress.ask(ctx, pr, since, interval)
	return inf.waitForVersion(ctx, v, ticker.C, func() { inf.progress.ask(ctx, pr, since, interval) })
}

// reached reports whether the cache has applied v whole, without waiting.
func (inf *Informer[K, T]) reached(v string) bool {
	cmp := inf.compareVersions()
	rv, open := inf.versions.current()
	if cmp == nil || rv == "" {
		return false
	}
	c, err := cmp(rv, v)
	return err == nil && (c > 0 || c == 0 && !open)
}

// progressAsker shares progress requests among an informer's concurrent
// consistent reads. A read needs a request sent after it learned the
// version it waits for, since only such a request's answer can bring
// that version, and then one per interval in case the source dropped it;
// a request that another read sent since serves it as well.
type progressAsker struct {
	last atomic.Int64 // when the last request went out, in Unix nanoseconds
}

// ask sends a progress request unless one went out at or after since and
// less than interval ago. The request's failure is not the read's: the
// read goes on waiting, bounded, and a later request may succeed.
func (p *progressAsker) ask(ctx context.Context, pr source.ProgressRequester, since time.Time, interval time.Duration) {
	now := time.Now().UnixNano()
	last := p.last.Load()
	if last >= since.UnixNano() && now-last < int64(interval) {
		return
	}
	if !p.last.CompareAndSwap(last, now) {
		return // another read sent one just now, after since
	}
	_ = pr.RequestProgress(ctx)
}

// readSource lists the source at its current version into an index like
// the cache's, for a consistent read that falls back. Objects the key or
// an index function fails on are left out and reported, as the cache
// leaves them out.
func (inf *Informer[K, T]) readSource(ctx context.Context) (Reader[K, T], error) {
	var items []T
	opts := source.ListOptions{Limit: inf.opts.ListWatch.PageSize}
	if opts.Limit <= 0 {
		opts.Limit = defaultPageSize
	}
	for {
		page, err := inf.lw.List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("mirror: consistent read from the source: %w", err)
		}
		for _, obj := range page.Items {
			if inf.opts.Transform != nil {
				var err error
				if obj, err = transformGuarded(inf.opts.Transform, obj); err != nil {
					inf.report(err)
					continue
				}
			}
			items = append(items, obj)
		}
		if page.Continue == "" {
			break
		}
		opts.Continue = page.Continue
	}
	idx := NewIndexer(inf.opts.KeyFunc, inf.cache.GetIndexers())
	if err := idx.Replace(items, ""); err != nil {
		inf.report(err)
	}
	return idx, nil
}
