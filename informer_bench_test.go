package mirror_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/memsource"
	"github.com/listwatch/mirror/source"
)

// BenchmarkInformer_EndToEnd measures the whole path: a change put into
// memsource, watched by the Reflector, queued, applied to the cache and
// handed to every handler. One op is one batch of events; the metrics are
// per event.
func BenchmarkInformer_EndToEnd(b *testing.B) {
	const keys, batch = 10_000, 10_000
	for _, handlers := range []int{1, 16} {
		b.Run(fmt.Sprintf("handlers=%d", handlers), func(b *testing.B) {
			src := memsource.New(itemKey, memsource.Options{HistoryLimit: 4 * batch})
			names := make([]string, keys)
			for i := range names {
				names[i] = "k" + strconv.Itoa(i)
				src.Put(item{Name: names[i]})
			}
			inf := mirror.NewInformer(src, mirror.InformerOptions[string, item]{KeyFunc: itemKey})
			var seen atomic.Int64
			target := atomic.Int64{}
			reached := make(chan struct{}, 1)
			count := func() {
				if seen.Add(1) == target.Load() {
					reached <- struct{}{}
				}
			}
			for range handlers {
				_, err := inf.AddEventHandler(mirror.HandlerFuncs[item]{
					AddFunc:    func(item, bool) { count() },
					UpdateFunc: func(_, _ item) { count() },
				}, mirror.HandlerOptions{})
				if err != nil {
					b.Fatal(err)
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error)
			target.Store(int64(keys * handlers))
			go func() { done <- inf.Run(ctx) }()
			<-reached

			b.ReportAllocs()
			val := 0
			for b.Loop() {
				target.Add(int64(batch * handlers))
				for i := range batch {
					val++
					src.Put(item{Name: names[i%keys], Val: val})
				}
				<-reached
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "events/s")
			b.ReportMetric(0, "ns/op")
			cancel()
			<-done
		})
	}
}

// burstKV is shaped like the etcd adapter's KV: a string key and 72 bytes
// in all. Sent holds the time it was put, for the latency.
type burstKV struct {
	Key                        string
	Value                      []byte
	Sent, Version, Create, Mod int64
}

func burstKey(o burstKV) (string, error) { return o.Key, nil }

// BenchmarkInformer_WatchBursts measures what the informer adds to a
// watch that a program applies by hand: side=informer is an informer with
// one handler over a memsource.Source; side=watch applies the source's
// watch to a map on one goroutine, as test/etcd's adapter side does with
// etcd, without etcd's noise. Puts come in bursts of 100, as a watch
// response brings them, with a pause between bursts (gap=1ms) or none
// (gap=0s: the queues back up). One op is 10k puts to 10k keys;
// cpu-ns/put is the process's CPU time per put (getrusage: goroutine
// hand-offs and the collector included), p50-us the put-to-handler
// latency.
func BenchmarkInformer_WatchBursts(b *testing.B) {
	const keys, puts, burst = 10_000, 10_000, 100
	for _, gap := range []time.Duration{time.Millisecond, 0} {
		for _, side := range []string{"informer", "watch"} {
			b.Run(fmt.Sprintf("gap=%v/side=%s", gap, side), func(b *testing.B) {
				src := memsource.New(func(o burstKV) (string, error) { return o.Key, nil }, memsource.Options{HistoryLimit: 4 * puts})
				names := make([]string, keys)
				for i := range names {
					names[i] = fmt.Sprintf("/bench/watch/%08d", i)
					src.Put(burstKV{Key: names[i]})
				}
				var latencies []time.Duration
				var seen int
				reached := make(chan struct{})
				apply := func(o burstKV) { // on one goroutine at a time
					if o.Sent == 0 {
						return
					}
					latencies = append(latencies, time.Duration(time.Now().UnixNano()-o.Sent))
					if seen++; seen%puts == 0 {
						reached <- struct{}{}
					}
				}
				ctx, cancel := context.WithCancel(context.Background())
				var wg sync.WaitGroup
				defer func() {
					cancel()
					wg.Wait()
				}()
				if side == "informer" {
					inf := mirror.NewInformer(src, mirror.InformerOptions[string, burstKV]{KeyFunc: burstKey})
					_, err := inf.AddEventHandler(mirror.HandlerFuncs[burstKV]{
						AddFunc:    func(o burstKV, _ bool) { apply(o) },
						UpdateFunc: func(_, o burstKV) { apply(o) },
					}, mirror.HandlerOptions{})
					if err != nil {
						b.Fatal(err)
					}
					wg.Go(func() { _ = inf.Run(ctx) })
					if err := mirror.WaitForCacheSync(ctx, inf); err != nil {
						b.Fatal(err)
					}
				} else {
					list, err := src.List(ctx, source.ListOptions{})
					if err != nil {
						b.Fatal(err)
					}
					mirrored := make(map[string]burstKV, len(list.Items))
					for _, o := range list.Items {
						mirrored[o.Key] = o
					}
					w, err := src.Watch(ctx, source.WatchOptions{ResourceVersion: list.ResourceVersion})
					if err != nil {
						b.Fatal(err)
					}
					wg.Go(func() {
						defer w.Stop()
						for {
							ev, err := w.Next(ctx)
							if err != nil {
								return
							}
							mirrored[ev.Object.Key] = ev.Object
							apply(ev.Object)
						}
					})
				}
				b.ReportAllocs()
				var cpu time.Duration
				for b.Loop() {
					c0 := processCPU()
					for i := range puts {
						src.Put(burstKV{Key: names[i], Value: []byte("v"), Sent: time.Now().UnixNano()})
						if gap > 0 && i%burst == burst-1 {
							time.Sleep(gap)
						}
					}
					<-reached
					cpu += processCPU() - c0
				}
				b.StopTimer()
				slices.Sort(latencies)
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*puts), "cpu-ns/put")
				b.ReportMetric(float64(latencies[len(latencies)/2].Microseconds()), "p50-us")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}
