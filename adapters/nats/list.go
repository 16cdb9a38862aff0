package nats

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/listwatch/mirror/source"
	"github.com/nats-io/nats.go/jetstream"
)

// errNoProgress is the cause of a list that heard nothing from the server
// for Options.RequestTimeout.
var errNoProgress = errors.New("no key received in time")

// List returns every key of the bucket with its latest value, at one
// revision: the list's ResourceVersion, from which Watch goes on with
// nothing lost and nothing repeated.
//
// It reads the bucket as a JetStream KV watcher does for its initial values
// (the latest revision of every key), and takes for the list's revision the
// later of the bucket's last revision read just before and the last
// revision it received: every revision after that one is a change the
// list does not hold. opts.ResourceVersion "" and "0" ask for the latest
// state; "N" fails with an error wrapping source.ErrTooLargeResourceVersion
// if the bucket has not reached revision N. The bucket is read in one pass:
// opts.Limit is ignored and Continue is always empty.
//
// A value that fails to decode (or whose decode function panics) leaves
// its key out of Items and adds an *mirror.ObjectError to Skipped. Errors are
// classified with source.ErrUnavailable and mirror.ErrPermanent where one
// applies, and wrap the client's error too.
func (lw *ListWatcher[V]) List(ctx context.Context, opts source.ListOptions) (source.ListResult[Object[V]], error) {
	var res source.ListResult[Object[V]]
	if opts.Continue != "" {
		return res, fmt.Errorf("nats: list bucket %q: invalid continue token: the bucket is read in one page", lw.bucket)
	}
	var atLeast uint64
	if rv := opts.ResourceVersion; rv != "" && rv != "0" {
		var err error
		if atLeast, err = parseRev(rv); err != nil {
			return res, fmt.Errorf("nats: list bucket %q: %w", lw.bucket, err)
		}
	}
	lw.stats.lists.Add(1)
	kv, stream, err := lw.handles(ctx)
	if err != nil {
		return res, wrapError(ctx, err, "nats: list bucket %q", lw.bucket)
	}
	state, err := lw.streamState(ctx, stream)
	if err != nil {
		return res, wrapError(ctx, err, "nats: list bucket %q", lw.bucket)
	}
	rev := state.LastSeq

	// The client's watcher lives as long as the context it is started
	// with: the guard ends it if the connection goes down.
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stopGuard := lw.guard(0, cancel)
	defer stopGuard()
	w, err := kv.WatchAll(wctx)
	if err != nil {
		if cause := context.Cause(wctx); cause != nil && ctx.Err() == nil {
			err = cause
		}
		return res, wrapError(ctx, err, "nats: list bucket %q", lw.bucket)
	}
	defer func() { _ = w.Stop() }()

	// The watcher sends the latest revision of every key, in revision
	// order, then nil. A bucket that keeps one revision per key sends
	// every revision from its first instead, which may bring a key twice
	// if it is written meanwhile, or its deletion: the later revision
	// wins, as it would in the bucket.
	var (
		entries []jetstream.KeyValueEntry
		at      = make(map[string]int, state.Msgs)
		removed int
		timer   *time.Timer
		timeout <-chan time.Time
	)
	if d := lw.opts.requestTimeout(); d > 0 {
		timer = time.NewTimer(d)
		defer timer.Stop()
		timeout = timer.C
	}
	for done := false; !done; {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				err := lw.watcherClosed()
				if cause := context.Cause(wctx); cause != nil && ctx.Err() == nil {
					err = cause
				}
				return res, wrapError(ctx, err, "nats: list bucket %q", lw.bucket)
			}
			if e == nil {
				done = true
				break
			}
			if timer != nil {
				timer.Reset(lw.opts.requestTimeout())
			}
			rev = max(rev, e.Revision())
			key := e.Key()
			i, seen := at[key]
			if e.Operation() != jetstream.KeyValuePut {
				if seen && entries[i] != nil {
					entries[i] = nil
					removed++
				}
				continue
			}
			switch {
			case !seen:
				at[key] = len(entries)
				entries = append(entries, e)
			case entries[i] == nil:
				entries[i] = e
				removed--
			default:
				entries[i] = e
			}
		case <-timeout:
			return res, wrapError(ctx, fmt.Errorf("%w within %v", errNoProgress, lw.opts.requestTimeout()),
				"nats: list bucket %q", lw.bucket)
		case <-ctx.Done():
			return res, ctx.Err()
		}
	}
	if rev < atLeast {
		return res, fmt.Errorf("nats: list bucket %q at rev %d: the bucket is at rev %d: %w",
			lw.bucket, atLeast, rev, source.ErrTooLargeResourceVersion)
	}

	res.ResourceVersion = formatRev(rev)
	res.Items = make([]Object[V], 0, len(entries)-removed)
	var n, bytes int64
	for _, e := range entries {
		if e == nil {
			continue
		}
		n++
		bytes += int64(len(e.Key()) + len(e.Value()))
		o, err := lw.object(e)
		if err != nil {
			res.Skipped = append(res.Skipped, err)
			continue
		}
		res.Items = append(res.Items, o)
	}
	lw.stats.listKeys.Add(n)
	lw.stats.listBytes.Add(bytes)
	return res, nil
}
