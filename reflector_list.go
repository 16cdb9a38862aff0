package mirror

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"
)

// errStreamCut is reported when a streaming list ends before the bookmark
// that closes its initial events.
var errStreamCut = errors.New("stream ended before its initial events were complete")

// sync replaces the store's content with the source's, by a streaming list
// if that is enabled (returning its still open Watcher) or else by List.
// It reports whether it succeeded.
func (r *Reflector[T]) sync(ctx context.Context) (Watcher[T], bool) {
	for r.opts.StreamingList && !r.noStreaming {
		rv := r.streamVersion()
		w, err := r.streamList(ctx, rv)
		switch {
		case err == nil:
			return w, true
		case ctx.Err() != nil:
			return nil, false
		case isUnsupported(err):
			r.noStreaming = true
			r.logger.Info("source cannot stream lists; using List", "err", err)
		case isGone(err) && rv != "":
			// streamVersion now asks for a consistent read.
		default:
			return nil, false
		}
	}
	return nil, r.list(ctx) == nil
}

// list reads the whole source with List, page by page, and hands it to
// the store's Replace.
func (r *Reflector[T]) list(ctx context.Context) error {
	rv := r.relistVersion()
	limit := r.opts.PageSize
	for {
		r.attemptStart = time.Now()
		pages, n, listRV, midList, err := r.listPages(ctx, rv, limit)
		if err == nil {
			r.replace(pages, n, listRV)
			return nil
		}
		if ctx.Err() != nil {
			return err
		}
		r.fail(err)
		if !isGone(err) {
			return err
		}
		r.setVersionGone()
		switch {
		case rv != "":
			// The version is gone, or a later page's snapshot was
			// compacted away: start again, reading the newest state
			// consistently.
			rv = ""
		case midList && limit > 0:
			// Even the newest state was compacted before all its pages
			// were read: read it in one request.
			limit = 0
		default:
			return err
		}
	}
}

// listPages calls List until the last page and returns the pages, the
// number of items they hold and the version of the list. midList tells
// whether an error came from a page after the first.
func (r *Reflector[T]) listPages(ctx context.Context, rv string, limit int64) (pages [][]T, n int, listRV string, midList bool, err error) {
	opts := ListOptions{ResourceVersion: rv, Limit: limit}
	r.listSkipped = make(map[objectRef]struct{})
	for page := 1; ; page++ {
		res, err := r.lw.List(ctx, opts)
		if err != nil {
			return nil, 0, "", page > 1, r.errorf("list at version %q, page %d: %w", rv, page, err)
		}
		if page == 1 {
			listRV = res.ResourceVersion
		}
		pages = append(pages, res.Items)
		n += len(res.Items)
		for _, skipped := range res.Skipped {
			r.reportSkipped(r.errorf("list at version %q: %w", listRV, skipped), r.listSkipped)
		}
		if res.Continue == "" {
			return pages, n, listRV, false, nil
		}
		// The continue token fixes the version of the later pages.
		opts = ListOptions{Limit: limit, Continue: res.Continue}
	}
}

// streamList asks for a streaming list from rv, gathers its initial
// events up to the bookmark that closes them and replaces the store's
// content with them. It returns the stream, still open, to be watched on.
func (r *Reflector[T]) streamList(ctx context.Context, rv string) (Watcher[T], error) {
	r.attemptStart = time.Now()
	w, err := r.openWatch(ctx, rv, true)
	if err != nil {
		if isUnsupported(err) || ctx.Err() != nil {
			return nil, err
		}
		return nil, r.streamFailed(rv, err)
	}
	r.stats.watches.Add(1)
	r.listSkipped = make(map[objectRef]struct{})
	var items []T
	for {
		ev, err := w.Next(ctx)
		if err != nil {
			w.Stop()
			if isUnsupported(err) || ctx.Err() != nil {
				return nil, err
			}
			if errors.Is(err, io.EOF) {
				err = fmt.Errorf("%w (after %d objects)", errStreamCut, len(items))
			}
			return nil, r.streamFailed(rv, err)
		}
		r.stats.events.Add(1)
		switch ev.Type {
		case EventAdded:
			items = append(items, ev.Object)
		case EventBookmark:
			if ev.InitialEventsEnd {
				r.replace([][]T{items}, len(items), ev.ResourceVersion)
				return w, nil
			}
		case EventError:
			// A streaming list holds only what it could produce; an
			// object it could not is left out, as a List leaves it out.
			r.reportSkipped(r.errorf("streaming list from version %q: %w", rv, eventErr(ev)), r.listSkipped)
		default:
			// Without a key function the Reflector cannot apply a change
			// to the objects it gathered, and the initial state should not
			// hold changes anyway.
			w.Stop()
			return nil, r.streamFailed(rv, fmt.Errorf("%v event before the end of the initial events", ev.Type))
		}
	}
}

// streamFailed reports the failure of a streaming list from rv and returns
// it.
func (r *Reflector[T]) streamFailed(rv string, err error) error {
	err = r.errorf("streaming list from version %q: %w", rv, err)
	r.fail(err)
	if isGone(err) {
		r.setVersionGone()
	}
	return err
}

// pageReplacer is a store that takes a list as the pages it was read in.
// The Informer's in-order queue is one: it keeps the pages until they are
// applied, so joining them into one slice first would copy every object
// once more, a good share of an informer's initial sync.
type pageReplacer[T any] interface {
	// replacePages is Replace with list given as pages holding n objects
	// in all. The store may keep pages: the Reflector does not touch them
	// again (see ListResult.Items).
	replacePages(pages [][]T, n int) error
}

// replace hands a completed list at version rv, read as pages holding n
// objects in all, to the store.
func (r *Reflector[T]) replace(pages [][]T, n int, rv string) {
	r.lockStore()
	var err error
	switch {
	case r.pages != nil:
		err = r.pages.replacePages(pages, n)
	case len(pages) == 1:
		err = r.store.Replace(pages[0], rv)
	default:
		// Joined at their total size, once, rather than page by page,
		// which would copy the objects again at every doubling.
		err = r.store.Replace(slices.Concat(pages...), rv)
	}
	r.unlockStore()
	if err != nil {
		// The store applied what it could (see ReflectorStore); refusing
		// the list would only make the Reflector list again and again.
		r.report(r.errorf("replace with %d objects at version %q: %w", n, rv, err))
	}
	r.confirmed(rv, true)
	r.mu.Lock()
	r.versionGone = false
	r.mu.Unlock()
	// The objects this list could not produce are, from now on, all
	// there is to remember: the others were fixed or are gone.
	r.skipped, r.listSkipped = r.listSkipped, nil
	if r.stats.lists.Add(1) > 1 {
		r.stats.relists.Add(1)
	}
	r.eventsSinceList = 0
	r.logger.Debug("listed", "objects", n, "resourceVersion", rv)
}

// relistVersion is the version to List at: "0" (any) the first time, when
// a slightly stale list is fine and a cache may serve it; the last version
// seen afterwards, so the store never goes back in time; "" (the newest,
// read consistently) once the source refused the last version.
func (r *Reflector[T]) relistVersion() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.versionGone:
		return ""
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
