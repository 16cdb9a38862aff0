package etcd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/listwatch/mirror/source"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

var errChunkTimeout = errors.New("no chunk within the request timeout")

// ListChunks reads every key under the prefix at one revision and hands
// them to chunk as etcd sends them, in key order. It implements
// source.ChunkLister, and a Reflector uses it rather than List.
//
// It reads through etcd's RangeStream (etcd 3.7 and later): one request,
// answered in chunks that etcd sizes itself (opts.Limit does not bound
// them), each read at the list's revision R. R is read first, as List's
// first page reads it: with opts.ResourceVersion "" linearizably, with
// "0" from the member's own state, with "N" from the member's own state,
// failing with an error wrapping source.ErrTooLargeResourceVersion before
// anything is read if the member has not reached N. If R is compacted
// before the last chunk is read, ListChunks fails with an error wrapping
// source.ErrExpired.
//
// Where the server does not offer RangeStream (an etcd older than 3.7, the
// gRPC proxy), ListChunks reads in pages instead, as List does, with
// opts.Limit as the page size (0: one request), and hands each page over
// as a chunk. The ListWatcher remembers that the server lacks it and pages
// from then on.
//
// Options.RequestTimeout bounds the wait for each chunk (and for each page
// when paging), not the whole list nor the time chunk takes: a large list
// read by a slow consumer is not cut short, while a member that stops
// answering in the middle of a list yields source.ErrUnavailable within
// the timeout.
//
// Values that fail to decode are left out and reported as List reports
// them, in the Skipped of the chunk they were read in.
func (lw *ListWatcher[V]) ListChunks(ctx context.Context, opts source.ListOptions, chunk func(source.ListResult[Object[V]]) error) error {
	if opts.Continue != "" {
		return fmt.Errorf("etcd: list %q in chunks: %w", lw.prefix, errBadContinue)
	}
	lw.stats.lists.Add(1)
	if !lw.noStream.Load() {
		rev, err := lw.listRevision(ctx, opts.ResourceVersion)
		if err != nil {
			return err
		}
		err = lw.stream(ctx, rev, chunk)
		if !isUnimplemented(err) {
			return err
		}
		lw.noStream.Store(true)
	}
	return lw.listPages(ctx, opts, chunk)
}

// listRevision returns the revision a list at rv reads: the member's
// current one, read as List's first page reads it. The read is of one key,
// counted rather than fetched, so its cost does not grow with the prefix.
func (lw *ListWatcher[V]) listRevision(ctx context.Context, rv string) (int64, error) {
	var buf [2]clientv3.OpOption
	ops := append(buf[:0], clientv3.WithCountOnly())
	var atLeast int64
	switch rv {
	case "":
	case "0":
		ops = append(ops, clientv3.WithSerializable())
	default:
		var err error
		if atLeast, err = parseRev(rv); err != nil {
			return 0, fmt.Errorf("etcd: list %q: %w", lw.prefix, err)
		}
		ops = append(ops, clientv3.WithSerializable())
	}
	resp, err := lw.get(ctx, lw.start, ops)
	if err != nil {
		return 0, lw.wrapError(ctx, err, "etcd: list %q", lw.prefix)
	}
	rev := resp.Header.Revision
	if rev < atLeast {
		return 0, fmt.Errorf("etcd: list %q at rev %d: member is at rev %d: %w",
			lw.prefix, atLeast, rev, source.ErrTooLargeResourceVersion)
	}
	return rev, nil
}

// stream reads the prefix at rev through RangeStream and hands each chunk
// to chunk. As getAt does for a page, it reads from the member's own state
// and, if that member has not reached rev yet, linearizably.
func (lw *ListWatcher[V]) stream(ctx context.Context, rev int64, chunk func(source.ListResult[Object[V]]) error) error {
	err := lw.streamOnce(ctx, rev, true, chunk)
	if errors.Is(err, rpctypes.ErrFutureRev) {
		// Nothing was handed over: a member behind rev fails the first
		// read of the stream.
		err = lw.streamOnce(ctx, rev, false, chunk)
	}
	return err
}

func (lw *ListWatcher[V]) streamOnce(ctx context.Context, rev int64, serializable bool, chunk func(source.ListResult[Object[V]]) error) (err error) {
	sctx, cancel := context.WithCancelCause(ctx)
	timeout := lw.opts.requestTimeout()
	var timer *time.Timer
	if timeout > 0 {
		timer = time.AfterFunc(timeout, func() { cancel(errChunkTimeout) })
	}
	var ch clientv3.GetStreamChan
	defer func() {
		if timer != nil {
			timer.Stop()
		}
		cancel(nil)
		// The client's goroutine ends once it has handed over the
		// stream's end, which it waits to do until this side reads it.
		if ch != nil {
			for range ch {
			}
		}
	}()

	var buf [3]clientv3.OpOption
	ops := append(buf[:0], clientv3.WithRange(lw.end), clientv3.WithRev(rev))
	if serializable {
		ops = append(ops, clientv3.WithSerializable())
	}
	failed := func(err error) error {
		if context.Cause(sctx) == errChunkTimeout && ctx.Err() == nil {
			return fmt.Errorf("etcd: list %q at rev %d: %w after %v: %w: %w",
				lw.prefix, rev, errChunkTimeout, timeout, source.ErrUnavailable, err)
		}
		return lw.wrapError(ctx, err, "etcd: list %q at rev %d", lw.prefix, rev)
	}
	lw.stats.listRequests.Add(1)
	if ch, err = lw.client.GetStream(sctx, lw.start, ops...); err != nil {
		return failed(err)
	}

	res := source.ListResult[Object[V]]{ResourceVersion: formatRev(rev)}
	handed := false
	for resp := range ch {
		if err := resp.Err(); err != nil {
			return failed(err)
		}
		if len(resp.Kvs) == 0 {
			continue
		}
		// The wait for the next chunk starts once this one is handed
		// over: the consumer's time is not the member's.
		if timer != nil {
			timer.Stop()
		}
		lw.stats.listed(resp.Kvs)
		res.Items, res.Skipped = lw.objects(resp.Kvs, make([]Object[V], 0, len(resp.Kvs)), nil)
		if err := chunk(res); err != nil {
			return err
		}
		handed = true
		if timer != nil {
			timer.Reset(timeout)
		}
	}
	// The client closes the channel without an error only at the
	// stream's end: every chunk has been read.
	if !handed {
		return chunk(source.ListResult[Object[V]]{ResourceVersion: res.ResourceVersion})
	}
	return nil
}

// listPages reads the list in pages, as List does, and hands each to chunk.
func (lw *ListWatcher[V]) listPages(ctx context.Context, opts source.ListOptions, chunk func(source.ListResult[Object[V]]) error) error {
	for {
		page, err := lw.list(ctx, opts)
		if err != nil {
			return err
		}
		next := page.Continue
		page.Continue = ""
		if err := chunk(page); err != nil {
			return err
		}
		if next == "" {
			return nil
		}
		opts = source.ListOptions{Limit: opts.Limit, Continue: next}
	}
}

// isUnimplemented reports whether err says that the server does not offer
// the method called.
func isUnimplemented(err error) bool {
	if err == nil {
		return false
	}
	var etcdErr rpctypes.EtcdError
	if errors.As(err, &etcdErr) {
		return etcdErr.Code() == codes.Unimplemented
	}
	s, ok := status.FromError(err)
	return ok && s.Code() == codes.Unimplemented
}

var _ source.ChunkLister[KV] = (*ListWatcher[[]byte])(nil)
