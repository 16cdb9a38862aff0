package memsource

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/listwatch/mirror/source"
)

// Watch starts a stream of the changes after opts.ResourceVersion (see
// source.ListWatcher); "" and "0" mean the current revision, a later one
// is waited for, a compacted one fails with source.ErrExpired. A delete
// carries the object's last state. With SendInitialEvents the stream
// first sends the state in key order, then an source.Bookmark with
// InitialEventsEnd; a start revision beyond the current one then fails
// with source.ErrTooLargeResourceVersion. The stream reads the Source's
// history, so a watcher that falls behind compaction gets
// source.ErrExpired from Next.
func (s *Source[T]) Watch(ctx context.Context, opts source.WatchOptions) (source.Watcher[T], error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.failLocked(); err != nil {
		return nil, err
	}
	start, err := parseVersion(opts.ResourceVersion)
	if err != nil {
		return nil, err
	}
	if start == 0 {
		start = s.rev
	}
	if start < s.hist.base {
		return nil, fmt.Errorf("memsource: watch from revision %d: compacted up to %d: %w", start, s.hist.base, source.ErrExpired)
	}
	w := &watcher[T]{
		s:         s,
		wakeup:    make(chan struct{}, 1),
		pos:       start,
		bookmarks: opts.AllowBookmarks,
	}
	if opts.SendInitialEvents {
		if start > s.rev {
			return nil, fmt.Errorf("memsource: initial events at revision %d, current is %d: %w", start, s.rev, source.ErrTooLargeResourceVersion)
		}
		w.initial = s.sortedStateLocked(start)
		w.initialRV = strconv.FormatInt(start, 10)
		w.initialEnd = true
	}
	s.watchers[w] = struct{}{}
	if opts.Timeout > 0 {
		w.timer = time.AfterFunc(opts.Timeout, func() { w.finish(io.EOF) })
	}
	w.stopCtx = context.AfterFunc(ctx, func() { w.finish(ctx.Err()) })
	return w, nil
}

// batchSize is how many changes Next copies from the history per lock
// acquisition. It bounds the memory a watcher holds, and spares a watcher
// that is behind from competing with writers for the lock on every event.
const batchSize = 64

// watcher is the stream Watch returns.
type watcher[T any] struct {
	s *Source[T]

	// wakeup holds a token when the watcher may have something new to
	// deliver: a change, a bookmark or its end. A spare token only costs
	// Next one more look.
	wakeup chan struct{}
	// ended is set with err, so that Next can notice the end of the stream
	// without taking the lock for every event.
	ended atomic.Bool

	// Guarded by s.mu.
	pos         int64 // revision of the last change copied to batch, or the start
	err         error // set once the stream has ended
	bookmarks   bool  // bookmarks allowed
	bookmarkDue bool  // a bookmark is due once pos reaches bookmarkAt
	bookmarkAt  int64
	parked      bool // in s.parked
	timer       *time.Timer
	stopCtx     func() bool

	// Owned by the goroutine calling Next.
	batch      []source.Event[T] // events copied from the history, from batchIdx on unsent
	batchIdx   int
	initial    []item[T] // initial events; those from initialIdx on are unsent
	initialIdx int
	initialRV  string
	initialEnd bool // the bookmark that ends the initial events is due
}

// Next returns the next event; see source.Watcher. It never holds the
// Source's lock while it blocks.
func (w *watcher[T]) Next(ctx context.Context) (source.Event[T], error) {
	s := w.s
	for {
		if w.ended.Load() || ctx.Err() != nil {
			return source.Event[T]{}, w.end(ctx)
		}
		if ev, ok := w.pending(); ok {
			return ev, nil
		}

		s.mu.Lock()
		if err := w.fillLocked(); err != nil {
			s.mu.Unlock()
			return source.Event[T]{}, w.end(ctx)
		}
		if len(w.batch) > 0 {
			s.mu.Unlock()
			continue
		}
		if !w.parked {
			w.parked = true
			s.parked = append(s.parked, w)
		}
		s.mu.Unlock()

		select {
		case <-w.wakeup:
		case <-ctx.Done():
		}
	}
}

// end returns the error that ended the stream, ending it with ctx's error if
// nothing else ended it first, and drops the events Next still held.
func (w *watcher[T]) end(ctx context.Context) error {
	w.s.mu.Lock()
	if err := ctx.Err(); err != nil {
		w.finishLocked(err)
	}
	err := w.err
	w.s.mu.Unlock()
	clear(w.batch)
	w.batch, w.batchIdx = w.batch[:0], 0
	w.initial, w.initialIdx, w.initialEnd = nil, 0, false
	return err
}

// pending returns the next event Next already holds, if any.
func (w *watcher[T]) pending() (ev source.Event[T], ok bool) {
	switch {
	case w.initialIdx < len(w.initial):
		it := &w.initial[w.initialIdx]
		ev = source.Event[T]{Type: source.Added, Object: it.obj, ResourceVersion: w.initialRV}
		*it = item[T]{} // sent: do not keep it alive
		w.initialIdx++
		return ev, true

	case w.initialEnd:
		w.initial, w.initialIdx, w.initialEnd = nil, 0, false
		return source.Event[T]{Type: source.Bookmark, ResourceVersion: w.initialRV, InitialEventsEnd: true}, true

	case w.batchIdx < len(w.batch):
		ev = w.batch[w.batchIdx]
		w.batch[w.batchIdx] = source.Event[T]{}
		w.batchIdx++
		return ev, true
	}
	return ev, false
}

// fillLocked refills the batch with the changes after pos and the bookmark
// due among them, in order. If the stream has ended, it returns the error
// that ended it and leaves the batch empty.
func (w *watcher[T]) fillLocked() error {
	s := w.s
	if w.batch == nil {
		w.batch = make([]source.Event[T], 0, batchSize)
	}
	w.batch, w.batchIdx = w.batch[:0], 0
	for w.err == nil && len(w.batch) < batchSize {
		if w.bookmarkDue && w.pos >= w.bookmarkAt {
			w.bookmarkDue = false
			w.batch = append(w.batch, source.Event[T]{Type: source.Bookmark, ResourceVersion: strconv.FormatInt(w.pos, 10)})
			continue
		}
		if w.pos >= s.rev {
			break
		}
		if w.pos < s.hist.base {
			// The changes already copied are good: deliver them first.
			if len(w.batch) == 0 {
				w.finishLocked(fmt.Errorf("memsource: watcher at revision %d fell behind the history, compacted up to %d: %w",
					w.pos, s.hist.base, source.ErrExpired))
			}
			break
		}
		c := s.hist.at(w.pos + 1)
		w.pos++
		w.batch = append(w.batch, source.Event[T]{Type: c.typ, Object: c.obj, ResourceVersion: c.rv})
	}
	return w.err
}

// Stop ends the stream; see source.Watcher. It is safe to call from any
// goroutine, any number of times.
func (w *watcher[T]) Stop() { w.finish(io.EOF) }

func (w *watcher[T]) finish(err error) {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	w.finishLocked(err)
}

// finishLocked ends the stream with err, unless it has already ended, and
// releases what it holds: its place in the Source, its timer, its context
// hook.
func (w *watcher[T]) finishLocked(err error) {
	if w.err != nil {
		return
	}
	s := w.s
	w.err = err
	delete(s.watchers, w)
	if w.parked {
		w.parked = false
		if i := slices.Index(s.parked, w); i >= 0 {
			s.parked = slices.Delete(s.parked, i, i+1)
		}
	}
	if w.timer != nil {
		w.timer.Stop()
	}
	if w.stopCtx != nil {
		w.stopCtx()
	}
	w.ended.Store(true)
	w.wake()
}

// wake makes a blocked Next look again, without waiting for it.
func (w *watcher[T]) wake() {
	select {
	case w.wakeup <- struct{}{}:
	default:
	}
}
