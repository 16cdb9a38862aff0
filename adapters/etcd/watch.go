package etcd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/listwatch/mirror/source"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
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

var (
	errStopped      = errors.New("watch stopped")
	errWatchTimeout = errors.New("watch timeout reached")
	errStartTimeout = errors.New("watch not started in time")
)

// Watch starts a watch of the keys under the prefix, from the revision
// after opts.ResourceVersion ("" or "0": from now).
//
// Puts become source.Added (a key's creation) or source.Updated; deletions
// become source.Deleted carrying the key alone, marked source.Event.KeyOnly,
// or, with Options.PrevValues, the key's last value when etcd still has it
// and it decodes. A put whose value fails to decode becomes one source.Error
// marked KeyOnly, whose Object holds the key alone and whose Err is an
// *mirror.ObjectError naming the key and the put's revision: etcd holds a
// value the mirror cannot represent, so a Reflector reports the error and
// evicts whatever it held for the key, as a relist would leave the key out.
// The stream goes on. Every event's ResourceVersion is its revision; the
// events of one transaction share it, and all but the last of them are
// marked source.Event.More, so that no checkpoint is taken between them. With
// opts.AllowBookmarks, etcd's progress notifications become source.Bookmark
// events.
//
// The watch requires a leader: a member that loses its leader ends it with
// an error wrapping source.ErrUnavailable rather than leaving it silent, and
// so does a member that stops answering, whether its connection stays up or
// is lost: while Next waits, a watch that hears nothing from etcd for two
// Options.ProgressInterval ends within a quarter interval more (see there).
// A start revision that has been compacted ends it with source.ErrExpired,
// as soon as a one-key read at that revision, sent beside the watch, says
// so (etcd tells the watch itself only on its next pass over the watches
// that are behind);
// a user that may not read the prefix, or a client without credentials for
// a cluster that requires them, ends it with mirror.ErrPermanent.
// opts.Timeout, if positive, ends it with io.EOF. opts.SendInitialEvents is
// not supported: Watch then returns an error wrapping errors.ErrUnsupported.
//
// Watch returns once etcd has accepted the watch, or with an error wrapping
// source.ErrUnavailable after Options.RequestTimeout, or sooner if the
// client has no connection (see Options.RequestTimeout).
func (lw *ListWatcher[V]) Watch(ctx context.Context, opts source.WatchOptions) (source.Watcher[Object[V]], error) {
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

	w := &watcher[V]{lw: lw, from: after + 1, reached: after, bookmarks: opts.AllowBookmarks}
	wctx, stop := context.WithCancelCause(ctx)
	w.ctx, w.stop = wctx, stop
	if opts.Timeout > 0 {
		var cancel context.CancelFunc
		w.ctx, cancel = context.WithTimeoutCause(wctx, opts.Timeout, errWatchTimeout)
		w.stop = func(cause error) { stop(cause); cancel() }
	}
	// The client's watches and progress requests must carry the same
	// metadata, or the client sends the requests on another stream, where
	// no watch hears them. They end when teardown says, not with ctx: see
	// teardown.
	sctx := metadata.AppendToOutgoingContext(clientv3.WithRequireLeader(ctx), streamKey, fmt.Sprintf("%p", w))
	w.clientCtx, w.clientCancel = context.WithCancel(context.WithoutCancel(sctx))
	interval := lw.opts.progressInterval()
	if interval > 0 {
		w.startProber(interval)
	}
	context.AfterFunc(w.ctx, w.teardown)

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
	if start > 0 {
		w.probeStart(start)
	}
	stopGuard := lw.guardConn(w.ctx, w.stop)
	err := w.open(ctx, start, lw.opts.requestTimeout(), 0)
	stopGuard()
	if err != nil {
		return nil, err
	}
	var noConn *noAnswerError
	if errors.As(context.Cause(w.ctx), &noConn) && ctx.Err() == nil {
		w.release()
		return nil, fmt.Errorf("%s: %w: %w", w.name(), source.ErrUnavailable, noConn)
	}
	lw.connected()
	if interval > 0 {
		// Silence counts from etcd's acceptance of the watch.
		w.ticker = time.NewTimer(w.step)
	}
	lw.track(w)
	return w, nil
}

// open starts the client's watch at rev (0: from now), ending the one it
// replaces, if any. etcd accepts a watch before the client returns it; if
// that takes longer than timeout (no bound if it is not positive), the
// whole watch ends and open reports the member unavailable, counting
// silent, how long the watch had heard nothing before, into the silence.
// If ctx, the caller's, ends first, the whole watch ends and open returns
// ctx.Err().
func (w *watcher[V]) open(ctx context.Context, rev int64, timeout, silent time.Duration) error {
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
	octx, cancel := context.WithCancel(w.clientCtx)
	w.cancel, w.start = cancel, rev
	var timer *time.Timer
	if timeout > 0 {
		timer = time.AfterFunc(timeout, func() { w.stop(errStartTimeout) })
	}
	stop := context.AfterFunc(ctx, func() { w.stop(ctx.Err()) })
	w.lw.stats.watches.Add(1)
	w.ch = w.lw.client.Watch(octx, w.lw.start, ops...)
	stop()
	if timer != nil && !timer.Stop() {
		w.release()
		what := fmt.Sprintf("etcd did not accept the watch within %v", timeout)
		if silent > 0 {
			what = fmt.Sprintf("etcd did not answer for %v: no event, no answer to progress requests, and a new watch not accepted within %v",
				silent+timeout, timeout)
		}
		return w.noAnswer(ctx, what, context.DeadlineExceeded)
	}
	if err := ctx.Err(); err != nil {
		w.release()
		return err
	}
	return nil
}

// watcher is one watch: it hands out the events of the client's watch
// responses one at a time.
type watcher[V any] struct {
	lw   *ListWatcher[V]
	ch   clientv3.WatchChan
	ctx  context.Context
	stop context.CancelCauseFunc
	// from is the first revision the caller asked for (1 for "from
	// now"); events before it are dropped. reached is the revision of the
	// last event or bookmark handed out whole (from-1 before any).
	from, reached int64
	bookmarks     bool
	// start is where the client's watch started (0: from now); cancel
	// ends it.
	start  int64
	cancel context.CancelFunc
	// ahead is set while the watch started at from and has heard nothing:
	// etcd may still be at from-1 and then answers no progress request.
	ahead bool

	// clientCtx is the parent of the client's watches and progress
	// requests; teardown cancels it, once, after the prober has stopped.
	clientCtx    context.Context
	clientCancel context.CancelFunc
	teardownOnce sync.Once

	// untracked is set once teardown has begun: RequestProgress no longer
	// asks the watch. Guarded by lw.watchMu.
	untracked bool

	// stopped is set by Stop, which may run on any goroutine.
	stopped atomic.Bool

	// silence detects a member that stops answering; see silence.go.
	silence

	// The fields below belong to the goroutine calling Next.

	// events are the current response's events; next indexes the first
	// not yet returned.
	events []*clientv3.Event
	next   int
	// err, once set, is what every later Next returns.
	err error
	// compacted, until read, answers whether etcd has compacted the start
	// revision (see probeStart).
	compacted chan error
	// rv is rev, formatted: the resource version of the last event.
	rev int64
	rv  string
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
		for w.next < len(w.events) {
			ev := w.events[w.next]
			w.events[w.next] = nil // let the response's memory go as we go
			w.next++
			if ev.Kv.ModRevision >= w.from {
				e := w.event(ev)
				// The events of one transaction share its revision
				// and come in one response.
				e.More = w.next < len(w.events) && w.events[w.next].Kv.ModRevision == ev.Kv.ModRevision
				if !e.More {
					w.reached = ev.Kv.ModRevision
				}
				return e, nil
			}
		}
		w.events, w.next = nil, 0

		var tick <-chan time.Time
		if w.ticker != nil {
			tick = w.ticker.C
		}
		select {
		case err := <-w.compacted:
			w.compacted = nil
			if err != nil {
				return zero, w.fail(w.lw.wrapError(w.ctx, err, "%s", w.name()))
			}
			continue
		case resp, ok := <-w.ch:
			if !ok {
				if err := w.lw.clientClosed(ctx); err != nil {
					return zero, w.fail(err)
				}
				return zero, w.fail(w.endError())
			}
			w.heard = true
			w.ahead = false
			if err := resp.Err(); err != nil {
				if c := resp.CompactRevision; c != 0 && c <= w.from && w.from > 1 && w.start == w.from-1 {
					// etcd compacted away only the revision before
					// from, where tick restarted the watch; from
					// itself is still there. etcd just answered:
					// the start may take the whole allowance.
					w.quiet = 0
					if err := w.open(ctx, w.from, w.allowance(), 0); err != nil {
						return zero, w.fail(err)
					}
					continue
				}
				if c := resp.CompactRevision; c != 0 {
					err = fmt.Errorf("etcd compacted at rev %d: %w", c, err)
				}
				return zero, w.fail(w.lw.wrapError(w.ctx, err, "%s", w.name()))
			}
			if resp.IsProgressNotify() {
				if w.bookmarks {
					w.reached = resp.Header.Revision
					return source.Event[Object[V]]{
						Type:            source.Bookmark,
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

// event converts one etcd event.
func (w *watcher[V]) event(ev *clientv3.Event) source.Event[Object[V]] {
	kv := ev.Kv
	// The events of one transaction share a revision: format it once.
	if kv.ModRevision != w.rev || w.rv == "" {
		w.rev, w.rv = kv.ModRevision, formatRev(kv.ModRevision)
	}
	rv := w.rv
	if ev.Type == clientv3.EventTypeDelete {
		return w.deletion(kv.Key, ev.PrevKv, rv)
	}
	o, err := w.lw.object(kv, w.lw.watchDecode)
	if err != nil {
		// etcd holds a value the mirror cannot represent: whatever the
		// mirror holds for the key is out of date, and goes (see
		// source.Error).
		return source.Event[Object[V]]{
			Type:            source.Error,
			Object:          Object[V]{Key: o.Key},
			ResourceVersion: rv,
			KeyOnly:         true,
			Err:             err,
		}
	}
	typ := source.Updated
	if ev.IsCreate() {
		typ = source.Added
	}
	return source.Event[Object[V]]{Type: typ, Object: o, ResourceVersion: rv}
}

// deletion is the source.Deleted of key at rv. A deletion's Kv holds only
// the key and the deletion's revision: the last value comes from prev,
// which etcd sends only with Options.PrevValues and only while it has that
// revision. Without a previous value that decodes, the event carries the
// key alone, marked KeyOnly, rather than a made-up state; it must not be
// dropped, or a deleted key would stay in the mirror for good.
func (w *watcher[V]) deletion(key []byte, prev *mvccpb.KeyValue, rv string) source.Event[Object[V]] {
	ev := source.Event[Object[V]]{Type: source.Deleted, ResourceVersion: rv}
	if prev != nil {
		if o, err := w.lw.object(prev, w.lw.watchDecode); err == nil {
			ev.Object = o
			return ev
		}
	}
	ev.Object, ev.KeyOnly = Object[V]{Key: string(key)}, true
	return ev
}

// name names the watch in an error: by its prefix, the revision it
// started from and, once it has handed out a later one, the revision it
// reached, from which a new watch would go on.
// probeStart asks etcd, beside the watch, whether it has compacted rev,
// where the watch starts: a read of one key at rev. etcd tells a watch
// that starts at a compacted revision so only on its next pass over the
// watches that are behind, up to 100 ms later; the read fails at once. A
// resumed informer then lists that much sooner. Any other answer (rev not
// reached yet, the member slow or gone) leaves it to the watch.
func (w *watcher[V]) probeStart(rev int64) {
	w.compacted = make(chan error, 1)
	ctx, cancel := context.WithTimeout(w.ctx, w.lw.opts.requestTimeout())
	go func() {
		defer cancel()
		_, err := w.lw.client.Get(ctx, w.lw.prefix, clientv3.WithRange(w.lw.end), clientv3.WithRev(rev),
			clientv3.WithLimit(1), clientv3.WithKeysOnly(), clientv3.WithSerializable())
		if errors.Is(err, rpctypes.ErrCompacted) {
			w.compacted <- fmt.Errorf("a read at rev %d: %w", rev, err)
			return
		}
		w.compacted <- nil
	}()
}

func (w *watcher[V]) name() string {
	if w.reached >= w.from {
		return fmt.Sprintf("etcd: watch %q from rev %d, reached rev %d", w.lw.prefix, w.from, w.reached)
	}
	return fmt.Sprintf("etcd: watch %q from rev %d", w.lw.prefix, w.from)
}

// noAnswer is the error that ends a watch whose member did not answer in
// time: what says what etcd did not do, and the client's connection adds
// why, where it can tell (see diagnose). It wraps source.ErrUnavailable
// and cause, if not nil.
func (w *watcher[V]) noAnswer(ctx context.Context, what string, cause error) error {
	return fmt.Errorf("%s: %w: %w", w.name(), source.ErrUnavailable,
		&noAnswerError{what: what, diagnosis: w.lw.diagnose(ctx), err: cause})
}

// endError is the error for a watch whose channel closed or whose context
// ended: io.EOF when it was stopped or timed out, the caller's context
// error when that ended, and otherwise io.EOF for a stream the client closed
// without saying why (the client itself was closed).
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

// release ends the watch and waits until teardown has released what it
// holds. It runs on the goroutine calling Next.
func (w *watcher[V]) release() {
	w.stop(errStopped)
	w.teardown()
	if w.ticker != nil {
		w.ticker.Stop()
	}
	w.events, w.next = nil, 0
}

// teardown ends the prober, waits until it has stopped, and only then ends
// the client's watch. The order matters: the client drops a watch stream
// once its last watch has ended, and a progress request that finds no
// stream opens one that nothing ever closes. teardown runs once, when the
// watch's context ends (Stop, its timeout, the caller's context) or from
// release, whichever comes first; later calls wait until it has run.
func (w *watcher[V]) teardown() {
	w.teardownOnce.Do(func() {
		w.lw.untrack(w)
		w.stopProber()
		w.clientCancel()
	})
}
