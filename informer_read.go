package mirror

import (
	"iter"
)

// GetByKey returns the cached object with key.
func (inf *Informer[K, T]) GetByKey(key K) (T, bool) { return inf.cache.GetByKey(key) }

// Get returns the cached object with obj's key.
func (inf *Informer[K, T]) Get(obj T) (T, bool, error) { return inf.cache.Get(obj) }

// List returns every cached object, in no particular order.
func (inf *Informer[K, T]) List() []T { return inf.cache.List() }

// ListKeys returns every cached key, in no particular order.
func (inf *Informer[K, T]) ListKeys() []K { return inf.cache.ListKeys() }

// All yields every cached key and object, in no particular order, under
// the cache's read lock: the loop body must be short and must not wait on
// the informer.
func (inf *Informer[K, T]) All() iter.Seq2[K, T] { return inf.cache.All() }

// Len returns the number of cached objects.
func (inf *Informer[K, T]) Len() int { return inf.cache.Len() }

// ByIndex returns the cached objects whose index indexName has the value
// indexedValue.
func (inf *Informer[K, T]) ByIndex(indexName, indexedValue string) ([]T, error) {
	return inf.cache.ByIndex(indexName, indexedValue)
}

// IndexKeys returns the keys of the cached objects whose index indexName
// has the value indexedValue.
func (inf *Informer[K, T]) IndexKeys(indexName, indexedValue string) ([]K, error) {
	return inf.cache.IndexKeys(indexName, indexedValue)
}
