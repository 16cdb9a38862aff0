package mirror

import (
	"iter"
)

// Reader is the read side of a mirror's cache; Informer and Indexer
// implement it. Objects it returns are shared and must not be modified.
type Reader[K comparable, T any] interface {
	// GetByKey returns the object cached under key.
	GetByKey(key K) (item T, exists bool)
	// Get returns the cached object with obj's key; it fails only if the
	// key function fails for obj.
	Get(obj T) (item T, exists bool, err error)
	// List returns every cached object, in no particular order.
	List() []T
	// ListKeys returns every cached key, in no particular order.
	ListKeys() []K
	// All yields every cached key and object, in no particular order,
	// without holding a lock while the loop body runs.
	All() iter.Seq2[K, T]
	// Len returns the number of cached objects.
	Len() int
	// ByIndex returns the cached objects indexed under indexedValue by
	// the named index, or an error wrapping ErrUnknownIndex.
	ByIndex(indexName, indexedValue string) ([]T, error)
	// IndexKeys is ByIndex returning the objects' keys.
	IndexKeys(indexName, indexedValue string) ([]K, error)
	// ByIndexAll is ByIndex as an iterator, like All; it yields nothing
	// for an unknown index.
	ByIndexAll(indexName, indexedValue string) iter.Seq2[K, T]
	// ListIndexFuncValues returns every value of the named index that
	// holds an object, or nil if there is no such index.
	ListIndexFuncValues(indexName string) []string
}

var (
	_ Reader[string, int] = (*Informer[string, int])(nil)
	_ Reader[string, int] = (*Indexer[string, int])(nil)
)

// GetByKey returns the cached object with key.
func (inf *Informer[K, T]) GetByKey(key K) (T, bool) { return inf.cache.GetByKey(key) }

// Get returns the cached object with obj's key.
func (inf *Informer[K, T]) Get(obj T) (T, bool, error) { return inf.cache.Get(obj) }

// List returns every cached object, in no particular order.
func (inf *Informer[K, T]) List() []T { return inf.cache.List() }

// ListKeys returns every cached key, in no particular order.
func (inf *Informer[K, T]) ListKeys() []K { return inf.cache.ListKeys() }

// All yields every cached key and object, as Indexer.All does.
func (inf *Informer[K, T]) All() iter.Seq2[K, T] { return inf.cache.All() }

// Len returns the number of cached objects.
func (inf *Informer[K, T]) Len() int { return inf.cache.Len() }

// ByIndex is Reader.ByIndex over the cache.
func (inf *Informer[K, T]) ByIndex(indexName, indexedValue string) ([]T, error) {
	return inf.cache.ByIndex(indexName, indexedValue)
}

// IndexKeys is Reader.IndexKeys over the cache.
func (inf *Informer[K, T]) IndexKeys(indexName, indexedValue string) ([]K, error) {
	return inf.cache.IndexKeys(indexName, indexedValue)
}

// IndexLen returns how many cached objects have the value indexedValue
// for the index indexName, or 0 if there is no such index.
func (inf *Informer[K, T]) IndexLen(indexName, indexedValue string) int {
	return inf.cache.IndexLen(indexName, indexedValue)
}

// ByIndexAll is ByIndex as an iterator, as Indexer.ByIndexAll.
func (inf *Informer[K, T]) ByIndexAll(indexName, indexedValue string) iter.Seq2[K, T] {
	return inf.cache.ByIndexAll(indexName, indexedValue)
}

// ListIndexFuncValues is Reader.ListIndexFuncValues over the cache.
func (inf *Informer[K, T]) ListIndexFuncValues(indexName string) []string {
	return inf.cache.ListIndexFuncValues(indexName)
}

// AddIndexers adds indexes to the cache, as Indexer.AddIndexers; it may
// be called while the informer runs.
func (inf *Informer[K, T]) AddIndexers(indexers Indexers[T]) error {
	return inf.cache.AddIndexers(indexers)
}
