package mirror

import (
	"errors"
	"fmt"
)

// Queue errors.
var (
	// ErrClosed is returned by Pop and PopBatch once the queue is closed.
	ErrClosed = errors.New("mirror: queue closed")

	// ErrRequeue, returned (or wrapped) by a Pop process function, asks the
	// queue to put the popped item back unless its key was queued again
	// meanwhile. Pop then returns the process function's error.
	ErrRequeue = errors.New("mirror: requeue")
)

// KeyError reports that a key function failed for an object. The object is
// skipped; nothing else changes.
type KeyError struct {
	// Object is the object whose key could not be computed.
	Object any
	// Err is the key function's error, or a *PanicError if it panicked.
	Err error
}

// Error implements error.
func (e *KeyError) Error() string {
	return fmt.Sprintf("mirror: no key for object %v: %v", e.Object, e.Err)
}

// Unwrap returns the key function's error.
func (e *KeyError) Unwrap() error { return e.Err }

// KeyFunc computes the key of an object. Keys identify objects across
// versions, so a key function must depend only on an object's identity
// (its name, its etcd key), never on its contents. A key function that
// fails or panics on an object (see PanicError) fails that object only.
type KeyFunc[K comparable, T any] func(obj T) (K, error)

// keyOf applies f and wraps a failure in a *KeyError.
func keyOf[K comparable, T any](f KeyFunc[K, T], obj T) (K, error) {
	k, err := f(obj)
	if err != nil {
		var zero K
		return zero, &KeyError{Object: obj, Err: err}
	}
	return k, nil
}
