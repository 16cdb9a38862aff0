package mirror_test

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/memsource"
)

// BenchmarkInformer_EndToEnd measures the whole path: a change put into
// memsource, watched by the Reflector, queued, applied to the cache and
// handed to every handler. One op is one batch of events; the metrics are
// per event.
func BenchmarkInformer_EndToEnd(b *testing.B) {
	const keys, batch = 10_000, 10_000
	for _, q := range queueKinds {
		for _, handlers := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/handlers=%d", q.name, handlers), func(b *testing.B) {
				src := memsource.New(itemName, memsource.Options{HistoryLimit: 4 * batch})
				names := make([]string, keys)
				for i := range names {
					names[i] = "k" + strconv.Itoa(i)
					src.Put(item{Name: names[i]})
				}
				inf := mirror.NewInformer(src, mirror.InformerOptions[string, item]{KeyFunc: itemKey, Queue: q.kind})
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
}
