package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/source"
)

// catalogSource is a source.ListWatcher of the catalog's products, through its
// HTTP API: the part of this example to copy for a source of one's own.
// What it must get right is the contract: versions are the catalog's
// revisions, as decimal strings; a watch reports every change after the
// version it starts from, in order; and errors say what the Reflector
// should do next, by wrapping source.ErrExpired (relist),
// source.ErrTooLargeResourceVersion or source.ErrUnavailable (retry).
type catalogSource struct {
	base   string // the API's URL, such as "http://127.0.0.1:8080"
	client *http.Client
}

var _ source.ListWatcher[Product] = (*catalogSource)(nil)

// List returns every product in one page: the API has no paging, so
// opts.Limit is ignored, as a Kubernetes API server ignores it when it
// serves a list from its cache. The catalog is always current, so any
// version asked for is served by the newest state.
func (s *catalogSource) List(ctx context.Context, opts source.ListOptions) (source.ListResult[Product], error) {
	var page productsPage
	if err := s.get(ctx, "/products", nil, &page); err != nil {
		return source.ListResult[Product]{}, fmt.Errorf("catalog: list: %w", err)
	}
	if rv := opts.ResourceVersion; rv != "" && rv != "0" {
		atLeast, err := strconv.ParseInt(rv, 10, 64)
		if err != nil {
			return source.ListResult[Product]{}, fmt.Errorf("catalog: list at %q: not a revision", rv)
		}
		if page.Revision < atLeast {
			return source.ListResult[Product]{}, fmt.Errorf("catalog: list at %d: the catalog is at %d: %w",
				atLeast, page.Revision, source.ErrTooLargeResourceVersion)
		}
	}
	return source.ListResult[Product]{Items: page.Products, ResourceVersion: strconv.FormatInt(page.Revision, 10)}, nil
}

// Watch returns a stream of the changes after opts.ResourceVersion ("" or
// "0": from now). It asks the API for them one long poll at a time, as
// Next needs them; a poll that finds nothing becomes a bookmark, if
// opts.AllowBookmarks. Streaming lists are not supported.
func (s *catalogSource) Watch(ctx context.Context, opts source.WatchOptions) (source.Watcher[Product], error) {
	if opts.SendInitialEvents {
		return nil, fmt.Errorf("catalog: streaming list: %w", errors.ErrUnsupported)
	}
	w := &watcher{s: s, bookmarks: opts.AllowBookmarks}
	switch rv := opts.ResourceVersion; rv {
	case "", "0":
		l, err := s.List(ctx, source.ListOptions{})
		if err != nil {
			return nil, err
		}
		w.after, _ = strconv.ParseInt(l.ResourceVersion, 10, 64)
	default:
		var err error
		if w.after, err = strconv.ParseInt(rv, 10, 64); err != nil {
			return nil, fmt.Errorf("catalog: watch from %q: not a revision", rv)
		}
	}
	if opts.Timeout > 0 {
		w.ctx, w.stop = context.WithTimeout(ctx, opts.Timeout)
	} else {
		w.ctx, w.stop = context.WithCancel(ctx)
	}
	return w, nil
}

// watcher is one watch: changes already received, and the revision to
// ask for more after.
type watcher struct {
	s         *catalogSource
	ctx       context.Context // ends with Stop, the timeout or Watch's ctx
	stop      context.CancelFunc
	bookmarks bool
	after     int64
	pending   []change
	err       error // once set, what Next returns
}

// longPoll is how long one request waits for a change.
const longPoll = 30 * time.Second

func (w *watcher) Next(ctx context.Context) (source.Event[Product], error) {
	for len(w.pending) == 0 && w.err == nil {
		// The request ends with ctx or with the watch, whichever first.
		rctx, cancel := context.WithCancel(ctx)
		stop := context.AfterFunc(w.ctx, cancel)
		var page changesPage
		err := w.s.get(rctx, "/changes", url.Values{
			"after": {strconv.FormatInt(w.after, 10)},
			"wait":  {longPoll.String()},
		}, &page)
		stop()
		cancel()
		switch {
		case ctx.Err() != nil:
			w.err = ctx.Err()
		case w.ctx.Err() != nil:
			w.err = io.EOF // stopped or timed out: an ordinary end
		case err != nil:
			w.err = fmt.Errorf("catalog: watch after %d: %w", w.after, err)
		case len(page.Changes) == 0:
			if w.bookmarks && page.Revision > w.after {
				w.after = page.Revision
				return source.Event[Product]{Type: source.Bookmark, ResourceVersion: strconv.FormatInt(w.after, 10)}, nil
			}
		default:
			w.pending = page.Changes
		}
	}
	if w.err != nil {
		w.stop()
		return source.Event[Product]{}, w.err
	}
	ch := w.pending[0]
	w.pending = w.pending[1:]
	w.after = ch.Product.Revision
	ev := source.Event[Product]{Object: ch.Product, ResourceVersion: strconv.FormatInt(w.after, 10)}
	switch ch.Type {
	case "added":
		ev.Type = source.Added
	case "modified":
		ev.Type = source.Updated
	case "deleted":
		ev.Type = source.Deleted
	default:
		ev = source.Event[Product]{Type: source.Error, ResourceVersion: ev.ResourceVersion,
			Err: &mirror.ObjectError{Key: ch.Product.Name, Err: fmt.Errorf("unknown change %q", ch.Type)}}
	}
	return ev, nil
}

func (w *watcher) Stop() { w.stop() }

// get fetches path with query and decodes the JSON answer into v. Its
// errors are classified for the Reflector.
func (s *catalogSource) get(ctx context.Context, path string, query url.Values, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.base+path+"?"+query.Encode(), nil)
	if err != nil {
		return err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%w: %w", source.ErrUnavailable, err) // refused, reset, timed out
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusOK:
	case resp.StatusCode == http.StatusGone:
		return fmt.Errorf("%s: %w", resp.Status, source.ErrExpired)
	case resp.StatusCode == http.StatusUnauthorized, resp.StatusCode == http.StatusForbidden:
		return fmt.Errorf("%s: %w", resp.Status, mirror.ErrPermanent)
	case resp.StatusCode == http.StatusTooManyRequests, resp.StatusCode >= 500:
		return fmt.Errorf("%s: %w", resp.Status, source.ErrUnavailable)
	default:
		return fmt.Errorf("%s", resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("%w: reading the answer: %w", source.ErrUnavailable, err)
	}
	return nil
}
