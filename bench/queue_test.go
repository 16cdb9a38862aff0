package bench

import (
	"context"
	"testing"

	"github.com/listwatch/mirror"
	"k8s.io/client-go/tools/cache"
)

// queueKeys is the number of keys the queue benchmarks move.
const queueKeys = 100_000

// BenchmarkDeltaFIFO_Churn100k adds 100k objects to an empty queue, updates
// each once (so every key gathers two deltas), then pops until the queue
// is empty. One op is that whole round: 200k deltas in and out; the
// metrics events/s and allocs/event are per delta.
//
// impl=mirror is mirror.DeltaFIFO keyed by Key; impl=clientgo is client-go's
// DeltaFIFO with its standard key function, MetaNamespaceKeyFunc (a
// "namespace/name" string); impl=clientgo-realfifo is client-go's RealFIFO
// (its informers' queue), with KnownObjects, which keeps every delta as
// its own item and so pops 200k times.
func BenchmarkDeltaFIFO_Churn100k(b *testing.B) {
	ns := names(queueKeys)
	added, updated := objects(ns, 1), objects(ns, 2)
	const events = 2 * queueKeys
	ctx := context.Background()

	mirrorRun := func(b *testing.B) {
		f := mirror.NewDeltaFIFO(mirror.DeltaFIFOOptions[Key, *Obj]{KeyFunc: KeyOf})
		process := func(Key, mirror.Deltas[*Obj], bool) error { return nil }
		b.ReportAllocs()
		m0 := mallocs()
		var cpu cpuClock
		cpu.start()
		for b.Loop() {
			for _, o := range added {
				if err := f.Add(o); err != nil {
					b.Fatal(err)
				}
			}
			for _, o := range updated {
				if err := f.Update(o); err != nil {
					b.Fatal(err)
				}
			}
			for range queueKeys {
				if err := f.Pop(ctx, process); err != nil {
					b.Fatal(err)
				}
			}
		}
		cpu.stop()
		cpu.report(b, "event", events)
		reportPer(b, "event", events, m0)
	}

	// clientgoRun drives any client-go queue the same way.
	// pops is how many items the queue holds after a round.
	clientgoRun := func(pops int, newQueue func() cache.Queue) func(b *testing.B) {
		return func(b *testing.B) {
			q := newQueue()
			process := func(any, bool) error { return nil }
			b.ReportAllocs()
			m0 := mallocs()
			var cpu cpuClock
			cpu.start()
			for b.Loop() {
				for _, o := range added {
					if err := q.Add(o); err != nil {
						b.Fatal(err)
					}
				}
				for _, o := range updated {
					if err := q.Update(o); err != nil {
						b.Fatal(err)
					}
				}
				for range pops {
					if _, err := q.Pop(process); err != nil {
						b.Fatal(err)
					}
				}
			}
			cpu.stop()
			cpu.report(b, "event", events)
			reportPer(b, "event", events, m0)
		}
	}
	runImpls(b,
		impl{"mirror", mirrorRun},
		impl{"clientgo", clientgoRun(queueKeys, func() cache.Queue {
			return cache.NewDeltaFIFOWithOptions(cache.DeltaFIFOOptions{KeyFunction: cache.MetaNamespaceKeyFunc})
		})},
		impl{"clientgo-realfifo", clientgoRun(events, func() cache.Queue {
			return cache.NewRealFIFOWithOptions(cache.RealFIFOOptions{
				KeyFunction:  cache.MetaNamespaceKeyFunc,
				KnownObjects: cache.NewStore(cache.MetaNamespaceKeyFunc),
			})
		})},
	)
}

// BenchmarkDeltaFIFO_ReplaceDrain100k is a relist: Replace with 100k
// objects, every one of which the consumer already knows (an older
// version is in the queue's KnownObjects), then the pops that deliver them.
// One op is the Replace and its drain; the metrics are per object.
//
// Each side's KnownObjects is its own cache holding the older versions:
// mirror.Indexer and client-go's cache.Store. Both queues emit Replaced
// deltas (as informers configure them); impl=clientgo-realfifo is
// client-go's RealFIFO in its KnownObjects mode, which makes the same
// per-object deltas (its atomic mode defers that work to the informer,
// measured by BenchmarkInformer_*).
func BenchmarkDeltaFIFO_ReplaceDrain100k(b *testing.B) {
	ns := names(queueKeys)
	known, listed := objects(ns, 1), objects(ns, 2)
	ctx := context.Background()

	mirrorRun := func(b *testing.B) {
		cache := mirror.NewIndexer(KeyOf, nil)
		for _, o := range known {
			if _, _, err := cache.Set(Key{o.Namespace, o.Name}, o); err != nil {
				b.Fatal(err)
			}
		}
		f := mirror.NewDeltaFIFO(mirror.DeltaFIFOOptions[Key, *Obj]{
			KeyFunc:               KeyOf,
			KnownObjects:          cache,
			EmitDeltaTypeReplaced: true,
		})
		process := func(Key, mirror.Deltas[*Obj], bool) error { return nil }
		b.ReportAllocs()
		m0 := mallocs()
		var cpu cpuClock
		cpu.start()
		for b.Loop() {
			if err := f.Replace(listed, "2"); err != nil {
				b.Fatal(err)
			}
			for range queueKeys {
				if err := f.Pop(ctx, process); err != nil {
					b.Fatal(err)
				}
			}
		}
		cpu.stop()
		cpu.report(b, "object", queueKeys)
		reportPer(b, "object", queueKeys, m0)
	}

	clientgoRun := func(newQueue func(known cache.KeyListerGetter) cache.Queue) func(b *testing.B) {
		return func(b *testing.B) {
			store := cache.NewStore(cache.MetaNamespaceKeyFunc)
			for _, o := range known {
				if err := store.Add(o); err != nil {
					b.Fatal(err)
				}
			}
			// The reflector hands Replace a []any; building it is not
			// the queue's work.
			list := make([]any, len(listed))
			for i, o := range listed {
				list[i] = o
			}
			q := newQueue(store)
			process := func(any, bool) error { return nil }
			b.ReportAllocs()
			m0 := mallocs()
			var cpu cpuClock
			cpu.start()
			for b.Loop() {
				if err := q.Replace(list, "2"); err != nil {
					b.Fatal(err)
				}
				for range queueKeys {
					if _, err := q.Pop(process); err != nil {
						b.Fatal(err)
					}
				}
			}
			cpu.stop()
			cpu.report(b, "object", queueKeys)
			reportPer(b, "object", queueKeys, m0)
		}
	}
	runImpls(b,
		impl{"mirror", mirrorRun},
		impl{"clientgo", clientgoRun(func(known cache.KeyListerGetter) cache.Queue {
			return cache.NewDeltaFIFOWithOptions(cache.DeltaFIFOOptions{
				KeyFunction:           cache.MetaNamespaceKeyFunc,
				KnownObjects:          known,
				EmitDeltaTypeReplaced: true,
			})
		})},
		impl{"clientgo-realfifo", clientgoRun(func(known cache.KeyListerGetter) cache.Queue {
			return cache.NewRealFIFOWithOptions(cache.RealFIFOOptions{
				KeyFunction:  cache.MetaNamespaceKeyFunc,
				KnownObjects: known,
			})
		})},
	)
}
