package etcd

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/listwatch/mirror/source"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// List returns one page of the keys under the prefix, in key order.
//
// The first page fixes the revision R of the whole list: with
// opts.ResourceVersion "" it is read linearizably (never stale); with "0"
// it may be served by any member from its own state; with "N" it is read
// from the member's state and fails with an error wrapping
// source.ErrTooLargeResourceVersion if that member has not reached N. Every
// later page is read at R exactly, so a paged list is one consistent
// snapshot however many writes happen while it is read; a page whose R has
// been compacted meanwhile fails with an error wrapping source.ErrExpired.
// opts.Limit is the page size (0: one page).
//
// A value that fails to decode (or whose decode function panics) leaves
// its key out of Items and adds an *mirror.ObjectError to Skipped. Errors are classified with
// source.ErrExpired, source.ErrTooLargeResourceVersion and
// source.ErrUnavailable where one applies, and wrap etcd's error too.
func (lw *ListWatcher[V]) List(ctx context.Context, opts source.ListOptions) (source.ListResult[Object[V]], error) {
	if opts.Continue == "" {
		lw.stats.lists.Add(1)
	}
	return lw.list(ctx, opts)
}

// list is List, uncounted: it reads one page.
func (lw *ListWatcher[V]) list(ctx context.Context, opts source.ListOptions) (source.ListResult[Object[V]], error) {
	var res source.ListResult[Object[V]]
	var buf [4]clientv3.OpOption
	ops := append(buf[:0], clientv3.WithRange(lw.end))
	if opts.Limit > 0 {
		ops = append(ops, clientv3.WithLimit(opts.Limit))
	}

	var resp *clientv3.GetResponse
	var rev int64
	var err error
	if opts.Continue != "" {
		var start string
		if start, rev, err = lw.decodeContinue(opts.Continue); err != nil {
			return res, fmt.Errorf("etcd: list %q: %w", lw.prefix, err)
		}
		if resp, err = lw.getAt(ctx, start, rev, ops); err != nil {
			return res, lw.wrapError(ctx, err, "etcd: list %q at rev %d", lw.prefix, rev)
		}
	} else {
		var atLeast int64
		switch opts.ResourceVersion {
		case "":
		case "0":
			ops = append(ops, clientv3.WithSerializable())
		default:
			if atLeast, err = parseRev(opts.ResourceVersion); err != nil {
				return res, fmt.Errorf("etcd: list %q: %w", lw.prefix, err)
			}
			// Any state at or after atLeast will do, and the member's
			// own is the cheapest to read; if it lags, the caller
			// learns so and reads consistently instead.
			ops = append(ops, clientv3.WithSerializable())
		}
		resp, err = lw.get(ctx, lw.start, ops)
		if err != nil {
			return res, lw.wrapError(ctx, err, "etcd: list %q", lw.prefix)
		}
		// Only the first page's header names the list's revision: later
		// pages carry the store's revision at the time they are read.
		rev = resp.Header.Revision
		if rev < atLeast {
			return res, fmt.Errorf("etcd: list %q at rev %d: member is at rev %d: %w",
				lw.prefix, atLeast, rev, source.ErrTooLargeResourceVersion)
		}
	}

	lw.stats.listed(resp.Kvs)
	res.ResourceVersion = formatRev(rev)
	res.Items, res.Skipped = lw.objects(resp.Kvs, make([]Object[V], 0, len(resp.Kvs)), nil)
	if resp.More && len(resp.Kvs) > 0 {
		// The next page starts just after the last key of this one.
		last := resp.Kvs[len(resp.Kvs)-1].Key
		res.Continue = encodeContinue(rev, string(last)+"\x00")
	}
	return res, nil
}

// getAt reads a later page of a list at rev. The data at a past revision
// never changes, so any member that has applied rev can serve it from its
// own state without asking the leader; a member that has not yet applied
// it answers ErrFutureRev, and then a linearizable read, which waits for the
// member to catch up, serves the page instead.
func (lw *ListWatcher[V]) getAt(ctx context.Context, key string, rev int64, ops []clientv3.OpOption) (*clientv3.GetResponse, error) {
	ops = append(ops, clientv3.WithRev(rev))
	resp, err := lw.get(ctx, key, append(ops, clientv3.WithSerializable()))
	if errors.Is(err, rpctypes.ErrFutureRev) {
		resp, err = lw.get(ctx, key, ops)
	}
	return resp, err
}

func (lw *ListWatcher[V]) get(ctx context.Context, key string, ops []clientv3.OpOption) (*clientv3.GetResponse, error) {
	rctx, done := lw.requestContext(ctx)
	lw.stats.listRequests.Add(1)
	resp, err := lw.client.Get(rctx, key, ops...)
	return resp, done(err)
}

// A continue token is the URL-safe base64 of a format byte, the list's
// revision as a uvarint, and the key the next page starts at. It is opaque
// to callers; the format byte lets a later version change it.
const continueFormat = 1

var errBadContinue = errors.New("invalid continue token")

func encodeContinue(rev int64, next string) string {
	b := make([]byte, 0, 1+binary.MaxVarintLen64+len(next))
	b = append(b, continueFormat)
	b = binary.AppendUvarint(b, uint64(rev))
	b = append(b, next...)
	return base64.RawURLEncoding.EncodeToString(b)
}

// decodeContinue returns the start key and revision a token names. It
// refuses a token whose key lies outside the prefix, so that a token from
// another ListWatcher cannot read keys this one does not mirror.
func (lw *ListWatcher[V]) decodeContinue(tok string) (key string, rev int64, err error) {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil || len(b) < 2 || b[0] != continueFormat {
		return "", 0, errBadContinue
	}
	r, n := binary.Uvarint(b[1:])
	if n <= 0 || r == 0 || r > 1<<63-1 {
		return "", 0, errBadContinue
	}
	key = string(b[1+n:])
	if !strings.HasPrefix(key, lw.prefix) || key < lw.start {
		return "", 0, errBadContinue
	}
	return key, int64(r), nil
}
