package mirror

import (
	"errors"
	"strconv"

	"github.com/listwatch/mirror/internal/textcap"
)

// Errors a ListWatcher reports, classified for the Reflector. Sources wrap
// them (fmt.Errorf("...: %w", ErrExpired)) so that errors.Is finds them.
var (
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
	return "mirror: object " + strconv.Quote(textcap.Clip(e.Key, maxNameText)) + " skipped: " + causeText(e.Err)
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
// source reported as a KeyOnly source.Error, as a deletion whose final
// state is unknown (a tombstone), as DeltaFIFO does; other stores get
// Delete. A store that wraps another must pass evictions on.
type Evicter[T any] interface {
	// Evict drops the object identified by obj; an unknown one is
	// ignored.
	Evict(obj T) error
}
