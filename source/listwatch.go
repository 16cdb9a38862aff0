package source

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ListWatcher is a versioned source of objects: it lists them at a version
// and then reports every change after that version, in order. Versions
// are opaque strings the Reflector only passes back. A ListWatcher must be
// safe for concurrent use.
type ListWatcher[T any] interface {
	// List returns one page of objects (see ListOptions).
	List(ctx context.Context, opts ListOptions) (ListResult[T], error)

	// Watch starts a stream of the changes after opts.ResourceVersion. The
	// stream ends when ctx is done, when the Watcher is stopped, or when
	// the source ends it.
	Watch(ctx context.Context, opts WatchOptions) (Watcher[T], error)
}

// StreamingListPreferrer is implemented by a ListWatcher that wants
// streaming lists (WatchOptions.SendInitialEvents) even when
// ListWatchOptions.StreamingList is false. NewReflector asks once. A
// wrapping ListWatcher must pass the question on.
type StreamingListPreferrer interface {
	// PrefersStreamingList reports whether the source wants streaming
	// lists.
	PrefersStreamingList() bool
}

// ListOptions selects a page of a list.
type ListOptions struct {
	// ResourceVersion is the version to list at: "" the newest, read
	// consistently; "0" any, possibly stale; other, one not older. Later
	// pages ignore it.
	ResourceVersion string

	// Limit is the most items one page may hold; 0 means no limit.
	Limit int64

	// Continue, when not empty, asks for the page after the one whose
	// ListResult.Continue it was, at the first page's version.
	Continue string
}

// ListResult is one page of a list.
type ListResult[T any] struct {
	// Items are the objects of this page; they belong to the caller, and
	// the source must not change or reuse the slice.
	Items []T

	// ResourceVersion is the version of the whole list, on every page.
	ResourceVersion string

	// Continue is empty on the last page; otherwise it is the token that
	// asks for the next one.
	Continue string

	// Skipped reports objects the source could not produce, left out of
	// Items; each error should name its object (see *ObjectError).
	Skipped []error
}

// ChunkLister is implemented by a ListWatcher that can read a whole list
// in one call and hand it over in chunks, as etcd's RangeStream does. The
// Reflector prefers it to List.
type ChunkLister[T any] interface {
	// ListChunks reads every object at one version and calls chunk with
	// them in order, on the calling goroutine, at least once (with no
	// Items for an empty list). Every chunk carries the whole list's
	// ResourceVersion and an empty Continue; its Items belong to chunk.
	// opts is as for List, Limit a hint for the chunk size, Continue
	// empty. An error from chunk is returned as it is; any other error is
	// classified as List's. A source that cannot list this way returns an
	// error wrapping errors.ErrUnsupported before calling chunk.
	ListChunks(ctx context.Context, opts ListOptions, chunk func(ListResult[T]) error) error
}

// WatchOptions says where a watch starts and how it behaves.
type WatchOptions struct {
	// ResourceVersion is the version after which changes are reported;
	// "" or "0" mean from now. One the source no longer has fails with
	// ErrExpired.
	ResourceVersion string

	// AllowBookmarks lets the source send Bookmark events, which
	// carry only a newer resource version. Sources may ignore it.
	AllowBookmarks bool

	// Timeout, if positive, asks the source to end the stream after this
	// long.
	Timeout time.Duration

	// SendInitialEvents asks for a streaming list: the state at
	// ResourceVersion as Added events, an Bookmark with
	// InitialEventsEnd set, then the changes. A source that cannot
	// returns an error wrapping errors.ErrUnsupported.
	SendInitialEvents bool
}

// EventType says what a watch event reports.
type EventType uint8

const (
	// Added reports a new object.
	Added EventType = iota + 1
	// Updated reports a changed object.
	Updated
	// Deleted reports a deleted object; Object holds its last state,
	// or, if KeyOnly, only what identifies it.
	Deleted
	// Bookmark reports only that the source has reached
	// ResourceVersion; Object is the zero value.
	Bookmark
	// Error reports an object the source could not produce; Err
	// says which and why, and the stream goes on. With KeyOnly, Object
	// identifies it and the Reflector evicts it from the store (see
	// Evicter); otherwise Object is the zero value.
	Error
)

// String returns the name of t in lower case, such as "added".
func (t EventType) String() string {
	switch t {
	case Added:
		return "added"
	case Updated:
		return "updated"
	case Deleted:
		return "deleted"
	case Bookmark:
		return "bookmark"
	case Error:
		return "error"
	}
	return fmt.Sprintf("EventType(%d)", uint8(t))
}

// Event is one change reported by a watch.
type Event[T any] struct {
	// Type says what happened.
	Type EventType
	// Object is the object's state after the event; see EventType for
	// what it holds for each type.
	Object T

	// ResourceVersion is the source's version after this event; an
	// Error may leave it empty.
	ResourceVersion string

	// InitialEventsEnd marks the Bookmark that ends a streaming
	// list's initial state.
	InitialEventsEnd bool

	// KeyOnly is set on an Deleted whose Object identifies the
	// object (the key function works on it) but lacks its last state;
	// the mirror delivers the last state it applied instead (see
	// KeyOnlyDeleter). On an Error, see Error.
	KeyOnly bool

	// Err is the problem an Error reports; nil for every other type.
	Err error

	// More is set when the next event belongs to the same change (an
	// etcd transaction, one ResourceVersion); a watch from before the
	// change must replay its events in the same order every time.
	// Sources whose versions name single events leave it false.
	More bool
}

// Watcher is one stream of watch events. Next is called from one goroutine
// at a time; Stop may be called from any goroutine, any number of times.
type Watcher[T any] interface {
	// Next blocks until the next event. An error ends the stream for
	// good: io.EOF for an ordinary close, ctx.Err(), or the source's
	// error classified with ErrExpired, ErrTooLargeResourceVersion or
	// ErrUnavailable where one applies.
	Next(ctx context.Context) (Event[T], error)

	// Stop ends the stream without waiting for a Next in progress, which
	// then returns io.EOF.
	Stop()
}

// ErrExpired means the requested resource version is no longer
// available (compacted history, HTTP 410 Gone). The Reflector relists.
var ErrExpired = errors.New("mirror: resource version expired")

// ErrTooLargeResourceVersion means the source has not yet reached the
// requested resource version (a lagging replica). The Reflector relists
// with a consistent read instead of asking again for the same version.
var ErrTooLargeResourceVersion = errors.New("mirror: resource version too large")

// ErrUnavailable means the source cannot serve now (no leader,
// connection refused, throttled). The Reflector pauses and watches
// again from the last version it saw, without relisting.
var ErrUnavailable = errors.New("mirror: source unavailable")
