package nats

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/listwatch/mirror/source"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

var (
	errStopped      = errors.New("watch stopped")
	errWatchTimeout = errors.New("watch timeout reached")
	errWatchClosed  = errors.New("the client closed the bucket's watcher")
)

// Watch starts a watch of the bucket from the revision after
// opts.ResourceVersion: "" means from now (after the bucket's last
// revision when the watch starts), and "0", the revision of a list of a
// bucket never written to, means from the bucket's first revision.
//
// Every revision the bucket holds after the start is delivered, in order:
// a put becomes source.Updated (NATS does not say which puts create a key;
// an informer tells additions from updates by its cache), and a deletion
// or a purge, whether by the bucket's Delete and Purge or by a marker the
// server writes when a key's TTL or the bucket's MaxAge removes it,
// becomes source.Deleted carrying the key alone, marked source.Event.KeyOnly.
// A put whose value fails to decode becomes one source.Error marked KeyOnly,
// whose Object holds the key alone and whose Err is an *mirror.ObjectError
// naming the key and the revision: the bucket holds a value the mirror
// cannot represent, so a Reflector reports the error and evicts whatever it
// held for the key, as a relist would leave the key out. The stream goes
// on. Every event's ResourceVersion is its revision.
//
// A revision after the start that the bucket no longer holds, so that the
// watch would miss what it was (see the package documentation), ends the
// watch with an error wrapping source.ErrExpired, at the first revision
// delivered after it or, when nothing up to the bucket's last revision at
// the start follows it, once the client reports the watch caught up. So
// does a start before the bucket's first revision or after its last (a
// bucket deleted and created again starts its revisions afresh). The
// loss of the connection to the server ends it with
// source.ErrUnavailable; the Reflector then watches again from the last
// revision it saw. opts.Timeout, if positive, ends it with io.EOF. With
// opts.AllowBookmarks, the watch sends one source.Bookmark once it has
// delivered every revision the bucket held when it started, carrying the
// last revision it delivered (or the one it started after): the mirror is
// then known to be current. opts.SendInitialEvents is not supported: Watch
// then returns an error wrapping errors.ErrUnsupported.
func (lw *ListWatcher[V]) Watch(ctx context.Context, opts source.WatchOptions) (source.Watcher[Object[V]], error) {
	if opts.SendInitialEvents {
		return nil, fmt.Errorf("nats: watch bucket %q: streaming list: %w", lw.bucket, errors.ErrUnsupported)
	}
	fromNow := opts.ResourceVersion == ""
	var after uint64
	if !fromNow {
		var err error
		if after, err = parseRev(opts.ResourceVersion); err != nil {
			return nil, fmt.Errorf("nats: watch bucket %q: %w", lw.bucket, err)
		}
	}
	kv, stream, err := lw.handles(ctx)
	if err != nil {
		return nil, wrapError(ctx, err, "nats: watch bucket %q", lw.bucket)
	}
	state, err := lw.streamState(ctx, stream)
	if err != nil {
		return nil, wrapError(ctx, err, "nats: watch bucket %q from rev %d", lw.bucket, after+1)
	}
	if fromNow {
		after = state.LastSeq
	}
	switch {
	case after > state.LastSeq:
		lw.stats.expired.Add(1)
		return nil, fmt.Errorf("nats: watch bucket %q from rev %d: the bucket's last revision is %d (was it created again?): %w",
			lw.bucket, after+1, state.LastSeq, source.ErrExpired)
	case state.FirstSeq > after+1:
		lw.stats.expired.Add(1)
		return nil, fmt.Errorf("nats: watch bucket %q from rev %d: the bucket holds revisions from %d on: %w",
			lw.bucket, after+1, state.FirstSeq, source.ErrExpired)
	}

	w := &watcher[V]{lw: lw, next: after + 1, from: after + 1, last: state.LastSeq, bookmarks: opts.AllowBookmarks}
	wctx, stop := context.WithCancelCause(ctx)
	w.ctx, w.stop = wctx, stop
	if opts.Timeout > 0 {
		var cancel context.CancelFunc
		w.ctx, cancel = context.WithTimeoutCause(wctx, opts.Timeout, errWatchTimeout)
		w.stop = func(cause error) { stop(cause); cancel() }
	}
	// The connection's losses end the watch: the client's watcher would
	// wait silently for the server to come back.
	if nc := lw.js.Conn(); nc != nil {
		w.conn = nc
		w.status = nc.StatusChanged(natsgo.RECONNECTING, natsgo.DISCONNECTED, natsgo.CLOSED)
	}
	// The client's watcher lives as long as the context it is started
	// with, which opts.Timeout does not bound, so that a timeout that
	// passes while it starts ends the watch with io.EOF (see teardown)
	// rather than failing the start; the start is guarded apart.
	lw.stats.watches.Add(1)
	stopGuard := lw.guard(lw.opts.requestTimeout(), w.stop)
	kw, err := kv.WatchAll(wctx, jetstream.IncludeHistory(), jetstream.ResumeFromRevision(after+1))
	if cause := stopGuard(); cause != nil {
		if err == nil {
			_ = kw.Stop()
		}
		err = cause
	}
	if err != nil {
		w.release()
		return nil, wrapError(ctx, err, "nats: watch bucket %q from rev %d", lw.bucket, after+1)
	}
	w.kw = kw
	// Stop, the timeout or the caller's context release the client's
	// watcher at once, not at the next call of Next.
	context.AfterFunc(w.ctx, w.teardown)
	return w, nil
}

// watcher is one watch of a bucket: it hands out the client's entries one
// at a time, checking that their revisions follow each other.
type watcher[V any] struct {
	lw   *ListWatcher[V]
	kw   jetstream.KeyWatcher
	ctx  context.Context
	stop context.CancelCauseFunc

	conn   *natsgo.Conn
	status chan natsgo.Status

	// stopped is set by Stop, which may run on any goroutine.
	stopped      atomic.Bool
	teardownOnce sync.Once

	// The fields below belong to the goroutine calling Next.

	// from is the first revision asked for; next is the revision the
	// next entry must have.
	from, next uint64
	// last is the bucket's last revision when the watch started: the
	// client's caught-up marker must come after it has been delivered.
	last uint64
	// bookmarks is set if the caller allows bookmarks.
	bookmarks bool
	// err, once set, is what every later Next returns.
	err error
}

// Next returns the next event. It blocks until there is one, the watch ends
// or ctx is done; see source.Watcher for the errors it returns.
func (w *watcher[V]) Next(ctx context.Context) (source.Event[Object[V]], error) {
	var zero source.Event[Object[V]]
	if w.err != nil {
		return zero, w.err
	}
	for {
		if w.stopped.Load() {
			return zero, w.fail(io.EOF)
		}
		select {
		case e, ok := <-w.kw.Updates():
			if !ok {
				if w.ctx.Err() != nil {
					return zero, w.fail(w.endError())
				}
				return zero, w.fail(wrapError(ctx, w.lw.watcherClosed(), "%s", w.name()))
			}
			if e == nil {
				// The client's marker that the watch has delivered
				// every revision the bucket held when it started. A
				// revision up to the bucket's last one at the start
				// that never came was dropped since (PurgeDeletes
				// removing a deletion written last): no later entry
				// would reveal the gap, which only a relist repairs.
				if w.next <= w.last {
					w.lw.stats.expired.Add(1)
					return zero, w.fail(fmt.Errorf("%s: revisions %d to %d are no longer in the bucket: %w",
						w.name(), w.next, w.last, source.ErrExpired))
				}
				if w.bookmarks {
					return source.Event[Object[V]]{Type: source.Bookmark, ResourceVersion: formatRev(w.next - 1)}, nil
				}
				continue
			}
			rev := e.Revision()
			if rev < w.next {
				// Already handed out (the client's consumer started
				// again from an earlier point).
				continue
			}
			if rev > w.next {
				w.lw.stats.expired.Add(1)
				return zero, w.fail(fmt.Errorf("%s: revisions %d to %d are no longer in the bucket: %w",
					w.name(), w.next, rev-1, source.ErrExpired))
			}
			w.next = rev + 1
			return w.event(e), nil
		case s, ok := <-w.status:
			if !ok {
				// Torn down: the watch has ended.
				return zero, w.fail(w.endError())
			}
			return zero, w.fail(wrapError(ctx, lost(w.conn, s), "%s", w.name()))
		case <-w.ctx.Done():
			return zero, w.fail(w.endError())
		case <-ctx.Done():
			return zero, w.fail(ctx.Err())
		}
	}
}

// event converts one entry.
func (w *watcher[V]) event(e jetstream.KeyValueEntry) source.Event[Object[V]] {
	rv := formatRev(e.Revision())
	if e.Operation() != jetstream.KeyValuePut {
		// The entry of a deletion holds no value: the event carries the
		// key alone; the mirror knows the last value.
		return source.Event[Object[V]]{Type: source.Deleted, Object: Object[V]{Key: e.Key()}, ResourceVersion: rv, KeyOnly: true}
	}
	o, err := w.lw.object(e)
	if err != nil {
		// The bucket holds a value the mirror cannot represent: whatever
		// the mirror holds for the key is out of date, and goes (see
		// source.Error).
		return source.Event[Object[V]]{Type: source.Error, Object: Object[V]{Key: o.Key}, ResourceVersion: rv, KeyOnly: true, Err: err}
	}
	return source.Event[Object[V]]{Type: source.Updated, Object: o, ResourceVersion: rv}
}

// name names the watch in an error: by its bucket, the revision it started
// from and, once it has handed out a later one, the revision it reached.
func (w *watcher[V]) name() string {
	if w.next > w.from {
		return fmt.Sprintf("nats: watch bucket %q from rev %d, reached rev %d", w.lw.bucket, w.from, w.next-1)
	}
	return fmt.Sprintf("nats: watch bucket %q from rev %d", w.lw.bucket, w.from)
}

// endError is the error for a watch whose context ended: io.EOF when it was
// stopped or timed out, and the caller's context error otherwise.
func (w *watcher[V]) endError() error {
	switch cause := context.Cause(w.ctx); {
	case cause == nil, errors.Is(cause, errStopped), errors.Is(cause, errWatchTimeout):
		return io.EOF
	default:
		return cause
	}
}

// fail ends the watch and makes err what every later Next returns.
func (w *watcher[V]) fail(err error) error {
	w.err = err
	w.release()
	return err
}

// Stop ends the watch. It is safe to call from any goroutine, any number of
// times; a Next in progress returns io.EOF soon after.
func (w *watcher[V]) Stop() {
	if w.stopped.CompareAndSwap(false, true) {
		w.stop(errStopped)
	}
}

// release ends the watch and waits until what it holds is released.
func (w *watcher[V]) release() {
	w.stop(errStopped)
	w.teardown()
}

// teardown releases the client's watcher and the connection's status
// listener, once, when the watch's context ends or from release, whichever
// comes first; later calls wait until it has run.
//
// Stopping the client's watcher deletes its consumer on the server, a
// request that, with the connection down, waits for the client's own
// timeout (5 seconds): then teardown leaves the watcher to the client,
// which stops it on a goroutine of its own once the context it was
// started with has ended, as it has by now.
func (w *watcher[V]) teardown() {
	w.teardownOnce.Do(func() {
		if w.kw != nil && (w.conn == nil || w.conn.Status() == natsgo.CONNECTED) {
			_ = w.kw.Stop()
		}
		if w.status != nil {
			w.conn.RemoveStatusListener(w.status)
		}
	})
}
