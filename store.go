package mirror

import "iter"

// Store is a keyed collection of objects that a Reflector can fill. The
// Indexer in this package implements it; so does FIFO.
type Store[K comparable, T any] interface {
	ReflectorStore[T]

	// Get returns the stored object with obj's key.
	Get(obj T) (item T, exists bool, err error)
	// GetByKey returns the object stored under key.
	GetByKey(key K) (item T, exists bool)
	// List returns every stored object, in no particular order.
	List() []T
	// ListKeys returns every key, in no particular order.
	ListKeys() []K
	// All yields every key and object, in no particular order. The store
	// may hold a read lock while it yields, so the loop body must not
	// write to the store.
	All() iter.Seq2[K, T]
	// Len returns the number of stored objects.
	Len() int
}

// KnownObjects is what a DeltaFIFO consults to learn which objects exist
// downstream of it (normally the informer's cache): a Delete of an unknown
// key is dropped, a Replace makes tombstones for known keys it does not
// list, and a Resync offers known objects again. *Indexer implements it.
type KnownObjects[K comparable, T any] interface {
	GetByKey(key K) (item T, exists bool)
	All() iter.Seq2[K, T]
}
