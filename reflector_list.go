package mirror

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/listwatch/mirror/source"
)

// errStreamCut is reported when a streaming list ends before the bookmark
// that closes its initial events.
var errStreamCut = errors.New("stream ended before its initial events were complete")

// errNoInitialEventsEnd is reported when a streaming list shows that the
// bookmark closing its initial events will not come: it stalled (see
// ListWatchOptions.StreamingListStall), or a change came first. The
// Reflector uses List from then on.
var errNoInitialEventsEnd = errors.New("no end of the initial events")

// errStreamStalled ends the context of a streaming list that stalled.
var errStreamStalled = errors.New("stalled")

// sync replaces the store's content with the source's, by a streaming list
// if that is enabled (returning its still open Watcher) or else by List.
// It reports whether it succeeded.
func (r *Reflector[T]) sync(ctx context.Context) (source.Watcher[T], bool) {
	for r.opts.ListWatch.StreamingList && !r.noStreaming {
		rv := r.streamVersion()
		w, err := r.streamList(ctx, rv)
		switch {
		case err == nil:
			return w, true
		case ctx.Err() != nil:
			return nil, false
		case isUnsupported(err):
			r.noStreaming = true
			r.logger.Info("source cannot stream lists; using List", errAttr(err))
		case errors.Is(err, errNoInitialEventsEnd):
			// Reported; the source would do it again.
			r.noStreaming = true
		case isGone(err) && rv != "":
			// streamVersion now asks for a consistent read.
		default:
			return nil, false
		}
	}
	return nil, r.list(ctx) == nil
}

// list reads the whole source, with ListChunks if the source has it and
// List otherwise, and hands it to the store.
func (r *Reflector[T]) list(ctx context.Context) error {
	rv := r.relistVersion()
	limit := r.opts.ListWatch.PageSize
	chunked := r.chunks != nil && !r.noChunks
	for {
		r.attemptStart = time.Now()
		sink := r.newListSink()
		var listRV string
		var n int
		var midList bool
		var err error
		if chunked {
			listRV, n, midList, err = r.listChunks(ctx, rv, limit, sink)
		} else {
			listRV, n, midList, err = r.listPages(ctx, rv, limit, sink)
		}
		if err == nil {
			r.replace(sink, n, listRV)
			return nil
		}
		r.abandon(sink, listRV)
		if chunked && !midList && isUnsupported(err) {
			r.noChunks, chunked = true, false
			r.logger.Info("source cannot list in chunks; using List", errAttr(err))
			continue
		}
		if ctx.Err() != nil {
			return err
		}
		r.fail(&r.stats.listErrors, err)
		if !isGone(err) {
			return err
		}
		r.setVersionGone()
		switch {
		case rv != "":
			// The version is gone, or the list's snapshot was compacted
			// away before it was read whole: start again, reading the
			// newest state consistently.
			rv = ""
		case midList && (chunked || limit > 0):
			// Even the newest state was compacted before it was read
			// whole: read it in one request.
			chunked, limit = false, 0
		default:
			return err
		}
	}
}

// listPages calls List until the last page and hands each page to sink.
// It returns the version of the list, the number of objects it held and,
// for an error, whether it came after the first page.
func (r *Reflector[T]) listPages(ctx context.Context, rv string, limit int64, sink *listSink[T]) (listRV string, n int, midList bool, err error) {
	opts := source.ListOptions{ResourceVersion: rv, Limit: limit}
	for page := 1; ; page++ {
		res, err := r.lw.List(ctx, opts)
		if err != nil {
			return listRV, n, page > 1, r.errorf("list at version %q, page %d: %w", rv, page, err)
		}
		if page == 1 {
			listRV = res.ResourceVersion
		}
		r.takeChunk(sink, res, listRV)
		n += len(res.Items)
		if res.Continue == "" {
			return listRV, n, false, nil
		}
		// The continue token fixes the version of the later pages.
		opts = source.ListOptions{Limit: limit, Continue: res.Continue}
	}
}

// listChunks reads the list with ListChunks and hands each chunk to sink;
// it returns as listPages does.
func (r *Reflector[T]) listChunks(ctx context.Context, rv string, limit int64, sink *listSink[T]) (listRV string, n int, midList bool, err error) {
	chunks := 0
	err = r.chunks.ListChunks(ctx, source.ListOptions{ResourceVersion: rv, Limit: limit}, func(res source.ListResult[T]) error {
		if chunks == 0 {
			listRV = res.ResourceVersion
		}
		chunks++
		r.takeChunk(sink, res, listRV)
		n += len(res.Items)
		return nil
	})
	if err != nil {
		return listRV, n, chunks > 0, r.errorf("list at version %q, after %d chunks: %w", rv, chunks, err)
	}
	return listRV, n, false, nil
}

// takeChunk reports what a page or chunk of the list at listRV skipped and
// hands its objects to sink.
func (r *Reflector[T]) takeChunk(sink *listSink[T], res source.ListResult[T], listRV string) {
	for _, skipped := range res.Skipped {
		r.reportSkipped(r.errorf("list at version %q: %w", listRV, skipped), r.listSkipped)
	}
	sink.add(res.Items)
}

// streamList asks for a streaming list from rv, gathers its initial
// events up to the bookmark that closes them and replaces the store's
// content with them. It returns the stream, still open, to be watched on.
//
// The events reach a store that applies lists as they arrive in chunks
// of PageSize only when the list is the first one read consistently
// (rv and the last version seen are both ""): then a retry after a
// failure reads consistently too, so it cannot go back behind a part
// already applied. Any other streaming list is handed over whole.
func (r *Reflector[T]) streamList(ctx context.Context, rv string) (source.Watcher[T], error) {
	r.attemptStart = time.Now()
	w, err := r.openWatch(ctx, rv, true)
	if err != nil {
		if isUnsupported(err) || ctx.Err() != nil {
			return nil, err
		}
		return nil, r.streamFailed(rv, err)
	}
	r.stats.watches.Add(1)
	sink := r.newListSink()
	if rv != "" || r.lastVersion() != "" {
		sink.applier = nil
	}
	var items []T
	n := 0
	sctx, stopGuard := r.guardStall(ctx)
	defer stopGuard()
	for {
		ev, err := w.Next(sctx)
		if err != nil {
			w.Stop()
			r.abandon(sink, "")
			if isUnsupported(err) || ctx.Err() != nil {
				return nil, err
			}
			if context.Cause(sctx) == errStreamStalled {
				return nil, r.noInitialEventsEnd(rv, sink, fmt.Errorf("%w after %d objects: %v without an event",
					errNoInitialEventsEnd, n, r.opts.ListWatch.StreamingListStall))
			}
			if errors.Is(err, io.EOF) {
				err = fmt.Errorf("%w (after %d objects)", errStreamCut, n)
			}
			return nil, r.streamFailed(rv, err)
		}
		r.stats.events.Add(1)
		switch ev.Type {
		case source.Added:
			items = append(items, ev.Object)
			n++
			if sink.applier != nil && int64(len(items)) >= r.opts.ListWatch.PageSize {
				sink.add(items)
				items = nil
			}
		case source.Bookmark:
			if ev.InitialEventsEnd {
				sink.add(items)
				r.replace(sink, n, ev.ResourceVersion)
				return w, nil
			}
		case source.Error:
			// A streaming list holds only what it could produce; an
			// object it could not is left out, as a List leaves it out.
			r.reportSkipped(r.errorf("streaming list from version %q: %w", rv, eventErr(ev)), r.listSkipped)
		default:
			// Without a key function the Reflector cannot apply a change
			// to the objects it gathered, and the initial state should not
			// hold changes anyway.
			w.Stop()
			r.abandon(sink, "")
			return nil, r.noInitialEventsEnd(rv, sink, fmt.Errorf("%w: %v event before it, after %d objects",
				errNoInitialEventsEnd, ev.Type, n))
		}
	}
}

// guardStall returns a context for the events of a streaming list that
// ends, with cause errStreamStalled, once StreamingListStall has passed
// without an event, and a function that stops the guard. It counts the
// events through the Reflector's counter, which the stream's every event
// adds to anyway: a timer reset per event would cost each of them.
func (r *Reflector[T]) guardStall(ctx context.Context) (context.Context, func()) {
	d := r.opts.ListWatch.StreamingListStall
	sctx, cancel := context.WithCancelCause(ctx)
	var mu sync.Mutex // orders the timer's creation before its first run
	var t *time.Timer
	stopped := false
	seen := r.stats.events.Load()
	mu.Lock()
	t = time.AfterFunc(d, func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		if n := r.stats.events.Load(); n != seen {
			seen = n
			t.Reset(d)
			return
		}
		cancel(errStreamStalled)
	})
	mu.Unlock()
	return sctx, func() {
		mu.Lock()
		stopped = true
		t.Stop()
		mu.Unlock()
		cancel(nil)
	}
}

// noInitialEventsEnd reports err, a streaming list from rv without the
// end of its initial events, and returns it; sync then lists with List.
// If the store had part of the stream, that list reads the newest state
// consistently: an older one would take the store back.
func (r *Reflector[T]) noInitialEventsEnd(rv string, sink *listSink[T], err error) error {
	err = r.errorf("streaming list from version %q: %w; using List from now on", rv, err)
	r.fail(&r.stats.listErrors, err)
	if sink.handed {
		r.setVersionGone()
	}
	return err
}

// streamFailed reports the failure of a streaming list from rv and returns
// it.
func (r *Reflector[T]) streamFailed(rv string, err error) error {
	err = r.errorf("streaming list from version %q: %w", rv, err)
	r.fail(&r.stats.listErrors, err)
	if isGone(err) {
		r.setVersionGone()
	}
	return err
}

// listApplier is a store that takes a list as it is read, chunk by chunk,
// rather than whole at its end: the informer's queues are. They apply
// each chunk as it comes where the result cannot differ from applying the
// whole list at once (the initial sync, into an empty cache), so that the
// list and the cache it fills are never both held whole; otherwise they
// keep the chunks and apply the list as one step at its end.
//
// The Reflector makes one list at a time: listChunk for each chunk, then
// listDone once the list is whole, or listFailed if it ends before. The
// store may keep the items of a chunk (see ListResult.Items).
type listApplier[T any] interface {
	// listChunk takes the next chunk of the list in progress; the first
	// call starts a list. An error reports objects the store skipped.
	listChunk(items []T) error
	// listDone completes the list: its chunks are the whole content, as
	// of version rv, as Replace would make it. An error is Replace's.
	listDone(rv string) error
	// listFailed ends the list in progress without completing it. What
	// the store applied of it stays applied: the next list, read at a
	// version no older, corrects it.
	listFailed()
}

// listSink takes a list as the Reflector reads it: it hands each chunk to
// the store as it comes if the store is a listApplier, and gathers them
// for the store's Replace otherwise.
type listSink[T any] struct {
	r       *Reflector[T]
	applier listApplier[T] // nil: gather
	chunks  [][]T
	n       int
	handed  bool // a chunk reached applier
}

// newListSink starts the sink of a list, and of the objects it skips.
func (r *Reflector[T]) newListSink() *listSink[T] {
	r.listSkipped = make(map[objectRef]struct{})
	return &listSink[T]{r: r, applier: r.applier}
}

// add takes the next chunk.
func (s *listSink[T]) add(items []T) {
	s.n += len(items)
	if s.applier == nil {
		if len(items) > 0 {
			s.chunks = append(s.chunks, items)
		}
		return
	}
	s.handed = true
	s.r.lockStore()
	err := s.applier.listChunk(items)
	s.r.unlockStore()
	if err != nil {
		s.r.stats.storeErrors.Add(1)
		s.r.report(s.r.errorf("list: %w", err))
	}
}

// abandon ends a list that failed. If the store applied chunks of it
// that were read at version rv, later lists read at rv or newer (see
// relistVersion), so that the store never goes back behind them.
func (r *Reflector[T]) abandon(sink *listSink[T], rv string) {
	sink.chunks = nil
	if !sink.handed {
		return
	}
	r.lockStore()
	sink.applier.listFailed()
	r.unlockStore()
	if rv != "" {
		r.mu.Lock()
		r.listFloor = rv
		r.mu.Unlock()
	}
}

// replace completes a list at version rv holding n objects: the store
// applies it (Replace, or listDone for a listApplier), and the Reflector
// is at rv.
func (r *Reflector[T]) replace(sink *listSink[T], n int, rv string) {
	r.lockStore()
	var err error
	switch {
	case sink.applier != nil:
		err = sink.applier.listDone(rv)
	case len(sink.chunks) == 1:
		err = r.store.Replace(sink.chunks[0], rv)
	default:
		// Joined at their total size, once, rather than chunk by chunk,
		// which would copy the objects again at every doubling.
		err = r.store.Replace(slices.Concat(sink.chunks...), rv)
	}
	r.unlockStore()
	sink.chunks = nil
	if err != nil {
		// The store applied what it could (see ReflectorStore); refusing
		// the list would only make the Reflector list again and again.
		r.stats.storeErrors.Add(1)
		r.report(r.errorf("replace with %d objects at version %q: %w", n, rv, err))
	}
	r.confirmed(rv, true)
	r.mu.Lock()
	r.versionGone = false
	r.listFloor = ""
	r.mu.Unlock()
	// The objects this list could not produce are, from now on, all
	// there is to remember: the others were fixed or are gone.
	r.skipped, r.listSkipped = r.listSkipped, nil
	// A list after a resume is a relist too: the store held a state.
	if r.stats.lists.Add(1) > 1 || r.listCause != ListInitial {
		r.stats.relists.Add(1)
	}
	switch r.listCause {
	case ListExpired:
		r.stats.relistsExpired.Add(1)
	case ListAfterError:
		r.stats.relistsAfterError.Add(1)
	}
	if r.onListed != nil {
		r.onListed(r.listCause, n, time.Since(r.attemptStart))
	}
	r.eventsSinceList = 0
	r.logger.Debug("listed", "objects", n, "resourceVersion", rv)
}

// relistVersion is the version to List at: "0" (any) the first time, when
// a slightly stale list is fine and a cache may serve it; the last version
// seen afterwards, so the store never goes back in time; "" (the newest,
// read consistently) once the source refused the last version. A list that
// failed after the store applied part of it (see listApplier) moves the
// version to that list's, for the same reason, and so does a change the
// store has part of (see Event.More): a list older than it would take the
// part back out.
func (r *Reflector[T]) relistVersion() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.versionGone:
		return ""
	case r.listFloor != "":
		return r.listFloor
	case r.change.rv != "":
		return r.change.rv
	case r.lastRV == "":
		return "0"
	}
	return r.lastRV
}

// streamVersion is the version to stream a list from: the last version
// seen, or "" (the newest, consistent) the first time and once the source
// refused the last version.
func (r *Reflector[T]) streamVersion() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.versionGone {
		return ""
	}
	return r.lastRV
}
