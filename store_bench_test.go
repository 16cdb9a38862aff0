package mirror

import (
	"errors"
	"fmt"
	"runtime"
	"testing"
)

// benchKey is a composite key: comparable keys need no string building.
type benchKey struct{ ns, name string }

type storeBenchObj struct {
	benchKey
	_ [4]int64 // the rest of a small object: an etcd value, say
}

func benchKeyOf(o *storeBenchObj) (benchKey, error) { return o.benchKey, nil }

func benchByNamespace(o *storeBenchObj) ([]string, error) { return []string{o.ns}, nil }

const storeBenchKeys = 100_000

// newBenchIndexer returns an Indexer with one namespace index holding
// storeBenchKeys objects spread over 100 namespaces, and the objects.
func newBenchIndexer(b *testing.B) (*Indexer[benchKey, *storeBenchObj], []*storeBenchObj) {
	b.Helper()
	i := NewIndexer(benchKeyOf, Indexers[*storeBenchObj]{"ns": benchByNamespace})
	objs := make([]*storeBenchObj, storeBenchKeys)
	for n := range objs {
		objs[n] = &storeBenchObj{benchKey: benchKey{ns: fmt.Sprint("ns-", n%100), name: fmt.Sprint("obj-", n)}}
	}
	if err := i.Replace(objs, ""); err != nil {
		b.Fatal(err)
	}
	return i, objs
}

// benchIndexer runs op for successive keys of a full bench Indexer and
// reports its rate in unit. op gets the key and the two versions of the
// object stored under it: the stored one and one in another namespace.
func benchIndexer(b *testing.B, unit string, op func(i *Indexer[benchKey, *storeBenchObj], key benchKey, o, moved *storeBenchObj) error) {
	i, objs := newBenchIndexer(b)
	moved := make([]*storeBenchObj, len(objs))
	for n, o := range objs {
		// Into the next namespace, so that no value's set empties.
		moved[n] = &storeBenchObj{benchKey: benchKey{ns: objs[(n+1)%len(objs)].ns, name: o.name}}
	}
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		k := n % storeBenchKeys
		if err := op(i, objs[k].benchKey, objs[k], moved[k]); err != nil {
			b.Fatal(err)
		}
		n++
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), unit)
}

func BenchmarkIndexer_Set(b *testing.B) {
	b.Run("same namespace", func(b *testing.B) {
		benchIndexer(b, "sets/s", func(i *Indexer[benchKey, *storeBenchObj], key benchKey, o, _ *storeBenchObj) error {
			_, _, err := i.Set(key, o)
			return err
		})
	})
	b.Run("namespace moves", func(b *testing.B) {
		benchIndexer(b, "move+back/s", func(i *Indexer[benchKey, *storeBenchObj], key benchKey, o, moved *storeBenchObj) error {
			// Both Sets change the object's namespace.
			if _, _, err := i.Set(key, moved); err != nil {
				return err
			}
			_, _, err := i.Set(key, o)
			return err
		})
	})
	b.Run("delete and add", func(b *testing.B) {
		benchIndexer(b, "delete+set/s", func(i *Indexer[benchKey, *storeBenchObj], key benchKey, o, _ *storeBenchObj) error {
			i.DeleteKey(key)
			_, _, err := i.Set(key, o)
			return err
		})
	})
}

func BenchmarkIndexer_GetByKey(b *testing.B) {
	benchIndexer(b, "gets/s", func(i *Indexer[benchKey, *storeBenchObj], key benchKey, _, _ *storeBenchObj) error {
		if _, ok := i.GetByKey(key); !ok {
			return errors.New("missing")
		}
		return nil
	})
}

// BenchmarkIndexer_IndexFunc measures one call of the index function used
// above: what Set pays to recompute the replaced object's values rather
// than remember them (see the index type).
func BenchmarkIndexer_IndexFunc(b *testing.B) {
	o := &storeBenchObj{benchKey: benchKey{ns: "ns-1", name: "obj-1"}}
	b.ReportAllocs()
	var sink []string
	for b.Loop() {
		sink, _ = benchByNamespace(o)
	}
	_ = sink
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
}

// BenchmarkIndexer_Memory reports the heap an Indexer with one namespace
// index holds per object, objects excluded.
func BenchmarkIndexer_Memory(b *testing.B) {
	objs := make([]*storeBenchObj, storeBenchKeys)
	for n := range objs {
		objs[n] = &storeBenchObj{benchKey: benchKey{ns: fmt.Sprint("ns-", n%100), name: fmt.Sprint("obj-", n)}}
	}
	for _, indexers := range []Indexers[*storeBenchObj]{nil, {"ns": benchByNamespace}} {
		b.Run(fmt.Sprint("indexes=", len(indexers)), func(b *testing.B) {
			var perKey float64
			for b.Loop() {
				perKey = heapPerKey(func() any {
					i := NewIndexer(benchKeyOf, indexers)
					for _, o := range objs {
						if _, _, err := i.Set(o.benchKey, o); err != nil {
							b.Fatal(err)
						}
					}
					return i
				})
			}
			b.ReportMetric(perKey, "B/key")
		})
	}
}

// BenchmarkIndexer_MemoryByValue reports the heap an Indexer without
// indexes holds per object when it stores objects by value, objects
// included: a small one, held in the table's slots, and a large one,
// which the table boxes.
func BenchmarkIndexer_MemoryByValue(b *testing.B) {
	type large struct {
		storeBenchObj
		_ [24]int64
	}
	b.Run("object=small", func(b *testing.B) {
		benchMemoryByValue(b,
			func(o *storeBenchObj) storeBenchObj { return *o },
			func(o storeBenchObj) (benchKey, error) { return o.benchKey, nil })
	})
	b.Run("object=large", func(b *testing.B) {
		benchMemoryByValue(b,
			func(o *storeBenchObj) large { return large{storeBenchObj: *o} },
			func(o large) (benchKey, error) { return o.benchKey, nil })
	})
}

func benchMemoryByValue[T any](b *testing.B, wrap func(*storeBenchObj) T, keyOf KeyFunc[benchKey, T]) {
	objs := make([]T, storeBenchKeys)
	for n := range objs {
		objs[n] = wrap(&storeBenchObj{benchKey: benchKey{ns: fmt.Sprint("ns-", n%100), name: fmt.Sprint("obj-", n)}})
	}
	var perKey float64
	for b.Loop() {
		perKey = heapPerKey(func() any {
			i := NewIndexer(keyOf, nil)
			for _, o := range objs {
				if err := i.Add(o); err != nil {
					b.Fatal(err)
				}
			}
			return i
		})
	}
	b.ReportMetric(perKey, "B/key")
}

// heapPerKey returns the heap that what build returns holds, per key of
// a full bench Indexer.
func heapPerKey(build func() any) float64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	kept := build()
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(kept)
	return float64(after.HeapAlloc-before.HeapAlloc) / storeBenchKeys
}

func BenchmarkIndexer_All(b *testing.B) {
	i, _ := newBenchIndexer(b)
	b.ReportAllocs()
	for b.Loop() {
		for range i.All() {
		}
	}
	b.ReportMetric(float64(b.N)*storeBenchKeys/b.Elapsed().Seconds(), "objects/s")
}

// BenchmarkIndexer_BuiltKey measures an Indexer whose key function builds
// a string ("namespace/name", as client-go's does), which the Indexer
// calls on each object it stores, on the stored object a lookup finds, and
// on every object an iteration yields.
func BenchmarkIndexer_BuiltKey(b *testing.B) {
	keyOf := func(o *storeBenchObj) (string, error) { return o.ns + "/" + o.name, nil }
	i := NewIndexer(keyOf, nil)
	objs := make([]*storeBenchObj, storeBenchKeys)
	keys := make([]string, storeBenchKeys)
	for n := range objs {
		objs[n] = &storeBenchObj{benchKey: benchKey{ns: fmt.Sprint("ns-", n%100), name: fmt.Sprint("obj-", n)}}
		keys[n], _ = keyOf(objs[n])
	}
	if err := i.Replace(objs, ""); err != nil {
		b.Fatal(err)
	}
	b.Run("op=Set", func(b *testing.B) {
		b.ReportAllocs()
		n := 0
		for b.Loop() {
			k := n % storeBenchKeys
			if _, _, err := i.Set(keys[k], objs[k]); err != nil {
				b.Fatal(err)
			}
			n++
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "sets/s")
	})
	b.Run("op=GetByKey", func(b *testing.B) {
		b.ReportAllocs()
		n := 0
		for b.Loop() {
			if _, ok := i.GetByKey(keys[n%storeBenchKeys]); !ok {
				b.Fatal("missing")
			}
			n++
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "gets/s")
	})
	b.Run("op=All", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for range i.All() {
			}
		}
		b.ReportMetric(float64(b.N)*storeBenchKeys/b.Elapsed().Seconds(), "objects/s")
	})
}
