package bench

import (
	"sync/atomic"
	"testing"
	"time"
)

// The throughput workloads of issue 22, after controller-runtime's own
// queue benchmarks: add+get+done, adds only, and adds under lock
// contention. Each op moves wqKeys keys; ns/key and cpu-ns/key (or /add)
// are per key.

// wqKeys is the number of keys one op of the throughput workloads moves.
const wqKeys = 1000

// BenchmarkWorkqueue_AddGetDone adds 1,000 keys at the live priority from
// one goroutine, then gets and dones them one by one.
func BenchmarkWorkqueue_AddGetDone(b *testing.B) {
	runWQ(b, func(b *testing.B, im wqImpl) {
		q := im.make(0)
		defer q.shutDown()
		b.ReportAllocs()
		m0 := mallocs()
		var cpu cpuClock
		cpu.start()
		for b.Loop() {
			for i := range wqKeys {
				q.add(i)
			}
			for range wqKeys {
				k, _ := q.get()
				q.done(k)
			}
		}
		cpu.stop()
		cpu.report(b, "key", wqKeys)
		reportPer(b, "key", wqKeys, m0)
	})
}

// BenchmarkWorkqueue_AddOnly adds the same 1,000 keys again and again:
// after the first round, every add finds its key queued.
func BenchmarkWorkqueue_AddOnly(b *testing.B) {
	runWQ(b, func(b *testing.B, im wqImpl) {
		q := im.make(0)
		defer q.shutDown()
		b.ReportAllocs()
		m0 := mallocs()
		var cpu cpuClock
		cpu.start()
		for b.Loop() {
			for i := range wqKeys {
				q.add(i)
			}
		}
		cpu.stop()
		cpu.report(b, "add", wqKeys)
		reportPer(b, "add", wqKeys, m0)
	})
}

// BenchmarkWorkqueue_LockContended is controller-runtime's lock-contended
// shape: a queue preloaded with 1M keys (10k with -short), 1,000 workers
// (50) that spend 1 ms on each key, and 1,000 adds per op that cycle
// through the preloaded keys (each queued still, or taken and queued
// again). The preload goes in at the background priority (an initial
// list), the adds at the live one.
func BenchmarkWorkqueue_LockContended(b *testing.B) {
	preload := wqScaled(1_000_000, 10_000)
	nWorkers := wqScaled(1000, 50)
	runWQ(b, func(b *testing.B, im wqImpl) {
		q := im.make(0)
		for i := range preload {
			q.addBackground(i)
		}
		var processed atomic.Int64
		stop := workers(q, nWorkers, func(int) {
			time.Sleep(time.Millisecond)
			processed.Add(1)
		})
		b.ReportAllocs()
		m0 := mallocs()
		var cpu cpuClock
		cpu.start()
		next := 0
		for b.Loop() {
			for range wqKeys {
				q.add(next)
				next = (next + 1) % preload
			}
		}
		cpu.stop()
		cpu.report(b, "add", wqKeys)
		reportPer(b, "add", wqKeys, m0)
		// The workers' pace while the adds ran, to show no queue starved
		// them to win the adds.
		b.ReportMetric(float64(processed.Load())/b.Elapsed().Seconds(), "processed/s")
		stop()
	})
}
