package etcd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/listwatch/mirror"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"
)

// streamKey is the gRPC metadata key that gives each watch a stream of its
// own. The client multiplexes every watch whose context has the same
// metadata onto one stream, and etcd answers a progress request only when
// every watch on the stream has caught up; a stream of our own keeps
// another watch's backlog, or its start ahead of the store (see Watch),
// from holding back our answers, and keeps our progress notifications out
// of the caller's watches.
const streamKey = "mirror-watch-stream"

// silentTicks is how many progress intervals a watch may hear nothing,
// requests for progress included, before it counts its member as lost.
const silentTicks = 4

var (
	errStopped      = errors.New("watch stopped")
	errWatchTimeout = errors.New("watch timeout reached")
	errStartTimeout = errors.New("watch not started in time")
)

// Watch starts a watch of the keys under the prefix, from the revision
// after opts.ResourceVersion ("" or "0": from now).
//
// Puts become EventAdded (a key's creation) or EventModified; deletions
// become EventDeleted carrying the key alone, marked mirror.Event.KeyOnly,
// or, with Options.PrevValues, the key's last value when etcd still has it
// and it decodes. A put whose value fails to decode becomes an EventError
// with an *mirror.ObjectError followed by an EventDeleted of the key, made
// as for a deletion: the mirror drops a key it cannot represent, as a
// relist would, instead of keeping a stale value. The stream goes on.
// Every event's ResourceVersion is its revision. With opts.AllowBookmarks,
// etcd's progress notifications become EventBookmark events.
//
// The watch requires a leader: a member that loses its leader ends it with
// an error wrapping mirror.ErrUnavailable rather than leaving it silent, and
// so does a member that stops answering (see Options.ProgressInterval).
// A start revision that has been compacted ends it with mirror.ErrExpired.
// opts.Timeout, if positive, ends it with io.EOF. opts.SendInitialEvents is
// not supported: Watch then returns an error wrapping errors.ErrUnsupported.
//
// Watch returns once etcd has accepted the watch, or with an error wrapping
// mirror.ErrUnavailable after Options.RequestTimeout.
func (lw *ListWatcher[T]) Watch(ctx context.Context, opts mirror.WatchOptions) (mirror.Watcher[Object[T]], error) {
	if opts.SendInitialEvents {
		return nil, fmt.Errorf("etcd: watch %q: streaming list: %w", lw.prefix, errors.ErrUnsupported)
	}
	var after int64
	if rv := opts.ResourceVersion; rv != "" && rv != "0" {
		var err error
		if after, err = parseRev(rv); err != nil {
			return nil, fmt.Errorf("etcd: watch %q: %w", lw.prefix, err)
		}
	}

	w := &watcher[T]{lw: lw, from: after + 1, bookmarks: opts.AllowBookmarks}
	// Progress requests must carry the same metadata as the watch, or the
	// client sends them on another stream, where no watch hears them.
	sctx := metadata.AppendToOutgoingContext(clientv3.WithRequireLeader(ctx), streamKey, fmt.Sprintf("%p", w))
	wctx, stop := context.WithCancelCause(sctx)
	w.ctx, w.stop = wctx, stop
	if opts.Timeout > 0 {
		var cancel context.CancelFunc
		w.ctx, cancel = context.WithTimeoutCause(wctx, opts.Timeout, errWatchTimeout)
		w.stop = func(cause error) { stop(cause); cancel() }
	}
	// The watch starts at after+1, as a raw clientv3 loop does (after is
	// 0 for "from now", which is etcd's 0 too). Started at after, a
	// revision etcd already holds, it would wait for etcd's next pass over
	// the watches that are behind, which comes every 100 ms: the changes
	// made meanwhile would reach us that late. After+1 is ahead of an idle
	// store, which etcd holds against progress requests; tick deals with
	// that.
	start := after + 1
	if after == 0 {
		start = 0
	}
	w.ahead = start > 0
	if err := w.open(ctx, start, lw.opts.requestTimeout()); err != nil {
		return nil, err
	}
	if d := lw.opts.progressInterval(); d > 0 {
		w.interval = d
		w.ticker = time.NewTimer(d)
	}
	return w, nil
}

// open starts the client's watch at rev (0: from now), ending the one it
// replaces, if any. etcd accepts a watch before the client returns it; if
// that takes longer than timeout (no bound if it is not positive), the
// whole watch ends and open reports the member unavailable. If ctx, the
// caller's, ends first, the whole watch ends and open returns ctx.Err().
func (w *watcher[T]) open(ctx context.Context, rev int64, timeout time.Duration) error {
	var buf [4]clientv3.OpOption
	ops := append(buf[:0], clientv3.WithRange(w.lw.end))
	if w.lw.opts.PrevValues {
		ops = append(ops, clientv3.WithPrevKV())
	}
	if rev > 0 {
		ops = append(ops, clientv3.WithRev(rev))
	}
	if w.bookmarks {
		// etcd's own periodic notifications, as well as ours.
		ops = append(ops, clientv3.WithProgressNotify())
	}
	if w.cancel != nil {
		w.cancel()
	}
	octx, cancel := context.WithCancel(w.ctx)
	w.cancel, w.start = cancel, rev
	var timer *time.Timer
	if timeout > 0 {
		timer = time.AfterFunc(timeout, func() { w.stop(errStartTimeout) })
	}
	stop := context.AfterFunc(ctx, func() { w.stop(ctx.Err()) })
	w.ch = w.lw.client.Watch(octx, w.lw.start, ops...)
	stop()
	if timer != nil && !timer.Stop() {
		w.release()
		return fmt.Errorf("etcd: watch %q from rev %d: %w: %w",
			w.lw.prefix, w.from, mirror.ErrUnavailable, context.DeadlineExceeded)
	}
	if err := ctx.Err(); err != nil {
		w.release()
		return err
	}
	return nil
}

// watcher is one watch: it hands out the events of the client's watch
// responses one at a time.
type watcher[T any] struct {
	lw   *ListWatcher[T]
	ch   clientv3.WatchChan
	ctx  context.Context
	stop context.CancelCauseFunc
	// from is the first revision the caller asked for (1 for "from
	// now"); events before it are dropped.
	from      int64
	bookmarks bool
	// start is where the client's watch started (0: from now); cancel
	// ends it.
	start  int64
	cancel context.CancelFunc
	// ahead is set while the watch started at from and has heard nothing:
	// etcd may still be at from-1 and then answers no progress request.
	ahead bool

	// stopped is set by Stop, which may run on any goroutine.
	stopped atomic.Bool

	// The fields below belong to the goroutine calling Next.

	// events are the current response's events; next indexes the first
	// not yet returned.
	events []*clientv3.Event
	next   int
	// queued is an event to return before the next of events: the
	// deletion that follows a put that failed to decode.
	queued    mirror.Event[Object[T]]
	hasQueued bool
	// err, once set, is what every later Next returns.
	err error
	// rv is rev, formatted: the resource version of the last event.
	rev int64
	rv  string

	// ticker fires every interval while the watch is open; nil when
	// progress requests are off. heard counts responses since it last
	// fired, silent counts consecutive firings with none.
	ticker   *time.Timer
	interval time.Duration
	heard    int
	silent   int
}

// Next returns the next event. It blocks until there is one, the watch ends
// or ctx is done; see mirror.Watcher for the errors it returns.
func (w *watcher[T]) Next(ctx context.Context) (mirror.Event[Object[T]], error) {
	var zero mirror.Event[Object[T]]
	if w.err != nil {
		return zero, w.err
	}
	for {
		if w.stopped.Load() {
			return zero, w.fail(io.EOF)
		}
		if w.hasQueued {
			ev := w.queued
			w.queued, w.hasQueued = zero, false
			return ev, nil
		}
		for w.next < len(w.events) {
			ev := w.events[w.next]
			w.events[w.next] = nil // let the response's memory go as we go
			w.next++
			if ev.Kv.ModRevision >= w.from {
				return w.event(ev), nil
			}
		}
		w.events, w.next = nil, 0

		var tick <-chan time.Time
		if w.ticker != nil {
			tick = w.ticker.C
		}
		select {
		case resp, ok := <-w.ch:
			if !ok {
				return zero, w.fail(w.endError())
			}
			if err := resp.Err(); err != nil {
				if c := resp.CompactRevision; c != 0 && c <= w.from && w.from > 1 && w.start == w.from-1 {
					// etcd compacted away only the revision before
					// from, where tick restarted the watch; from
					// itself is still there.
					if err := w.open(ctx, w.from, w.lw.opts.requestTimeout()); err != nil {
						return zero, w.fail(err)
					}
					continue
				}
				return zero, w.fail(wrapError(w.ctx, err, "etcd: watch %q from rev %d", w.lw.prefix, w.from))
			}
			w.heard++
			w.ahead = false
			if resp.IsProgressNotify() {
				if w.bookmarks {
					return mirror.Event[Object[T]]{
						Type:            mirror.EventBookmark,
						ResourceVersion: formatRev(resp.Header.Revision),
					}, nil
				}
				continue
			}
			w.events = resp.Events
		case <-w.ctx.Done():
			return zero, w.fail(w.endError())
		case <-ctx.Done():
			return zero, w.fail(ctx.Err())
		case <-tick:
			if err := w.tick(ctx); err != nil {
				return zero, w.fail(err)
			}
		}
	}
}

// tick runs every progress interval. A watch that heard something during
// the interval is alive. One that heard nothing asks etcd for a progress
// notification, which etcd sends once the watch has caught up; one that
// still hears nothing after several asks has lost its member.
//
// etcd also holds back its answer while its store is behind the start of
// any watch on the stream, and a watch started at from is ahead of a store
// that nothing has been written to since from-1. Such a store may stay
// idle for good, so a watch that started there and has heard nothing, not
// even an answer to its last ask, starts again at from-1; etcd answers
// once it has caught the new watch up, within 100 ms. A store that has
// moved on answers the first ask, and then the watch never restarts: on a
// busy cluster, a watch from from-1 would make etcd read every revision
// written since.
func (w *watcher[T]) tick(ctx context.Context) error {
	if w.heard > 0 {
		w.heard, w.silent = 0, 0
		w.ticker.Reset(w.interval)
		return nil
	}
	w.silent++
	if w.silent >= silentTicks {
		return fmt.Errorf("etcd: watch %q from rev %d: %w: no answer from etcd for %v",
			w.lw.prefix, w.from, mirror.ErrUnavailable, time.Duration(w.silent)*w.interval)
	}
	if w.ahead && w.silent > 1 {
		w.ahead = false
		// A member that is gone does not accept the new watch: give it
		// what is left of the silence allowed, not more.
		timeout := time.Duration(silentTicks-w.silent) * w.interval
		if d := w.lw.opts.requestTimeout(); d > 0 {
			timeout = min(timeout, d)
		}
		if err := w.open(ctx, w.from-1, timeout); err != nil {
			return err
		}
		// etcd accepted the watch, so it is there. The new watch is not
		// caught up yet: ask at the next tick.
		w.silent = 0
		w.ticker.Reset(w.interval)
		return nil
	}
	// Only a live watch may ask: a request finding its stream gone makes
	// the client open a new one.
	if w.ctx.Err() == nil {
		// The request waits while the client reconnects the stream; an
		// error is not fatal, as the silence count tells a stream that
		// stays down.
		rctx, cancel := context.WithTimeout(w.ctx, w.interval)
		_ = w.lw.client.RequestProgress(rctx)
		cancel()
	}
	w.ticker.Reset(w.interval)
	return nil
}

// event converts one etcd event.
func (w *watcher[T]) event(ev *clientv3.Event) mirror.Event[Object[T]] {
	kv := ev.Kv
	// The events of one transaction share a revision: format it once.
	if kv.ModRevision != w.rev || w.rv == "" {
		w.rev, w.rv = kv.ModRevision, formatRev(kv.ModRevision)
	}
	rv := w.rv
	if ev.Type == clientv3.EventTypeDelete {
		return w.deletion(kv.Key, ev.PrevKv, rv)
	}
	o, err := w.lw.object(kv)
	if err != nil {
		// The key's earlier value, if the mirror holds one, is no longer
		// etcd's: remove it after reporting the error.
		w.queued, w.hasQueued = w.deletion(kv.Key, ev.PrevKv, rv), true
		return mirror.Event[Object[T]]{Type: mirror.EventError, ResourceVersion: rv, Err: err}
	}
	typ := mirror.EventModified
	if ev.IsCreate() {
		typ = mirror.EventAdded
	}
	return mirror.Event[Object[T]]{Type: typ, Object: o, ResourceVersion: rv}
}

// deletion is the EventDeleted of key at rv. A deletion's Kv holds only
// the key and the deletion's revision: the last value comes from prev,
// which etcd sends only with Options.PrevValues and only while it has that
// revision. Without a previous value that decodes, the event carries the
// key alone, marked KeyOnly, rather than a made-up state; it must not be
// dropped, or a deleted key would stay in the mirror for good.
func (w *watcher[T]) deletion(key []byte, prev *mvccpb.KeyValue, rv string) mirror.Event[Object[T]] {
	ev := mirror.Event[Object[T]]{Type: mirror.EventDeleted, ResourceVersion: rv}
	if prev != nil {
		if o, err := w.lw.object(prev); err == nil {
			ev.Object = o
			return ev
		}
	}
	ev.Object, ev.KeyOnly = Object[T]{Key: string(key)}, true
	return ev
}

// endError is the error for a watch whose channel closed or whose context
// ended: io.EOF when it was stopped or timed out, the caller's context
// error when that ended, and otherwise io.EOF for a stream the client closed
// without saying why (the client itself was closed).
func (w *watcher[T]) endError() error {
	switch cause := context.Cause(w.ctx); {
	case cause == nil, errors.Is(cause, errStopped), errors.Is(cause, errWatchTimeout):
		return io.EOF
	default:
		return cause
	}
}

// fail ends the watch and makes err what every later Next returns.
func (w *watcher[T]) fail(err error) error {
	w.err = err
	w.release()
	return err
}

// Stop ends the watch. It is safe to call from any goroutine, any number of
// times; a Next in progress returns io.EOF soon after.
func (w *watcher[T]) Stop() {
	if w.stopped.CompareAndSwap(false, true) {
		w.stop(errStopped)
	}
}

// release cancels the watch, which ends the client's goroutines for it, and
// stops the progress timer. It runs on the goroutine calling Next.
func (w *watcher[T]) release() {
	w.stop(errStopped)
	if w.ticker != nil {
		w.ticker.Stop()
	}
	w.events, w.next = nil, 0
}
