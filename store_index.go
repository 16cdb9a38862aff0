package mirror

import (
	"fmt"
	"iter"
	"slices"
)

// The Indexer's secondary indexes: queries by index, and AddIndexers.

// indexLocked returns the position of the named index and the index. The
// caller must hold the lock.
func (i *Indexer[K, T]) indexLocked(name string) (int, index[K], error) {
	j := i.defs.Load().lookup(name)
	if j < 0 {
		return -1, nil, fmt.Errorf("%w %q", ErrUnknownIndex, name)
	}
	return j, i.contents.indexes[j], nil
}

// Index returns the objects that share at least one of obj's values for
// the named index, each once. It fails wrapping ErrUnknownIndex if there is no
// such index, or an *IndexError if the index function fails on obj.
func (i *Indexer[K, T]) Index(indexName string, obj T) (list []T, err error) {
	defs := i.defs.Load()
	j := defs.lookup(indexName)
	if j < 0 {
		return nil, fmt.Errorf("%w %q", ErrUnknownIndex, indexName)
	}
	inIndex, locked := false, false
	defer func() {
		// One deferred call for the lock and a panic of the index
		// function (see put).
		if locked {
			i.mu.RUnlock()
		}
		if inIndex {
			if v := recover(); v != nil {
				list, err = nil, &IndexError{Index: indexName, Object: obj, Err: panicked(v)}
			}
		}
	}()
	var vals []string
	if f := defs.funcs[j]; f != nil {
		inIndex = true
		vals, err = f(obj)
		inIndex = false
		if err != nil {
			return nil, &IndexError{Index: indexName, Object: obj, Err: err}
		}
	}
	i.mu.RLock()
	locked = true
	// Indexes are only ever appended, so position j still names the index
	// the function came from.
	ix := i.contents.indexes[j]
	if len(vals) == 1 {
		// The common case needs no deduplication.
		return i.objectsLocked(ix[vals[0]]), nil
	}
	seen := make(map[K]struct{})
	for _, v := range vals {
		for key := range ix[v] {
			if _, dup := seen[key]; !dup {
				seen[key] = struct{}{}
				obj, _ := i.contents.items.get(key)
				list = append(list, obj)
			}
		}
	}
	return list, nil
}

// objectsLocked returns the objects stored under keys. The caller must
// hold the lock.
func (i *Indexer[K, T]) objectsLocked(keys map[K]struct{}) []T {
	list := make([]T, 0, len(keys))
	for key := range keys {
		obj, _ := i.contents.items.get(key)
		list = append(list, obj)
	}
	return list
}

// ByIndex returns the objects indexed under indexedValue by the named
// index. It fails wrapping ErrUnknownIndex if there is no such index.
func (i *Indexer[K, T]) ByIndex(indexName, indexedValue string) ([]T, error) {
	i.mu.RLock()
	defer i.mu.RUnlock()
	_, ix, err := i.indexLocked(indexName)
	if err != nil {
		return nil, err
	}
	return i.objectsLocked(ix[indexedValue]), nil
}

// IndexKeys is ByIndex for the objects' keys.
func (i *Indexer[K, T]) IndexKeys(indexName, indexedValue string) ([]K, error) {
	i.mu.RLock()
	defer i.mu.RUnlock()
	_, ix, err := i.indexLocked(indexName)
	if err != nil {
		return nil, err
	}
	set := ix[indexedValue]
	keys := make([]K, 0, len(set))
	for key := range set {
		keys = append(keys, key)
	}
	return keys, nil
}

// IndexLen returns how many objects are indexed under indexedValue by the
// named index, or 0 if there is no such index.
func (i *Indexer[K, T]) IndexLen(indexName, indexedValue string) int {
	i.mu.RLock()
	defer i.mu.RUnlock()
	_, ix, err := i.indexLocked(indexName)
	if err != nil {
		return 0
	}
	return len(ix[indexedValue])
}

// ByIndexAll yields the keys and objects indexed under indexedValue by
// the named index, or nothing if there is no such index. As with All, the
// lock is not held while the loop body runs; an object that gains or
// loses the value meanwhile may or may not be yielded.
func (i *Indexer[K, T]) ByIndexAll(indexName, indexedValue string) iter.Seq2[K, T] {
	return func(yield func(K, T) bool) {
		i.mu.RLock()
		locked := true
		defer func() {
			// The key function runs under the lock, and may panic.
			if locked {
				i.mu.RUnlock()
			}
		}()
		j, ix, err := i.indexLocked(indexName)
		if err != nil {
			return
		}
		gen := i.gen
		for key := range ix[indexedValue] {
			if i.gen != gen {
				// A Replace swapped the maps while the lock was released:
				// check the key against the current index.
				if _, ok := i.contents.indexes[j][indexedValue][key]; !ok {
					continue
				}
			}
			obj, _ := i.contents.items.get(key)
			i.mu.RUnlock()
			locked = false
			if !yield(key, obj) {
				return
			}
			i.mu.RLock()
			locked = true
		}
	}
}

// ListIndexFuncValues returns every value the named index holds an object
// under, or nil if there is no such index.
func (i *Indexer[K, T]) ListIndexFuncValues(indexName string) []string {
	i.mu.RLock()
	defer i.mu.RUnlock()
	_, ix, err := i.indexLocked(indexName)
	if err != nil {
		return nil
	}
	vals := make([]string, 0, len(ix))
	for v := range ix {
		vals = append(vals, v)
	}
	return vals
}

// AddIndexers adds indexes and indexes every stored object under them,
// holding the lock throughout. It fails, and changes nothing, if a name is
// in use, or with an *IndexError if an index function fails on an object.
func (i *Indexer[K, T]) AddIndexers(newIndexers Indexers[T]) (err error) {
	var at calling
	var added *indexDefs[T]
	var obj T // the object being indexed
	var key K // and its key
	i.mu.Lock()
	defer func() {
		i.mu.Unlock()
		if at.fn != noCallback {
			if v := recover(); v != nil {
				err = indexerFailure(at, added, key, obj, v)
			}
		}
	}()
	defs := i.defs.Load()
	for name := range newIndexers {
		if defs.lookup(name) >= 0 {
			return fmt.Errorf("mirror: index %q already exists", name)
		}
	}
	next := &indexDefs[T]{names: slices.Clone(defs.names), funcs: slices.Clone(defs.funcs)}
	next.add(newIndexers)
	added = &indexDefs[T]{names: next.names[len(defs.names):], funcs: next.funcs[len(defs.funcs):]}

	c := i.newContents(added, 0)
	var buf [4][]string
	for k, stored := range i.contents.items.all() {
		key, obj = k, stored
		vals, err := added.values(buf[:0], obj, &at)
		if err != nil {
			return withKey(err, key)
		}
		for j, ix := range c.indexes {
			ix.add(key, vals[j])
		}
	}
	i.contents.indexes = append(slices.Clip(i.contents.indexes), c.indexes...)
	i.defs.Store(next)
	return nil
}

// GetIndexers returns a copy of the index functions by name.
func (i *Indexer[K, T]) GetIndexers() Indexers[T] {
	defs := i.defs.Load()
	indexers := make(Indexers[T], len(defs.names))
	for j, name := range defs.names {
		indexers[name] = defs.funcs[j]
	}
	return indexers
}
