package k8s

import (
	"context"
	"errors"
	"fmt"

	"github.com/listwatch/mirror/source"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// List returns one page of the objects.
//
// The first page fixes the list's resource version: opts.ResourceVersion
// "" asks for the newest state, read consistently; "0" for any state the
// server has at hand (its watch cache), which may be stale; any other
// version for a state not older than it, which fails with an error
// wrapping source.ErrTooLargeResourceVersion if the server has not reached
// it. Later pages (opts.Continue) are at the first page's version; one
// whose version the server has compacted away meanwhile fails with an
// error wrapping source.ErrExpired. opts.Limit is the page size (0: one
// page); servers ignore it when they serve "0" from their watch cache.
//
// An item that is not a T is left out of Items and reported in Skipped as
// an *mirror.ObjectError. Errors are classified with source.ErrExpired,
// source.ErrTooLargeResourceVersion, source.ErrUnavailable and
// mirror.ErrPermanent where one applies, and wrap the client's error too.
func (lw *ListWatcher[T]) List(ctx context.Context, opts source.ListOptions) (source.ListResult[T], error) {
	o := lw.listRequest(opts)
	if lw.wire != nil {
		return lw.wireList(ctx, o)
	}
	list, err := lw.list(ctx, o)
	return lw.listResult(ctx, o, list, err)
}

// listRequest returns the options of the request for List(opts).
func (lw *ListWatcher[T]) listRequest(opts source.ListOptions) metav1.ListOptions {
	o := lw.listOptions()
	o.Limit = opts.Limit
	if opts.Continue != "" {
		// The token holds the version; the server refuses both.
		o.Continue = opts.Continue
	} else {
		o.ResourceVersion = opts.ResourceVersion
		if v := opts.ResourceVersion; v != "" && v != "0" {
			// Without a match, a version and a limit ask for exactly
			// that version, which etcd may have compacted; not older
			// than it is what the caller wants, and what the watch
			// cache can serve.
			o.ResourceVersionMatch = metav1.ResourceVersionMatchNotOlderThan
		}
	}
	return o
}

// listResult is List's result of what lw.list returned.
func (lw *ListWatcher[T]) listResult(ctx context.Context, o metav1.ListOptions, list runtime.Object, err error) (source.ListResult[T], error) {
	var res source.ListResult[T]
	if err == nil && isNil(list) {
		err = errors.New("nil list and nil error from the client")
	}
	if err != nil {
		return res, wrapError(ctx, err, "k8s: list %s%s", lw.what, describe(o))
	}
	lm, err := meta.ListAccessor(list)
	if err != nil {
		return res, fmt.Errorf("k8s: list %s: %w", lw.what, err)
	}
	res.ResourceVersion = lm.GetResourceVersion()
	res.Continue = lm.GetContinue()
	res.Items = make([]T, 0, meta.LenList(list))
	// WithAlloc gives every item a memory of its own, as client-go's
	// reflector does: items that point into the list's array would keep
	// the whole page alive for as long as the cache holds any one of them.
	err = meta.EachListItemWithAlloc(list, func(item runtime.Object) error {
		obj, err := lw.object(item, res.ResourceVersion)
		if err != nil {
			res.Skipped = append(res.Skipped, err)
			return nil
		}
		res.Items = append(res.Items, obj)
		return nil
	})
	if err != nil {
		return source.ListResult[T]{}, fmt.Errorf("k8s: list %s: %w", lw.what, err)
	}
	return res, nil
}

// wireList is List through lw.wire.
func (lw *ListWatcher[T]) wireList(ctx context.Context, o metav1.ListOptions) (source.ListResult[T], error) {
	p, err := lw.wire.list(ctx, o)
	if err != nil {
		return source.ListResult[T]{}, wrapError(ctx, err, "k8s: list %s%s", lw.what, describe(o))
	}
	return source.ListResult[T]{Items: p.items, Skipped: p.skipped, ResourceVersion: p.meta.ResourceVersion, Continue: p.meta.Continue}, nil
}

// describe says, for an error, what a request asked for beyond the
// selectors, which the caller knows.
func describe(o metav1.ListOptions) string {
	switch {
	case o.Continue != "":
		return " (continued)"
	case o.ResourceVersion != "":
		return fmt.Sprintf(" at resource version %q", o.ResourceVersion)
	}
	return ""
}
