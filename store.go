package mirror

import (
	"errors"
	"hash/maphash"
	"iter"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
)

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
	// All yields every key and object, in no particular order; the loop
	// body must not write to the store.
	All() iter.Seq2[K, T]
	// Len returns the number of stored objects.
	Len() int
}

// KnownObjects is what a DeltaFIFO consults to learn which objects exist
// downstream of it (see DeltaFIFOOptions.KnownObjects). *Indexer
// implements it.
type KnownObjects[K comparable, T any] interface {
	// GetByKey returns the object known under key.
	GetByKey(key K) (item T, exists bool)
	// All yields every known key and object. It may be called with the
	// DeltaFIFO's lock held, so it must not call the DeltaFIFO.
	All() iter.Seq2[K, T]
}

// Indexer is a store of objects by key with named secondary indexes; it
// is the informer's cache. Its methods are safe for concurrent use; create
// it with NewIndexer.
//
// Objects are stored as given, not copied, and must not be modified once
// stored or returned; the key and index functions must give a stored
// object the same results every time, as the Indexer calls them again on
// stored objects rather than keeping their keys. A key or index function
// that fails or panics on an object a method is given fails that method
// (see PanicError); one that panics on a stored object panics the method.
// Either way the Indexer is left as it was.
type Indexer[K comparable, T any] struct {
	keyFunc KeyFunc[K, T]
	hash    hasher[K]

	// defs lists the index functions in a fixed order. It is published
	// atomically so that writers can compute index values before taking mu;
	// it changes only under mu (AddIndexers), and a writer that finds it
	// changed once it holds mu computes again.
	defs atomic.Pointer[indexDefs[T]]

	mu       sync.RWMutex
	contents contents[K, T] // guarded by mu

	// gen counts Replace calls (guarded by mu), so that an iteration that
	// dropped the lock can tell it is walking maps no longer in use.
	gen uint64
}

var (
	_ Store[string, int]        = (*Indexer[string, int])(nil)
	_ KnownObjects[string, int] = (*Indexer[string, int])(nil)
)

// contents is the data an Indexer guards: the objects and, parallel to the
// Indexer's defs, one index each.
type contents[K comparable, T any] struct {
	items   table[K, T]
	indexes []index[K]
}

// newContents returns empty contents for i with the indexes of defs and
// room for size objects.
func (i *Indexer[K, T]) newContents(defs *indexDefs[T], size int) contents[K, T] {
	c := contents[K, T]{items: newTable(i.keyFunc, i.hash, size), indexes: make([]index[K], len(defs.funcs))}
	for j := range c.indexes {
		c.indexes[j] = index[K]{}
	}
	return c
}

// set stores obj under key; owned says whether key is obj's key. vals
// holds obj's values, one entry per index of defs, the definitions c was
// built for. The caller must hold the lock of the Indexer that owns c, if
// any.
func (c *contents[K, T]) set(defs *indexDefs[T], key K, obj T, owned bool, vals [][]string) (old T, existed bool) {
	// Every call to user code (key functions in find, index functions in
	// priors) comes before the first change, so that a panic leaves c as
	// it was.
	old, l, existed := c.items.find(key)
	if !existed {
		c.items.put(key, obj, l, owned)
		for j, ix := range c.indexes {
			ix.add(key, vals[j])
		}
		return old, false
	}
	var buf [4]priorValues
	priors := defs.priors(buf[:0], old)
	c.items.put(key, obj, l, owned)
	for j, ix := range c.indexes {
		ix.update(key, priors[j], vals[j])
	}
	return old, true
}

// delete removes key and returns its object, if it has one. The caller
// must hold the lock of the Indexer that owns c.
func (c *contents[K, T]) delete(defs *indexDefs[T], key K) (old T, existed bool) {
	old, l, existed := c.items.find(key)
	if !existed {
		return old, false
	}
	var buf [4]priorValues
	priors := defs.priors(buf[:0], old)
	c.items.delete(key, l)
	for j, ix := range c.indexes {
		ix.remove(key, priors[j])
	}
	return old, true
}

// NewIndexer returns an empty Indexer that keys objects with keyFunc and
// maintains the given indexes. It panics if keyFunc is nil.
func NewIndexer[K comparable, T any](keyFunc KeyFunc[K, T], indexers Indexers[T]) *Indexer[K, T] {
	if keyFunc == nil {
		panic("mirror: NewIndexer called with a nil key function")
	}
	return newIndexer(keyFunc, indexers, nil)
}

// newIndexer is NewIndexer with a hash function for keys; nil means
// maphash. Tests use it to make keys collide.
func newIndexer[K comparable, T any](keyFunc KeyFunc[K, T], indexers Indexers[T], hash func(K) uint64) *Indexer[K, T] {
	i := &Indexer[K, T]{keyFunc: keyFunc, hash: hasher[K]{seed: maphash.MakeSeed(), fn: hash}}
	defs := &indexDefs[T]{}
	defs.add(indexers)
	i.defs.Store(defs)
	i.contents = i.newContents(defs, 0)
	return i
}

// Add stores obj under its key, replacing any object stored there. If the
// key or an index value cannot be computed it returns a *KeyError or an
// *IndexError and changes nothing.
func (i *Indexer[K, T]) Add(obj T) error {
	var noKey K
	_, _, err := i.put(noKey, false, obj)
	return err
}

// Update is Add: the Indexer does not distinguish them.
func (i *Indexer[K, T]) Update(obj T) error { return i.Add(obj) }

// Delete removes the object with obj's key, if any. It fails, with a
// *KeyError, only if the key cannot be computed.
func (i *Indexer[K, T]) Delete(obj T) error {
	// The key is computed, and its function's panic recovered, before
	// the lock is taken. Under the lock only index functions run, on the
	// stored object, which they indexed before (see PanicError).
	key, err := keyOfGuarded(i.keyFunc, obj)
	if err != nil {
		return err
	}
	i.mu.Lock()
	i.contents.delete(i.defs.Load(), key)
	i.mu.Unlock()
	return nil
}

// Set stores obj under key, replacing and returning any object stored
// there. If an index function fails, or the key function panics, on obj,
// it returns an *IndexError or a *KeyError and changes nothing. obj may be
// stored under a key other than its own.
func (i *Indexer[K, T]) Set(key K, obj T) (old T, existed bool, err error) {
	return i.put(key, true, obj)
}

// put stores obj under key if keyed is set, or else under obj's own key:
// it is Set, and Add and Update.
func (i *Indexer[K, T]) put(key K, keyed bool, obj T) (old T, existed bool, err error) {
	var at calling
	var defs *indexDefs[T]
	locked := false
	defer func() {
		// One deferred call for the lock and a panic of the key or an
		// index function on obj: a second would cost every call. A panic
		// under the lock, in a function called on a stored object, is
		// not recovered (see PanicError); the Indexer is as it was.
		if locked {
			i.mu.Unlock()
		}
		if at.fn != noCallback {
			if v := recover(); v != nil {
				err = indexerFailure(at, defs, key, obj, v)
			}
		}
	}()
	at.fn = inKeyFunc
	k, kerr := i.keyFunc(obj)
	at.fn = noCallback
	owned := kerr == nil && k == key
	if !keyed {
		if kerr != nil {
			return old, false, &KeyError{Object: obj, Err: kerr}
		}
		key, owned = k, true
	}
	// Most Indexers have a few indexes; computing into an array on the
	// stack saves an allocation per call.
	var buf [4][]string
	for {
		defs = i.defs.Load()
		vals, verr := defs.values(buf[:0], obj, &at)
		if verr != nil {
			return old, false, withKey(verr, key)
		}
		i.mu.Lock()
		locked = true
		if i.defs.Load() == defs {
			old, existed = i.contents.set(defs, key, obj, owned, vals)
			return old, existed, nil
		}
		// AddIndexers ran meanwhile: compute again with its indexes.
		i.mu.Unlock()
		locked = false
	}
}

// reserve makes room for n objects in all, so that storing up to that many
// does not grow the Indexer step by step.
func (i *Indexer[K, T]) reserve(n int) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.contents.items.reserve(n)
}

// unlisted returns the keys of the stored objects whose keys are not among
// keys, which must not call i's methods. For a writer that keeps i from
// changing meanwhile, as the informer's apply loop does.
func (i *Indexer[K, T]) unlisted(keys iter.Seq[K]) []K {
	i.mu.RLock()
	defer i.mu.RUnlock()
	return i.contents.items.unlisted(keys)
}

// markListed finds key, marks it listed in m (see table.mark) and returns
// the object stored under it, if any. For the informer's apply loop, the
// only writer: see unmarked.
func (i *Indexer[K, T]) markListed(m *listedMarks[K], key K) (T, bool) {
	i.mu.RLock()
	defer i.mu.RUnlock()
	if !m.begun {
		defer func() { m.gen = i.gen }()
	}
	return i.contents.items.mark(m, key)
}

// unmarked returns the keys of the stored objects that m does not mark,
// and true; or false if i changed since the first mark, and m no longer
// says which objects are which.
func (i *Indexer[K, T]) unmarked(m *listedMarks[K]) ([]K, bool) {
	i.mu.RLock()
	defer i.mu.RUnlock()
	if !i.contents.items.valid(m) || (m.begun && m.gen != i.gen) {
		return nil, false
	}
	return i.contents.items.unmarked(m), true
}

// DeleteKey removes the object stored under key and returns it, or reports
// false if there was none.
func (i *Indexer[K, T]) DeleteKey(key K) (old T, existed bool) {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.contents.delete(i.defs.Load(), key)
}

// Replace makes list the whole content, atomically for readers;
// resourceVersion is not used. Of several objects with one key the last
// wins. An object whose key or index values cannot be computed is skipped,
// and the failures are returned joined.
func (i *Indexer[K, T]) Replace(list []T, resourceVersion string) error {
	for {
		defs := i.defs.Load()
		c := i.newContents(defs, len(list))
		var errs []error
		for n := 0; n < len(list); {
			n = i.fill(&c, defs, list, n, &errs)
		}
		i.mu.Lock()
		if i.defs.Load() == defs {
			i.contents = c
			i.gen++
			i.mu.Unlock()
			return errors.Join(errs...)
		}
		i.mu.Unlock()
	}
}

// fill stores list[n:] in c, which was built for defs, leaving out the
// objects whose key or index values cannot be computed and appending
// their errors to errs. It returns len(list), or, if the key or an index
// function panics on an object, the position after it, and the caller
// goes on from there: one deferred call per list, not per object.
func (i *Indexer[K, T]) fill(c *contents[K, T], defs *indexDefs[T], list []T, n int, errs *[]error) (next int) {
	var at calling
	var key K // the key of list[next], once known
	defer func() {
		if at.fn != noCallback {
			if v := recover(); v != nil {
				*errs = append(*errs, indexerFailure(at, defs, key, list[next], v))
				next++
			}
		}
	}()
	var buf [4][]string
	for next = n; next < len(list); next++ {
		obj := list[next]
		at.fn = inKeyFunc
		var err error
		key, err = keyOf(i.keyFunc, obj)
		at.fn = noCallback
		if err != nil {
			*errs = append(*errs, err)
			continue
		}
		vals, err := defs.values(buf[:0], obj, &at)
		if err != nil {
			*errs = append(*errs, withKey(err, key))
			continue
		}
		c.set(defs, key, obj, true, vals)
	}
	return next
}

// Resync does nothing and returns nil.
func (i *Indexer[K, T]) Resync() error { return nil }

// Get returns the object stored under obj's key. It fails, with a
// *KeyError, only if the key cannot be computed.
func (i *Indexer[K, T]) Get(obj T) (item T, exists bool, err error) {
	key, err := keyOfGuarded(i.keyFunc, obj)
	if err != nil {
		return item, false, err
	}
	item, exists = i.GetByKey(key)
	return item, exists, nil
}

// GetByKey returns the object stored under key.
func (i *Indexer[K, T]) GetByKey(key K) (item T, exists bool) {
	i.mu.RLock()
	defer i.mu.RUnlock() // the key function runs under the lock
	return i.contents.items.get(key)
}

// List returns every stored object, in no particular order.
func (i *Indexer[K, T]) List() []T {
	i.mu.RLock()
	defer i.mu.RUnlock()
	return slices.AppendSeq(make([]T, 0, i.contents.items.len()), i.contents.items.values())
}

// ListKeys returns every key, in no particular order.
func (i *Indexer[K, T]) ListKeys() []K {
	i.mu.RLock()
	defer i.mu.RUnlock()
	keys := make([]K, 0, i.contents.items.len())
	for key := range i.contents.items.all() {
		keys = append(keys, key)
	}
	return keys
}

// Len returns the number of stored objects.
func (i *Indexer[K, T]) Len() int {
	i.mu.RLock()
	defer i.mu.RUnlock()
	return i.contents.items.len()
}

// All yields every key with its object, in no particular order. The lock
// is not held while the loop body runs, so the body may call any method.
// A key stored or removed meanwhile may or may not be yielded; every other
// key is yielded once.
func (i *Indexer[K, T]) All() iter.Seq2[K, T] {
	return func(yield func(K, T) bool) {
		i.mu.RLock()
		t := &i.contents.items
		w := walk[K, T]{
			slots: t.slots, gen: i.gen, moves: t.moves,
			// Rare (see table): copying its keys is simpler than walking
			// a map without holding the lock.
			foreign: slices.Collect(maps.Keys(t.foreign)),
		}
		i.mu.RUnlock()
		for {
			key, obj, ok := i.advance(&w)
			if !ok || !yield(key, obj) {
				return
			}
		}
	}
}
