package mirror

import (
	"context"
	"errors"
	"fmt"
	"strconv"
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

	// AllowBookmarks lets the source send EventBookmark events, which
	// carry only a newer resource version. Sources may ignore it.
	AllowBookmarks bool

	// Timeout, if positive, asks the source to end the stream after this
	// long.
	Timeout time.Duration

	// SendInitialEvents asks for a streaming list: the state at
	// ResourceVersion as EventAdded events, an EventBookmark with
	// InitialEventsEnd set, then the changes. A source that cannot
	// returns an error wrapping errors.ErrUnsupported.
	SendInitialEvents bool
}

// EventType says what a watch event reports.
type EventType uint8

const (
	// EventAdded reports a new object.
	EventAdded EventType = iota + 1
	// EventModified reports a changed object.
	EventModified
	// EventDeleted reports a deleted object; Object holds its last state,
	// or, if KeyOnly, only what identifies it.
	EventDeleted
	// EventBookmark reports only that the source has reached
	// ResourceVersion; Object is the zero value.
	EventBookmark
	// EventError reports an object the source could not produce; Err
	// says which and why, and the stream goes on. With KeyOnly, Object
	// identifies it and the Reflector evicts it from the store (see
	// Evicter); otherwise Object is the zero value.
	EventError
)

// String returns the name of t, such as "Added".
func (t EventType) String() string {
	switch t {
	case EventAdded:
		return "Added"
	case EventModified:
		return "Modified"
	case EventDeleted:
		return "Deleted"
	case EventBookmark:
		return "Bookmark"
	case EventError:
		return "Error"
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
	// EventError may leave it empty.
	ResourceVersion string

	// InitialEventsEnd marks the EventBookmark that ends a streaming
	// list's initial state.
	InitialEventsEnd bool

	// KeyOnly is set on an EventDeleted whose Object identifies the
	// object (the key function works on it) but lacks its last state;
	// the mirror delivers the last state it applied instead (see
	// KeyOnlyDeleter). On an EventError, see EventError.
	KeyOnly bool

	// Err is the problem an EventError reports; nil for every other type.
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

// Errors a ListWatcher reports, classified for the Reflector. Sources wrap
// them (fmt.Errorf("...: %w", ErrExpired)) so that errors.Is finds them.
var (
	// ErrExpired means the requested resource version is no longer
	// available (compacted history, HTTP 410 Gone). The Reflector relists.
	ErrExpired = errors.New("mirror: resource version expired")

	// ErrTooLargeResourceVersion means the source has not yet reached the
	// requested resource version (a lagging replica). The Reflector relists
	// with a consistent read instead of asking again for the same version.
	ErrTooLargeResourceVersion = errors.New("mirror: resource version too large")

	// ErrUnavailable means the source cannot serve now (no leader,
	// connection refused, throttled). The Reflector pauses and watches
	// again from the last version it saw, without relisting.
	ErrUnavailable = errors.New("mirror: source unavailable")

	// ErrPermanent means the source refuses to serve for a reason that
	// retrying alone will not cure (HTTP 401, 403 or 404, etcd's
	// permission denied). The Reflector still retries with backoff; an
	// unsynced Informer stops waiting after a few in a row (see
	// Informer.WaitForSync).
	ErrPermanent = errors.New("mirror: source refused permanently")
)

// ObjectError reports one object that a source could not produce, or an
// informer could not apply because a callback panicked on it. The object
// is skipped; nothing else is lost.
type ObjectError struct {
	// Key is the source's name for the object (for an informer, its key
	// formatted with %v).
	Key string
	// ResourceVersion is the version at which the object was read, if
	// known.
	ResourceVersion string
	// Err is the cause, such as a decode error or a *PanicError.
	Err error
}

// Error implements error. It bounds the length of Key and of the cause's
// text.
func (e *ObjectError) Error() string {
	return "mirror: object " + strconv.Quote(clip(e.Key, maxNameText)) + " skipped: " + causeText(e.Err)
}

// Unwrap returns the cause.
func (e *ObjectError) Unwrap() error { return e.Err }

// isUnsupported reports whether err says a feature is not supported.
func isUnsupported(err error) bool { return errors.Is(err, errors.ErrUnsupported) }

// ReflectorStore is what a Reflector writes to, one call at a time;
// DeltaFIFO, FIFO and Indexer implement it. A store should fail only the
// object that failed.
type ReflectorStore[T any] interface {
	// Add records a new object.
	Add(obj T) error
	// Update records a changed object.
	Update(obj T) error
	// Delete records that obj left the source.
	Delete(obj T) error
	// Replace makes list the whole content, as of resourceVersion.
	Replace(list []T, resourceVersion string) error
	// Resync offers the current content again; a plain store does nothing.
	Resync() error
}

// KeyOnlyDeleter is implemented by a ReflectorStore that can take a
// deletion whose object only identifies it (Event.KeyOnly) and find the
// last state itself, as DeltaFIFO does; other stores get Delete. A store
// that wraps another must pass such deletions on.
type KeyOnlyDeleter[T any] interface {
	// DeleteKeyOnly records that the object identified by obj left the
	// source; obj need not hold its last state.
	DeleteKeyOnly(obj T) error
}

// Evicter is implemented by a ReflectorStore that can drop an object the
// source reported as a KeyOnly EventError, as a deletion whose final
// state is unknown (a tombstone), as DeltaFIFO does; other stores get
// Delete. A store that wraps another must pass evictions on.
type Evicter[T any] interface {
	// Evict drops the object identified by obj; an unknown one is
	// ignored.
	Evict(obj T) error
}
