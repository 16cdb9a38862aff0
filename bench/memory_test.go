package bench

import (
	"flag"
	"os"
	"runtime/pprof"
	"strconv"
	"sync"
	"testing"

	"github.com/listwatch/mirror/memsource"
)

var heapProfile = flag.String("heapprofile", "",
	"write a heap profile of each Informer_Heap1M informer, synced, to `prefix`-<impl>.pprof")

// writeHeapProfile writes the heap profile -heapprofile asks for, if any.
func writeHeapProfile(b *testing.B, impl string) {
	if *heapProfile == "" {
		return
	}
	f, err := os.Create(*heapProfile + "-" + impl + ".pprof")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		b.Fatal(err)
	}
}

// heapObjects is 1M, or 100k with -short.
func heapObjects() int { return scaled(1_000_000) }

// BenchmarkInformer_Heap1M builds an informer with one handler over a
// Generator of 1M objects and waits until the handler has seen them all.
// heap-MB is the live heap the synced informer holds, objects included
// (the Generator keeps none): the heap after a collection with the
// informer running, less the heap before it started. One op is the build
// and initial sync; the metrics are per object.
func BenchmarkInformer_Heap1M(b *testing.B) {
	gen := &Generator{Namespace: namespace, Names: names(heapObjects())}
	for _, im := range informerImpls {
		b.Run("impl="+im.name, func(b *testing.B) {
			b.ReportAllocs()
			m0 := mallocs()
			var cpu cpuClock
			var heap uint64
			b.StopTimer()
			for range b.N {
				before := heapAlloc()
				var synced sync.WaitGroup
				synced.Add(1)
				h := countTo(func(int) { synced.Done() }, heapObjects())
				b.StartTimer()
				cpu.start()
				stop := im.start(gen, []handlerSpec{h})
				synced.Wait()
				b.StopTimer()
				cpu.stop()
				heap += heapAlloc() - before
				writeHeapProfile(b, im.name)
				stop()
			}
			cpu.report(b, "object", heapObjects())
			reportPer(b, "object", heapObjects(), m0)
			perOp := float64(heap) / float64(b.N)
			b.ReportMetric(perOp/1e6, "heap-MB")
			b.ReportMetric(perOp/float64(heapObjects()), "heap-B/object")
		})
	}
}

// stallEvents is 1M, or 100k with -short.
func stallEvents() int { return scaled(1_000_000) }

const (
	stallKeys = 1_000
	// stallChunk is how many changes the producer puts before it waits for
	// the live handler to catch up, so that the source's history (2
	// chunks) never expires under the watch.
	stallChunk = 10_000
)

// BenchmarkInformer_StalledHandler1M puts 1M changes to 1k objects
// through an informer with two handlers: one counts, the other is stuck
// in its first call until the end. heap-MB is the heap that has grown
// while the changes went through: what the stuck handler's buffer holds.
// mirror bounds that handler with MaxBacklog (1k, the number of keys), so
// its buffer keeps at most one pending notification per key; client-go's
// buffer has no bound. One op is the 1M changes, until the live handler
// has counted the last.
func BenchmarkInformer_StalledHandler1M(b *testing.B) {
	ns := names(stallKeys)
	for _, im := range informerImpls {
		b.Run("impl="+im.name, func(b *testing.B) {
			b.ReportAllocs()
			m0 := mallocs()
			var cpu cpuClock
			var growth uint64
			b.StopTimer()
			for range b.N {
				src := memsource.New(SourceKey, memsource.Options{HistoryLimit: 2 * stallChunk})
				for i, n := range ns {
					src.Put(&Obj{Namespace: namespace, Name: n, ResourceVersion: strconv.Itoa(i + 2)}) // a new source is at 1
				}
				progress := make(chan int, 1)
				checkpoints := []int{stallKeys}
				for n := stallChunk; n <= stallEvents(); n += stallChunk {
					checkpoints = append(checkpoints, stallKeys+n)
				}
				live := countTo(func(n int) { progress <- n }, checkpoints...)
				release := make(chan struct{})
				stuck := handlerSpec{
					add:        func(*Obj) { <-release },
					update:     func(_, _ *Obj) { <-release },
					maxBacklog: stallKeys,
				}
				stop := im.start(src, []handlerSpec{live, stuck})
				<-progress // synced
				before := heapAlloc()
				b.StartTimer()
				cpu.start()
				rv := 1 + stallKeys
				for i := range stallEvents() {
					rv++
					// Made here, not in advance, so that what a buffer
					// keeps shows as heap growth.
					src.Put(&Obj{Namespace: namespace, Name: ns[i%stallKeys], ResourceVersion: strconv.Itoa(rv), Value: int64(i)})
					if (i+1)%stallChunk == 0 {
						<-progress
					}
				}
				b.StopTimer()
				cpu.stop()
				growth += heapAlloc() - before
				close(release)
				stop()
			}
			cpu.report(b, "event", stallEvents())
			reportPer(b, "event", stallEvents(), m0)
			b.ReportMetric(float64(growth)/float64(b.N)/1e6, "heap-MB")
		})
	}
}
