package mirror

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// ListWatcher is a versioned source of objects: it lists them at a version
// and then reports every change after that version, in order.
//
// Resource versions are opaque strings chosen by the source; the Reflector
// only passes them back. A ListWatcher must be safe for concurrent use.
type ListWatcher[T any] interface {
	// List returns one page of objects. See ListOptions for the meaning of
	// ResourceVersion, Limit and Continue.
	List(ctx context.Context, opts ListOptions) (ListResult[T], error)

	// Watch starts a stream of the changes after opts.ResourceVersion. The
	// stream ends when ctx is done, when the Watcher is stopped, or when
	// the source ends it.
	Watch(ctx context.Context, opts WatchOptions) (Watcher[T], error)
}

// StreamingListPreferrer is implemented by a ListWatcher that wants the
// Reflector to get its state by streaming lists (see
// WatchOptions.SendInitialEvents) even when ListWatchOptions.StreamingList
// is false, as the Kubernetes adapter does. NewReflector
// asks once; a source that then refuses a streaming list with an error
// wrapping errors.ErrUnsupported gets List, as with StreamingList. A
// ListWatcher that wraps another hides the preference unless it has the
// method too and passes the question on.
type StreamingListPreferrer interface {
	// PrefersStreamingList reports whether the source wants streaming
	// lists.
	PrefersStreamingList() bool
}

// ListOptions selects a page of a list.
type ListOptions struct {
	// ResourceVersion is the version to list at:
	//   ""       the newest version, read consistently (never stale);
	//   "0"      any version the source has at hand, possibly stale;
	//   other    a version not older than this one.
	// Later pages of a paged list ignore it: Continue fixes their version.
	ResourceVersion string

	// Limit is the most items one page may hold; 0 means no limit.
	Limit int64

	// Continue, when not empty, asks for the page after the one whose
	// ListResult.Continue it was. Every page of one list is at the version
	// of the first.
	Continue string
}

// ListResult is one page of a list.
type ListResult[T any] struct {
	// Items are the objects of this page. They belong to the caller once
	// List returns: a source must not change or reuse the slice, which a
	// Reflector may hand on to its store as it is.
	Items []T

	// ResourceVersion is the version the whole list is at. It is the same
	// on every page of one list.
	ResourceVersion string

	// Continue is empty on the last page; otherwise it is the token that
	// asks for the next one.
	Continue string

	// Skipped reports objects the source could not produce (a value that
	// failed to decode, say). They are not in Items; the rest of the page
	// is good. Each error should say which object it was about, for
	// example with *ObjectError.
	Skipped []error
}

// ChunkLister is implemented by a ListWatcher that can read a whole list
// in one call and hand it over in chunks as it reads them, as etcd's
// RangeStream does. The Reflector prefers it to List: a list read this way
// holds no state between calls (a paged list abandoned halfway leaves
// nothing behind either way, but a source that kept a stream open behind a
// continue token could not know it was abandoned), and the source can read
// ahead while the Reflector hands a chunk to its store.
type ChunkLister[T any] interface {
	// ListChunks reads every object at one version and calls chunk with
	// them, a part at a time and in order, on the goroutine that called
	// ListChunks. Every chunk's ResourceVersion is the version of the whole
	// list, the same on every chunk; Continue is empty. chunk is called at
	// least once, with no Items for an empty list, so that the version is
	// known. The Items of a chunk belong to chunk, as ListResult.Items
	// belong to List's caller.
	//
	// opts.ResourceVersion chooses the version as it does for List;
	// opts.Limit, if positive, is the most objects a chunk should hold,
	// which a source may ignore; opts.Continue must be empty.
	//
	// ListChunks returns nil once the last chunk has been handed over. An
	// error that chunk returns stops the list and is returned as it is.
	// Any other error ends the list where it is, classified as List's
	// errors are: the chunks handed over so far are then not a whole list.
	// A source that cannot list this way returns an error wrapping
	// errors.ErrUnsupported before it calls chunk; the Reflector then uses
	// List.
	ListChunks(ctx context.Context, opts ListOptions, chunk func(ListResult[T]) error) error
}

// WatchOptions says where a watch starts and how it behaves.
type WatchOptions struct {
	// ResourceVersion is the version after which changes are reported.
	// "" or "0" mean "from now". A version the source no longer has fails
	// with an error wrapping ErrExpired.
	ResourceVersion string

	// AllowBookmarks lets the source send EventBookmark events, which
	// carry only a newer resource version. Sources may ignore it.
	AllowBookmarks bool

	// Timeout, if positive, asks the source to end the stream after this
	// long. The Reflector sets it so that watches are renewed regularly.
	Timeout time.Duration

	// SendInitialEvents asks for a streaming list: the source first sends
	// the state at ResourceVersion ("" for the newest) as EventAdded events,
	// then an EventBookmark with InitialEventsEnd set, then the changes
	// after it. A source that cannot do this returns an error wrapping
	// errors.ErrUnsupported, and the Reflector falls back to List.
	SendInitialEvents bool
}

// EventType says what a watch event reports.
type EventType uint8

const (
	// EventAdded reports a new object.
	EventAdded EventType = iota + 1
	// EventModified reports a changed object.
	EventModified
	// EventDeleted reports a deleted object; Object holds its last state
	// as far as the source knows it, or, if the event is KeyOnly, no more
	// than what identifies it.
	EventDeleted
	// EventBookmark reports only that the source has reached
	// ResourceVersion; Object is the zero value.
	EventBookmark
	// EventError reports an object the source could not produce (a value
	// that failed to decode). Err says which and why. The stream goes on:
	// errors that end a stream come from Watcher.Next instead.
	//
	// If KeyOnly is set, Object identifies the object the error is about:
	// the source still holds it, in a state the mirror cannot represent,
	// so whatever the mirror held for it is out of date. The Reflector
	// reports Err and evicts the object from its store (see Evicter):
	// handlers learn of it as a deletion whose final state is unknown,
	// never as an observed one. Otherwise Object is the zero value and
	// the store is left as it is.
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

	// ResourceVersion is the source's version after this event. Every
	// event carries one, except EventError, which may leave it empty.
	ResourceVersion string

	// InitialEventsEnd is set on the EventBookmark that closes the initial
	// state of a streaming list (WatchOptions.SendInitialEvents).
	InitialEventsEnd bool

	// KeyOnly is set on an EventDeleted whose Object identifies the
	// object (the key function works on it) but does not hold its last
	// state: the source was not asked for that state, or no longer has
	// it. The Reflector hands such a deletion to the store's
	// DeleteKeyOnly if it has one (see KeyOnlyDeleter), and the
	// informer's queues then deliver the last state the mirror applied
	// instead, which, for a deletion seen by a watch that missed
	// nothing, is the object's final state. On an EventError, it says
	// that Object identifies the object the mirror must drop (see
	// EventError).
	KeyOnly bool

	// Err is the problem an EventError reports; nil for every other type.
	Err error

	// More is set when the next event of the same watch belongs to the
	// same change at the source, one made in a single step (an etcd
	// transaction) whose events all carry this ResourceVersion: the
	// mirror is at that version only once the last of them, the one
	// without More, is applied. The Reflector resumes a broken watch from
	// the last complete version, and a checkpoint is never taken between
	// two events of one change. A watch from before the change must bring
	// all its events, in the same order every time (etcd does): of a
	// change that a watch broke inside of, the Reflector passes over the
	// events the store was handed before the break, so each is handed
	// over once. Sources whose versions name single events leave it
	// false.
	More bool
}

// Watcher is one stream of watch events. Next is called from one goroutine
// at a time; Stop may be called from any goroutine, any number of times.
type Watcher[T any] interface {
	// Next blocks until the next event and returns it. A non-nil error
	// means the stream has ended: io.EOF when the source closed it in the
	// ordinary way (a timeout, a stopped watcher), ctx.Err() when ctx is
	// done, or the source's error, classified with ErrExpired,
	// ErrTooLargeResourceVersion or ErrUnavailable where one applies.
	// After an error, every later call returns an error too.
	Next(ctx context.Context) (Event[T], error)

	// Stop ends the stream and releases what it holds. It does not wait
	// for a Next in progress, which returns soon after with io.EOF.
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

	// ErrPermanent means the source refuses to serve the mirror for a
	// reason that retrying alone will not cure: the credentials are not
	// allowed to read (HTTP 401 or 403, etcd's permission denied), or
	// what is mirrored does not exist (HTTP 404 for a resource type). The
	// Reflector still retries, with backoff, in case someone fixes the
	// cause; an Informer that has not synced yet gives up waiting after a
	// few such failures in a row and says why (see Informer.WaitForSync
	// and WaitForCacheSync).
	ErrPermanent = errors.New("mirror: source refused permanently")
)

// ObjectError reports one object that a source could not produce, or an
// informer could not apply because SameObject or ResourceVersion panicked
// on it, with the key the source knows it by (for an informer, its key
// formatted with %v). The object is skipped; nothing else is lost.
type ObjectError struct {
	// Key is the source's name for the object (an etcd key, a
	// namespace/name).
	Key string
	// ResourceVersion is the version at which the object was read, if
	// known.
	ResourceVersion string
	// Err is the cause, such as a decode error, or one that wraps a
	// *PanicError and names the function that panicked.
	Err error
}

// Error implements error. It cuts Key and the cause's text to a bounded
// length: a source's error may quote the value that failed to decode.
func (e *ObjectError) Error() string {
	return "mirror: object " + strconv.Quote(clip(e.Key, maxNameText)) + " skipped: " + causeText(e.Err)
}

// Unwrap returns the cause.
func (e *ObjectError) Unwrap() error { return e.Err }

// isUnsupported reports whether err says a feature is not supported.
func isUnsupported(err error) bool { return errors.Is(err, errors.ErrUnsupported) }

// ReflectorStore is what a Reflector writes to: the queues (DeltaFIFO,
// FIFO) and the Indexer implement it. A Reflector makes one call at a
// time. An error from one call is reported and the Reflector goes on;
// a store should skip only the object that failed, and its Replace should
// apply every object it can.
type ReflectorStore[T any] interface {
	// Add records a new object.
	Add(obj T) error
	// Update records a changed object.
	Update(obj T) error
	// Delete records that obj left the source.
	Delete(obj T) error
	// Replace makes list the whole content, as of resourceVersion.
	Replace(list []T, resourceVersion string) error
	// Resync offers the current content again (see DeltaFIFO.Resync); a
	// plain store does nothing.
	Resync() error
}

// KeyOnlyDeleter is implemented by a ReflectorStore that can take a
// deletion whose object holds only what identifies it (Event.KeyOnly) and
// find the object's last state itself, as DeltaFIFO does. The Reflector
// hands such deletions to DeleteKeyOnly where a store has it, and to
// Delete otherwise: a store that needs nothing but the key to delete, as
// Indexer and FIFO, loses nothing. A store that wraps another must
// implement it too and pass such deletions on, or the wrapped store sees
// them as ordinary deletions of an object that holds only its key.
type KeyOnlyDeleter[T any] interface {
	// DeleteKeyOnly records that the object identified by obj left the
	// source; obj need not hold its last state.
	DeleteKeyOnly(obj T) error
}

// Evicter is implemented by a ReflectorStore that can drop an object it
// can no longer represent, as DeltaFIFO does: the source still holds the
// object but reported it as an EventError with KeyOnly set, typically a
// value that fails to decode. The object leaves the store as a deletion
// whose final state is unknown (a tombstone carrying the last state the
// store knows), which consumers can tell from an observed deletion. The
// Reflector calls Delete on a store that is not an Evicter. A store that
// wraps another must implement it too and pass evictions on.
type Evicter[T any] interface {
	// Evict drops the object identified by obj, which need hold no more
	// than what identifies it. An object the store does not know is
	// ignored.
	Evict(obj T) error
}
