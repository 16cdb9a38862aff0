package k8s

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/source"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// Watch starts a watch of the objects, from the version after
// opts.ResourceVersion.
//
// "" and "0" mean from now: Kubernetes would answer them with the whole
// current state as Added events, so the adapter first reads the newest
// resource version (a consistent list of one object) and watches from
// there. With opts.SendInitialEvents, the watch is a streaming list: the
// server sends the state at opts.ResourceVersion ("" for the newest, read
// consistently; "0" for any; otherwise not older than it) as Added events,
// then a bookmark with InitialEventsEnd set, then the changes. A server that
// refuses streaming lists (before Kubernetes 1.27, or with the WatchList
// feature gate off), or a client that said it cannot stream them (see
// FromListerWatcher), makes Watch fail with an error wrapping
// errors.ErrUnsupported.
//
// With opts.AllowBookmarks the server's bookmarks become source.Bookmark
// events. opts.Timeout, rounded up to whole seconds, asks the server to end
// the stream after that long; it then ends with io.EOF.
//
// Every event's ResourceVersion is its object's. An object that is not a T
// becomes an source.Error with an *mirror.ObjectError, and the stream goes
// on. A watch Error event from the server ends the stream with its status
// as an *apierrors.StatusError, classified like the errors of List: a
// version too old for the server wraps source.ErrExpired. client-go ends a
// stream whose connection broke with an end of file, a reset or a timeout
// without saying so, and the adapter cannot tell that from the server's
// timeout: both end with io.EOF, and the next Watch reports what is wrong.
// Any other read or decoding failure client-go reports as an Error event,
// a 500 with the cause ClientWatchDecoding, which ends the stream as an
// *apierrors.StatusError of no mirror kind: the informer relists, as
// client-go's does.
func (lw *ListWatcher[T]) Watch(ctx context.Context, opts source.WatchOptions) (source.Watcher[T], error) {
	w, err := lw.startWatch(ctx, opts, false)
	if err != nil {
		return nil, err
	}
	return w, nil
}

// startWatch is Watch; with encoded, through lw.wire, which hands on
// each object as its encoding (WatchEncoded).
func (lw *ListWatcher[T]) startWatch(ctx context.Context, opts source.WatchOptions, encoded bool) (*watcher[T], error) {
	o := lw.listOptions()
	o.Watch = true
	o.AllowWatchBookmarks = opts.AllowBookmarks
	if opts.Timeout > 0 {
		secs := int64((opts.Timeout + time.Second - 1) / time.Second)
		o.TimeoutSeconds = &secs
	}
	o.ResourceVersion = opts.ResourceVersion
	switch {
	case opts.SendInitialEvents && lw.cannotStream:
		return nil, fmt.Errorf("k8s: watch %s: the client cannot stream lists: %w", lw.what, errors.ErrUnsupported)
	case opts.SendInitialEvents:
		yes := true
		o.SendInitialEvents = &yes
		o.ResourceVersionMatch = metav1.ResourceVersionMatchNotOlderThan
		// The server closes the initial events with a bookmark only if
		// bookmarks are allowed.
		o.AllowWatchBookmarks = true
	case o.ResourceVersion == "" || o.ResourceVersion == "0":
		rv, err := lw.newestVersion(ctx)
		if err != nil {
			return nil, err
		}
		o.ResourceVersion = rv
	}

	wctx, cancel := context.WithCancel(ctx)
	var src watch.Interface
	var stream *wireWatch[T]
	var err error
	if lw.wire != nil {
		stream, err = lw.wire.watch(wctx, o, encoded)
		if err == nil {
			src = stream
		}
	} else {
		src, err = lw.watch(wctx, o)
	}
	if err == nil && isNil(src) {
		err = errors.New("nil watch and nil error from the client")
	}
	if err != nil {
		cancel()
		if opts.SendInitialEvents && streamingRefused(err) {
			return nil, fmt.Errorf("k8s: watch %s: streaming list refused: %w: %w", lw.what, errors.ErrUnsupported, err)
		}
		return nil, wrapError(ctx, err, "k8s: watch %s%s", lw.what, describe(o))
	}
	if opts.SendInitialEvents && isFakeWatch(src) {
		// client-go's fake clientsets answer any watch with a fake
		// watcher that ignores SendInitialEvents and so never closes the
		// initial events: the informer would wait for good. A real
		// server never returns these types; a fake one gets List.
		src.Stop()
		cancel()
		return nil, fmt.Errorf("k8s: watch %s: a fake client cannot stream lists: %w", lw.what, errors.ErrUnsupported)
	}
	w := &watcher[T]{
		lw:        lw,
		src:       src,
		stream:    stream,
		events:    src.ResultChan(),
		ctx:       wctx,
		cancel:    cancel,
		bookmarks: opts.AllowBookmarks,
		initial:   opts.SendInitialEvents,
		from:      o.ResourceVersion,
	}
	// A watcher nobody stops or reads must still let go of its
	// connection when its context ends: client-go's stream watcher would
	// otherwise block for good on an event nobody receives.
	w.unhook = context.AfterFunc(wctx, w.release)
	return w, nil
}

// isFakeWatch reports whether w is one of apimachinery's fake watchers,
// which client-go's fake clientsets return.
func isFakeWatch(w watch.Interface) bool {
	switch w.(type) {
	case *watch.FakeWatcher, *watch.RaceFreeFakeWatcher:
		return true
	}
	return false
}

// newestVersion returns the newest resource version of the objects,
// read consistently.
func (lw *ListWatcher[T]) newestVersion(ctx context.Context) (string, error) {
	rv, err := lw.listVersion(ctx)
	if err != nil {
		return "", fmt.Errorf("k8s: watch %s from now: %w", lw.what, err)
	}
	return rv, nil
}

// listVersion returns the resource version of a consistent list of one
// object.
func (lw *ListWatcher[T]) listVersion(ctx context.Context) (string, error) {
	o := lw.listOptions()
	o.Limit = 1
	if lw.wire != nil {
		p, err := lw.wire.listRaw(ctx, o, false)
		if err != nil {
			return "", wrapError(ctx, err, "list")
		}
		return p.meta.ResourceVersion, nil
	}
	list, err := lw.list(ctx, o)
	if err == nil && isNil(list) {
		err = errors.New("nil list and nil error from the client")
	}
	if err != nil {
		return "", wrapError(ctx, err, "list")
	}
	lm, err := meta.ListAccessor(list)
	if err != nil {
		return "", err
	}
	return lm.GetResourceVersion(), nil
}

// watcher is one watch: it turns the events of client-go's watch into
// mirror events.
type watcher[T Object] struct {
	lw     *ListWatcher[T]
	src    watch.Interface
	events <-chan watch.Event
	// stream, if set, is src, which hands its events on through next
	// rather than events.
	stream *wireWatch[T]
	// ctx is the watch's own context, a child of the one Watch was
	// given; cancel ends it.
	ctx    context.Context
	cancel context.CancelFunc
	// unhook removes release from ctx's end. It is set once Watch has
	// registered release, so only Stop and fail call it, never release.
	unhook func() bool

	bookmarks bool   // pass bookmarks on
	initial   bool   // a streaming list: pass on the bookmark ending its initial events
	from      string // the version the watch started after, for errors

	stopped     atomic.Bool // set by Stop
	releaseOnce sync.Once

	// err, once set, is what every later Next returns. It belongs to the
	// goroutine calling Next.
	err error
}

// Next returns the next event. It blocks until there is one, the watch ends
// or ctx is done; see source.Watcher for the errors it returns.
func (w *watcher[T]) Next(ctx context.Context) (source.Event[T], error) {
	var zero source.Event[T]
	if w.err != nil {
		return zero, w.err
	}
	if w.stream != nil {
		return nextWire(w, ctx, w.decoded)
	}
	for {
		select {
		case ev, ok := <-w.events:
			if !ok || w.stopped.Load() || w.ctx.Err() != nil {
				// Stop and the end of the context close the connection
				// under client-go's decoder, which may report that as an
				// Error event; the end itself is not an error.
				return zero, w.fail(w.endError())
			}
			out, pass, err := w.event(ev)
			if err != nil {
				return zero, w.fail(err)
			}
			if pass {
				return out, nil
			}
		case <-w.ctx.Done():
			return zero, w.fail(w.endError())
		case <-ctx.Done():
			return zero, w.fail(ctx.Err())
		}
	}
}

// nextWire is Next for a wireWatch, whose objects object converts (see
// event).
func nextWire[T Object, O any](w *watcher[T], ctx context.Context, object func(runtime.Object) (O, string, error)) (source.Event[O], error) {
	var zero source.Event[O]
	for {
		ev, objErr, end := w.stream.next(ctx)
		switch {
		case end != nil && ctx.Err() != nil:
			return zero, w.fail(ctx.Err())
		case end != nil && (errors.Is(end, io.EOF) || w.stopped.Load() || w.ctx.Err() != nil):
			return zero, w.fail(w.endError())
		case end != nil:
			return zero, w.fail(wrapError(w.ctx, end, "k8s: watch %s from resource version %q", w.lw.what, w.from))
		case objErr != nil:
			err := &mirror.ObjectError{Err: fmt.Errorf("k8s: watch %s: decode a %s event: %w", w.lw.what, ev.Type, objErr)}
			return source.Event[O]{Type: source.Error, Err: err}, nil
		}
		out, pass, err := event(w, ev, object)
		if err != nil {
			return zero, w.fail(err)
		}
		if pass {
			return out, nil
		}
	}
}

// decoded returns the T an event holds, and its resource version.
func (w *watcher[T]) decoded(o runtime.Object) (T, string, error) {
	obj, err := w.lw.object(o, "")
	if err != nil {
		var zero T
		return zero, "", err
	}
	return obj, obj.GetResourceVersion(), nil
}

// event converts one client-go event. pass is false for an event the
// caller did not ask for (a bookmark); err ends the stream.
func (w *watcher[T]) event(ev watch.Event) (out source.Event[T], pass bool, err error) {
	return event(w, ev, w.decoded)
}

// event converts one client-go event as the method does, its object by
// object, which returns the object and its resource version, or an
// error for an event that is reported and skipped.
func event[T Object, O any](w *watcher[T], ev watch.Event, object func(runtime.Object) (O, string, error)) (out source.Event[O], pass bool, err error) {
	switch ev.Type {
	case watch.Added, watch.Modified, watch.Deleted:
		obj, rv, err := object(ev.Object)
		if err != nil {
			return source.Event[O]{Type: source.Error, Err: err}, true, nil
		}
		out = source.Event[O]{Object: obj, ResourceVersion: rv}
		switch ev.Type {
		case watch.Added:
			out.Type = source.Added
		case watch.Modified:
			out.Type = source.Updated
		default:
			out.Type = source.Deleted
		}
		return out, true, nil
	case watch.Bookmark:
		m, ok := ev.Object.(metav1.Object)
		if !ok || isNil(m) {
			err := &mirror.ObjectError{Err: fmt.Errorf("k8s: bookmark without metadata: %T", ev.Object)}
			return source.Event[O]{Type: source.Error, Err: err}, true, nil
		}
		end := w.initial && m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true"
		out = source.Event[O]{Type: source.Bookmark, ResourceVersion: m.GetResourceVersion(), InitialEventsEnd: end}
		return out, w.bookmarks || end, nil
	case watch.Error:
		// The server ends a stream after an Error event; so does the
		// adapter, which must not let the end read as a timeout.
		return out, false, wrapError(w.ctx, statusError(ev.Object), "k8s: watch %s from resource version %q", w.lw.what, w.from)
	}
	err = fmt.Errorf("k8s: watch %s: unknown event type %q", w.lw.what, ev.Type)
	return source.Event[O]{Type: source.Error, Err: err}, true, nil
}

// statusError returns the error a watch Error event's object describes.
func statusError(obj runtime.Object) error {
	if isNil(obj) {
		return errors.New("error event without a status")
	}
	return apierrors.FromObject(obj)
}

// endError is the error for a watch whose stream ended or whose context
// ended: io.EOF when it was stopped or the server ended it, the context's
// error when the context Watch was given ended.
func (w *watcher[T]) endError() error {
	if !w.stopped.Load() && w.ctx.Err() != nil {
		return w.ctx.Err()
	}
	return io.EOF
}

// fail ends the watch and makes err what every later Next returns.
func (w *watcher[T]) fail(err error) error {
	w.err = err
	w.unhook()
	w.release()
	return err
}

// Stop ends the watch. It is safe to call from any goroutine, any number of
// times; a Next in progress returns io.EOF soon after.
func (w *watcher[T]) Stop() {
	w.stopped.Store(true)
	// Unhooked first, release does not run again on a goroutine of its
	// own when it cancels the context.
	w.unhook()
	w.release()
}

// release stops client-go's watch, which closes its connection and ends
// its goroutine, and cancels the watch's context. It runs once, from Stop,
// from Next when the stream ends, or when the context ends.
func (w *watcher[T]) release() {
	w.releaseOnce.Do(func() {
		w.src.Stop()
		w.cancel()
	})
}
