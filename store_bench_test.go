package mirror

import (
	"fmt"
	"runtime"
	"testing"
)

func BenchmarkRing_PushPopSteadyState(b *testing.B) {
	for _, depth := range []int{0, 100, 10_000} {
		b.Run(fmt.Sprint("depth=", depth), func(b *testing.B) {
			var r Ring[*int]
			v := new(int)
			for range depth {
				r.Push(v)
			}
			b.ReportAllocs()
			for b.Loop() {
				r.Push(v)
				r.Pop()
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "values/s")
		})
	}
}

// benchKey is a composite key: comparable keys need no string building.
type benchKey struct{ ns, name string }

type benchObj struct {
	benchKey
	v int
}

func benchKeyOf(o *benchObj) (benchKey, error) { return o.benchKey, nil }

func benchByNamespace(o *benchObj) ([]string, error) { return []string{o.ns}, nil }

const benchKeys = 100_000

// newBenchIndexer returns an Indexer with one namespace index holding
// benchKeys objects spread over 100 namespaces, and the objects.
func newBenchIndexer(b *testing.B) (*Indexer[benchKey, *benchObj], []*benchObj) {
	b.Helper()
	i := NewIndexer(benchKeyOf, Indexers[*benchObj]{"ns": benchByNamespace})
	objs := make([]*benchObj, benchKeys)
	for n := range objs {
		objs[n] = &benchObj{benchKey: benchKey{ns: fmt.Sprint("ns-", n%100), name: fmt.Sprint("obj-", n)}}
	}
	if err := i.Replace(objs, ""); err != nil {
		b.Fatal(err)
	}
	return i, objs
}

func BenchmarkIndexer_Set(b *testing.B) {
	b.Run("same namespace", func(b *testing.B) {
		i, objs := newBenchIndexer(b)
		b.ReportAllocs()
		n := 0
		for b.Loop() {
			o := objs[n%benchKeys]
			if _, _, err := i.Set(o.benchKey, o); err != nil {
				b.Fatal(err)
			}
			n++
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "sets/s")
	})
	b.Run("namespace moves", func(b *testing.B) {
		i, objs := newBenchIndexer(b)
		// Two versions of every object, in different namespaces, under
		// the same key.
		moved := make([]*benchObj, len(objs))
		for n, o := range objs {
			moved[n] = &benchObj{benchKey: benchKey{ns: "elsewhere", name: o.name}}
		}
		b.ReportAllocs()
		n := 0
		for b.Loop() {
			o := objs[n%benchKeys]
			if (n/benchKeys)%2 == 0 {
				o = moved[n%benchKeys]
			}
			if _, _, err := i.Set(o.benchKey, o); err != nil {
				b.Fatal(err)
			}
			n++
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "sets/s")
	})
	b.Run("add and delete", func(b *testing.B) {
		i, objs := newBenchIndexer(b)
		b.ReportAllocs()
		n := 0
		for b.Loop() {
			o := objs[n%benchKeys]
			i.DeleteKey(o.benchKey)
			if _, _, err := i.Set(o.benchKey, o); err != nil {
				b.Fatal(err)
			}
			n++
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "delete+set/s")
	})
}

func BenchmarkIndexer_GetByKey(b *testing.B) {
	i, objs := newBenchIndexer(b)
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		o := objs[n%benchKeys]
		if _, ok := i.GetByKey(o.benchKey); !ok {
			b.Fatal("missing")
		}
		n++
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "gets/s")
}

// BenchmarkIndexer_IndexFunc measures one call of the index function used
// above: the cost a Set would pay again if the Indexer recomputed the old
// object's values instead of remembering them.
func BenchmarkIndexer_IndexFunc(b *testing.B) {
	o := &benchObj{benchKey: benchKey{ns: "ns-1", name: "obj-1"}}
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
	objs := make([]*benchObj, benchKeys)
	for n := range objs {
		objs[n] = &benchObj{benchKey: benchKey{ns: fmt.Sprint("ns-", n%100), name: fmt.Sprint("obj-", n)}}
	}
	for _, indexers := range []Indexers[*benchObj]{nil, {"ns": benchByNamespace}} {
		b.Run(fmt.Sprint("indexes=", len(indexers)), func(b *testing.B) {
			var perKey float64
			for b.Loop() {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				i := NewIndexer(benchKeyOf, indexers)
				for _, o := range objs {
					if _, _, err := i.Set(o.benchKey, o); err != nil {
						b.Fatal(err)
					}
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				perKey = float64(after.HeapAlloc-before.HeapAlloc) / benchKeys
				runtime.KeepAlive(i)
			}
			b.ReportMetric(perKey, "B/key")
		})
	}
}
