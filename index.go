package mirror

import (
	"errors"
	"fmt"
	"slices"

	"github.com/listwatch/mirror/internal/textcap"
)

// IndexFunc computes the values, any number, under which an object is
// indexed. It must depend only on obj's value. One that fails or panics on
// an object fails that object only.
type IndexFunc[T any] func(obj T) ([]string, error)

// Indexers names index functions. A nil function indexes no object.
type Indexers[T any] map[string]IndexFunc[T]

// ErrUnknownIndex is returned, wrapped with the index name, when a query
// names an index that does not exist.
var ErrUnknownIndex = errors.New("mirror: unknown index")

// IndexError reports that an index function failed for an object; the
// Indexer is left as it was. Its message names the object's key, type and
// size, never its contents.
type IndexError struct {
	// Index is the name of the index whose function failed.
	Index string
	// Key is the object's key, or nil where it is not known (Index is
	// called with an object, not a key).
	Key any
	// Object is the object it failed for; Error leaves it out.
	Object any
	// Err is the index function's error, or a *PanicError if it
	// panicked.
	Err error
}

// Error implements error.
func (e *IndexError) Error() string {
	obj := describe(e.Object)
	if e.Key != nil {
		obj = describeKeyed(e.Key, e.Object)
	}
	return fmt.Sprintf("mirror: index %q failed for %s: %s", textcap.Clip(e.Index, maxNameText), obj, causeText(e.Err))
}

// withKey sets key as the Key of err if err is an *IndexError without one,
// and returns err.
func withKey(err error, key any) error {
	if ie, ok := err.(*IndexError); ok && ie.Key == nil {
		ie.Key = key
	}
	return err
}

// Unwrap returns the index function's error.
func (e *IndexError) Unwrap() error { return e.Err }

// indexDefs lists index names and functions. It is not changed once
// published in Indexer.defs.
type indexDefs[T any] struct {
	names []string
	funcs []IndexFunc[T]
}

// lookup returns the position of the named index, or -1.
func (d *indexDefs[T]) lookup(name string) int {
	return slices.Index(d.names, name)
}

// add appends indexers to d in the order of their names, so that which
// failure is reported when several indexes fail does not vary.
func (d *indexDefs[T]) add(indexers Indexers[T]) {
	start := len(d.names)
	for name := range indexers {
		d.names = append(d.names, name)
	}
	slices.Sort(d.names[start:])
	for _, name := range d.names[start:] {
		d.funcs = append(d.funcs, indexers[name])
	}
}

// values appends obj's values for every index to dst. It records in at
// which index function runs.
func (d *indexDefs[T]) values(dst [][]string, obj T, at *calling) ([][]string, error) {
	for j, f := range d.funcs {
		var v []string
		if f != nil {
			at.fn, at.index = inIndexFunc, j
			var err error
			v, err = f(obj)
			at.fn = noCallback
			if err != nil {
				return dst, &IndexError{Index: d.names[j], Object: obj, Err: err}
			}
		}
		dst = append(dst, v)
	}
	return dst, nil
}

// indexerFailure returns the error of obj, whose key is key (nil if not
// known), on which the key function or (at.fn) an index function of defs
// panicked with v. The function that recovered must call it (see
// panicked).
func indexerFailure[T any](at calling, defs *indexDefs[T], key any, obj T, v any) error {
	if at.fn == inIndexFunc {
		return &IndexError{Index: defs.names[at.index], Key: key, Object: obj, Err: panicked(v)}
	}
	return &KeyError{Object: obj, Err: panicked(v)}
}

// priorValues is a stored object's values for one index, computed again
// when the object is replaced or deleted. If ok is false the index
// function failed, and the object's entries must be found by a scan.
type priorValues struct {
	vals []string
	ok   bool
}

// priors appends the stored object old's values for every index to dst.
func (d *indexDefs[T]) priors(dst []priorValues, old T) []priorValues {
	for _, f := range d.funcs {
		p := priorValues{ok: true}
		if f != nil {
			v, err := f(old)
			p = priorValues{vals: v, ok: err == nil}
		}
		dst = append(dst, p)
	}
	return dst
}

// index maps each value of one index to the set of keys of the objects
// that have it. A set that empties is deleted, so that churn through many
// distinct values (short-lived namespaces, say) does not grow memory.
//
// An index does not remember which values each key has: it recomputes
// them from the stored object when that object is replaced or deleted.
// Remembering would save one index function call per update (for a
// namespace index, about 80 ns and an allocation: BenchmarkIndexer_IndexFunc)
// but doubles what the index costs per object (BenchmarkIndexer_Memory, one
// namespace index on 100k keys: 98 B/key recomputing, 198 B/key
// remembering), and the informer's cache must stay small.
type index[K comparable] map[string]map[K]struct{}

// add indexes key under vals.
func (ix index[K]) add(key K, vals []string) {
	for _, v := range vals {
		ix.addValue(key, v)
	}
}

// addValue adds key to the set of v.
func (ix index[K]) addValue(key K, v string) {
	set := ix[v]
	if set == nil {
		set = make(map[K]struct{}, 1)
		ix[v] = set
	}
	set[key] = struct{}{}
}

// removeValue removes key from the set of v and reports whether it was
// there.
func (ix index[K]) removeValue(key K, v string) bool {
	set := ix[v]
	if _, ok := set[key]; !ok {
		return false
	}
	delete(set, key)
	if len(set) == 0 {
		delete(ix, v)
	}
	return true
}

// remove removes key from the values in prior, or from wherever it is if
// prior is unknown or wrong.
func (ix index[K]) remove(key K, prior priorValues) {
	if prior.ok {
		found := true
		for n, v := range prior.vals {
			// A value listed twice is not there the second time.
			if !ix.removeValue(key, v) && !slices.Contains(prior.vals[:n], v) {
				found = false
			}
		}
		if found {
			return
		}
	}
	ix.purge(key)
}

// purge removes key from every value. It is the way out when an object's
// entries cannot be recomputed: the index function failed on the stored
// object, or gave values the key was not under because the object was
// changed in place.
func (ix index[K]) purge(key K) {
	for v, set := range ix {
		if _, ok := set[key]; ok {
			delete(set, key)
			if len(set) == 0 {
				delete(ix, v)
			}
		}
	}
}

// update moves key from the values in prior to vals.
func (ix index[K]) update(key K, prior priorValues, vals []string) {
	if prior.ok && slices.Equal(prior.vals, vals) {
		// The common case (an object changed but its namespace did not)
		// touches nothing and allocates nothing.
		return
	}
	if !prior.ok || len(prior.vals)+len(vals) > 16 {
		// Past a few values, quadratic diffing stops paying.
		ix.remove(key, prior)
		ix.add(key, vals)
		return
	}
	// Leave in place the entries both lists share, so that a set holding
	// only this key is not deleted and made again.
	for n, v := range prior.vals {
		if slices.Contains(vals, v) {
			continue
		}
		if !ix.removeValue(key, v) && !slices.Contains(prior.vals[:n], v) {
			ix.purge(key)
			ix.add(key, vals)
			return
		}
	}
	for _, v := range vals {
		if !slices.Contains(prior.vals, v) {
			ix.addValue(key, v)
		}
	}
}
