package mirrorprom_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/memsource"
)

// BenchmarkInformer_MetricsOnOff measures what the metrics cost an
// informer: the root package's BenchmarkInformer_EndToEnd (a change put
// into memsource, watched, queued, applied to the cache and handed to
// every handler) with metrics=off, no Metrics, against metrics=on, a
// Metrics of this package registered in a registry that is gathered once
// a second, fifteen times Prometheus' default rate. One op is a batch of
// 10k events; compare events/s with benchstat, -col /metrics. cpu-ns/event
// is the process's CPU time per event (getrusage: every goroutine, the
// collector and the scrapes included), steadier than events/s on a busy
// machine.
func BenchmarkInformer_MetricsOnOff(b *testing.B) {
	const keys, batch = 10_000, 10_000
	for _, handlers := range []int{1, 16} {
		for _, on := range []bool{false, true} {
			b.Run(fmt.Sprintf("handlers=%d/metrics=%s", handlers, onOff(on)), func(b *testing.B) {
				src := memsource.New(sourceKey, memsource.Options{HistoryLimit: 4 * batch})
				names := make([]string, keys)
				for i := range names {
					names[i] = "k" + strconv.Itoa(i)
					src.Put(item{Name: names[i]})
				}
				opts := mirror.InformerOptions[string, item]{Name: "bench", KeyFunc: itemKey}
				ctx, cancel := context.WithCancel(context.Background())
				var wg sync.WaitGroup
				defer func() {
					cancel()
					wg.Wait()
				}()
				if on {
					m, registry := newMetrics(b)
					opts.Metrics = m
					wg.Go(func() {
						tick := time.NewTicker(time.Second)
						defer tick.Stop()
						for {
							select {
							case <-ctx.Done():
								return
							case <-tick.C:
								if _, err := registry.Gather(); err != nil {
									panic(err)
								}
							}
						}
					})
				}
				inf := mirror.NewInformer(src, opts)
				var seen, target atomic.Int64
				reached := make(chan struct{}, 1)
				count := func() {
					if seen.Add(1) == target.Load() {
						reached <- struct{}{}
					}
				}
				for i := range handlers {
					_, err := inf.AddEventHandler(mirror.HandlerFuncs[item]{
						AddFunc:    func(item, bool) { count() },
						UpdateFunc: func(_, _ item) { count() },
					}, mirror.HandlerOptions{Name: "h" + strconv.Itoa(i)})
					if err != nil {
						b.Fatal(err)
					}
				}
				target.Store(int64(keys * handlers))
				wg.Go(func() { _ = inf.Run(ctx) })
				<-reached

				b.ReportAllocs()
				val := 0
				cpu := processCPU()
				for b.Loop() {
					target.Add(int64(batch * handlers))
					for i := range batch {
						val++
						src.Put(item{Name: names[i%keys], Val: val})
					}
					<-reached
				}
				b.StopTimer()
				b.ReportMetric(float64(processCPU()-cpu)/float64(b.N*batch), "cpu-ns/event")
				b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "events/s")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}
