package mirror

import (
	"context"
	"fmt"
	"iter"
	"runtime"
	"testing"
)

const benchKeys = 100_000

// nsName is a struct key, as a Kubernetes namespace/name, that costs no
// string building.
type nsName struct{ ns, name string }

// benchObj is obj with a namespace, so both key kinds can be computed
// without allocating.
type benchObj struct {
	ns, name string
	rv       int
}

func benchStringKey(o benchObj) (string, error) { return o.name, nil }
func benchStructKey(o benchObj) (nsName, error) { return nsName{o.ns, o.name}, nil }

func benchObjects(n int) []benchObj {
	objs := make([]benchObj, n)
	for i := range objs {
		objs[i] = benchObj{ns: "default", name: fmt.Sprintf("obj-%06d", i), rv: i}
	}
	return objs
}

// benchKnown is a plain map as KnownObjects (knownMap sorts, which would
// dominate the measurement).
type benchKnown[K comparable] map[K]benchObj

func (m benchKnown[K]) GetByKey(k K) (benchObj, bool) { o, ok := m[k]; return o, ok }
func (m benchKnown[K]) All() iter.Seq2[K, benchObj] {
	return func(yield func(K, benchObj) bool) {
		for k, o := range m {
			if !yield(k, o) {
				return
			}
		}
	}
}

// reportPer reports the time and allocations per unit (a key, an update)
// of a benchmark whose every iteration handles perOp units. mallocs0 is
// the malloc count read before the loop: allocs/op alone rounds a
// fraction of an allocation per unit down to 0 or hides it in a large op.
func reportPer(b *testing.B, unit string, perOp int, mallocs0 uint64) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	units := float64(b.N) * float64(perOp)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/units, "ns/"+unit)
	b.ReportMetric(units/b.Elapsed().Seconds(), unit+"s/s")
	b.ReportMetric(float64(ms.Mallocs-mallocs0)/units, "allocs/"+unit)
}

func mallocs() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.Mallocs
}

// benchFillDrain times fill, which must queue keys keys, followed by
// popping them all; it reports per-key figures.
func benchFillDrain(b *testing.B, keys int, fill func() error, pop func() error) {
	b.ReportAllocs()
	m0 := mallocs()
	for b.Loop() {
		if err := fill(); err != nil {
			b.Fatal(err)
		}
		for range keys {
			if err := pop(); err != nil {
				b.Fatal(err)
			}
		}
	}
	reportPer(b, "key", keys, m0)
}

// addAll returns a fill function for benchFillDrain that adds objs one by
// one.
func addAll(add func(benchObj) error, objs []benchObj) func() error {
	return func() error {
		for _, o := range objs {
			if err := add(o); err != nil {
				return err
			}
		}
		return nil
	}
}

func BenchmarkDeltaFIFO_AddPop100k(b *testing.B) {
	b.Run("key=string", func(b *testing.B) { benchDeltaFIFOAddPop(b, benchStringKey) })
	b.Run("key=struct", func(b *testing.B) { benchDeltaFIFOAddPop(b, benchStructKey) })
}

func benchDeltaFIFOAddPop[K comparable](b *testing.B, keyFunc KeyFunc[K, benchObj]) {
	objs := benchObjects(benchKeys)
	f := NewDeltaFIFO(DeltaFIFOOptions[K, benchObj]{KeyFunc: keyFunc})
	process := func(K, Deltas[benchObj], bool) error { return nil }
	pop := func() error { return f.Pop(context.Background(), process) }
	benchFillDrain(b, len(objs), addAll(f.Add, objs), pop)
}

// Updates to 100 hot keys, with a pop for every 4 updates: each key
// gathers about 4 deltas between pops, as a busy object does.
func BenchmarkDeltaFIFO_UpdateChurnHotKeys(b *testing.B) {
	const hot, updatesPerPop = 100, 4
	objs := benchObjects(hot)
	f := NewDeltaFIFO(DeltaFIFOOptions[string, benchObj]{KeyFunc: benchStringKey})
	ctx := context.Background()
	process := func(string, Deltas[benchObj], bool) error { return nil }
	b.ReportAllocs()
	m0 := mallocs()
	i := 0
	for b.Loop() {
		o := objs[i%hot]
		o.rv = i
		if err := f.Update(o); err != nil {
			b.Fatal(err)
		}
		if i%updatesPerPop == 0 {
			if err := f.Pop(ctx, process); err != nil {
				b.Fatal(err)
			}
		}
		i++
	}
	reportPer(b, "update", 1, m0)
}

// A relist of 100k objects into a queue whose consumer knows all of them,
// then the drain that delivers it.
func BenchmarkDeltaFIFO_ReplaceDrain100k(b *testing.B) {
	b.Run("key=string", func(b *testing.B) { benchReplaceDrain(b, benchStringKey) })
	b.Run("key=struct", func(b *testing.B) { benchReplaceDrain(b, benchStructKey) })
}

func benchReplaceDrain[K comparable](b *testing.B, keyFunc KeyFunc[K, benchObj]) {
	objs := benchObjects(benchKeys)
	known := make(benchKnown[K], len(objs))
	for _, o := range objs {
		k, _ := keyFunc(o)
		known[k] = o
	}
	f := NewDeltaFIFO(DeltaFIFOOptions[K, benchObj]{KeyFunc: keyFunc, KnownObjects: known, EmitDeltaTypeReplaced: true})
	process := func(K, Deltas[benchObj], bool) error { return nil }
	pop := func() error { return f.Pop(context.Background(), process) }
	benchFillDrain(b, len(objs), func() error { return f.Replace(objs, "1") }, pop)
}

func BenchmarkFIFO_AddPop100k(b *testing.B) {
	b.Run("key=string", func(b *testing.B) { benchFIFOAddPop(b, benchStringKey) })
	b.Run("key=struct", func(b *testing.B) { benchFIFOAddPop(b, benchStructKey) })
}

func benchFIFOAddPop[K comparable](b *testing.B, keyFunc KeyFunc[K, benchObj]) {
	objs := benchObjects(benchKeys)
	f := NewFIFO(keyFunc)
	process := func(K, benchObj, bool) error { return nil }
	pop := func() error { return f.Pop(context.Background(), process) }
	benchFillDrain(b, len(objs), addAll(f.Add, objs), pop)
}
