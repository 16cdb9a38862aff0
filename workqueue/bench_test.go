package workqueue

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"
)

// The workloads of the peers' benchmarks (controller-runtime's
// BenchmarkAddGetDone, BenchmarkAddOnly and a lock-contended one), for
// this queue alone; bench/ runs them side by side with the peers.

// reportPer reports the time and allocations per unit (a key, an add) of
// a benchmark whose every iteration handles perOp units. mallocs0 is the
// malloc count read before the loop: allocs/op alone rounds a fraction
// of an allocation per unit down to 0 or hides it in a large op.
func reportPer(b *testing.B, unit string, perOp int, mallocs0 uint64) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	units := float64(b.N) * float64(perOp)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/units, "ns/"+unit)
	b.ReportMetric(float64(ms.Mallocs-mallocs0)/units, "allocs/"+unit)
}

func mallocs() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.Mallocs
}

// BenchmarkQueue_AddGetDone adds 1,000 keys, then gets and dones them one
// by one: all at PriorityLive; at mixed priorities (a third each live,
// background, resync); and with metrics on.
func BenchmarkQueue_AddGetDone(b *testing.B) {
	const keys = 1000
	for _, bc := range []struct {
		name    string
		prio    func(i int) Priority
		metrics bool
	}{
		{"live", func(int) Priority { return PriorityLive }, false},
		{"mixed", func(i int) Priority { return Priority(i%3-2) * 100 }, false},
		{"mixed/metrics", func(i int) Priority { return Priority(i%3-2) * 100 }, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			opts := Options{}
			if bc.metrics {
				opts.Metrics = discardMetrics{}
			}
			q := New[int](opts)
			defer q.ShutDown()
			ctx := context.Background()
			b.ReportAllocs()
			m0 := mallocs()
			for b.Loop() {
				for i := range keys {
					q.AddWithPriority(i, bc.prio(i))
				}
				for range keys {
					k, _ := q.Get(ctx)
					q.Done(k)
				}
			}
			reportPer(b, "key", keys, m0)
		})
	}
}

// BenchmarkQueue_AddOnly adds the same 1,000 keys again and again: after
// the first round, every add finds its key queued.
func BenchmarkQueue_AddOnly(b *testing.B) {
	const keys = 1000
	q := New[int](Options{})
	defer q.ShutDown()
	b.ReportAllocs()
	m0 := mallocs()
	for b.Loop() {
		for i := range keys {
			q.Add(i)
		}
	}
	reportPer(b, "add", keys, m0)
}

// BenchmarkQueue_LockContended adds 1,000 keys per op to a queue preloaded
// with 1M keys while 1,000 workers take keys and spend 1 ms on each. The
// keys added cycle through the preloaded ones: queued still, or taken and
// queued again.
func BenchmarkQueue_LockContended(b *testing.B) {
	const (
		preload = 1_000_000
		workers = 1000
		perOp   = 1000
	)
	q := New[int](Options{})
	for i := range preload {
		q.AddWithPriority(i, PriorityBackground)
	}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				k, err := q.Get(context.Background())
				if errors.Is(err, ErrShutdown) {
					return
				}
				time.Sleep(time.Millisecond)
				q.Done(k)
			}
		})
	}
	b.ReportAllocs()
	m0 := mallocs()
	next := 0
	for b.Loop() {
		for range perOp {
			q.Add(next)
			next = (next + 1) % preload
		}
	}
	reportPer(b, "add", perOp, m0)
	b.StopTimer()
	q.ShutDown()
	wg.Wait()
}

type discardMetrics struct{}

func (discardMetrics) Queue(string, StatsSource) QueueMetrics { return discardMetrics{} }
func (discardMetrics) Waited(Priority, time.Duration)         {}
func (discardMetrics) Processed(time.Duration)                {}
func (discardMetrics) Stop()                                  {}
