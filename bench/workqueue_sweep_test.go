package bench

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkWorkqueue_BacklogSweep is issue 29's sweep: an initial list of
// 100k, 500k or 1M keys queued at the background priority (1k, 2k, 4k
// with -short), default options (ours ages keys after 30 s), 4 workers
// that spend ~200 µs on each key, and a live key added every 10 ms (1 ms)
// from when the workers start until the backlog is drained or 45 s
// (500 ms) have passed, whichever comes first: long enough, at 1M keys,
// for the backlog to age. It reports the live keys' add→get latency
// (p50-us, p99-us, max-us), counting a live key not served when the run
// stops (client-go's FIFO buries them) at the time it had waited then, and
// the share served (live-served-%); the backlog keys the workers took per
// second (backlog-keys/s); and the mean time a work item took (work-us).
func BenchmarkWorkqueue_BacklogSweep(b *testing.B) {
	sizes := wqScaled([]int{100_000, 500_000, 1_000_000}, []int{1_000, 2_000, 4_000})
	every := wqScaled(10*time.Millisecond, time.Millisecond)
	window := wqScaled(45*time.Second, 500*time.Millisecond)
	const nWorkers = 4
	for _, backlog := range sizes {
		b.Run(fmt.Sprintf("backlog=%dk", backlog/1000), func(b *testing.B) {
			runWQ(b, func(b *testing.B, im wqImpl) {
				var p50, p99, worst, served, rate float64
				var work workClock
				for b.Loop() {
					q := im.make(0)
					for i := range backlog {
						q.addBackground(i)
					}
					maxLive := int(window/every) + 1
					addedAt := make([]atomic.Int64, maxLive)
					lat := make([]atomic.Int64, maxLive)
					var nBacklog atomic.Int64
					var stopping atomic.Bool
					epoch := time.Now()
					stop := workers(q, nWorkers, func(k int) {
						if stopping.Load() {
							return // client-go's queue drains after ShutDown: skip the work
						}
						if k >= backlog {
							lat[k-backlog].Store(int64(time.Since(epoch)) - addedAt[k-backlog].Load())
						} else {
							nBacklog.Add(1)
						}
						work.do()
					})
					nLive := 0
					for nLive < maxLive && nBacklog.Load() < int64(backlog) && time.Since(epoch) < window {
						addedAt[nLive].Store(int64(time.Since(epoch)))
						q.add(backlog + nLive)
						nLive++
						time.Sleep(every)
					}
					stopping.Store(true)
					elapsed := time.Since(epoch)
					rate = float64(nBacklog.Load()) / elapsed.Seconds()
					stop()
					ds := make([]time.Duration, 0, nLive)
					nServed := 0
					for i := range nLive {
						d := lat[i].Load()
						if d > 0 {
							nServed++
						} else {
							d = int64(elapsed) - addedAt[i].Load()
						}
						ds = append(ds, time.Duration(d))
					}
					served = float64(nServed) / float64(max(nLive, 1)) * 100
					p50 = float64(percentile(ds, 0.50).Microseconds())
					p99 = float64(percentile(ds, 0.99).Microseconds())
					worst = float64(percentile(ds, 1).Microseconds())
				}
				b.ReportMetric(p50, "p50-us")
				b.ReportMetric(p99, "p99-us")
				b.ReportMetric(worst, "max-us")
				b.ReportMetric(served, "live-served-%")
				b.ReportMetric(rate, "backlog-keys/s")
				work.report(b)
			})
		})
	}
}

// BenchmarkWorkqueue_RetryAfterDone fails one key five times with a
// worker loop that calls Done before AddRateLimited (the order code
// ported from client-go often has), and reports how long each of the
// first four retries waited (retry1-ms … retry4-ms): the queues' default
// backoff starts at 5 ms and doubles.
func BenchmarkWorkqueue_RetryAfterDone(b *testing.B) {
	const retries = 4
	runWQ(b, func(b *testing.B, im wqImpl) {
		var waits [retries]time.Duration
		for b.Loop() {
			q := im.make(0)
			q.add(0)
			k, _ := q.get()
			for i := range retries {
				q.done(k)
				q.addRateLimited(k)
				start := time.Now()
				k, _ = q.get()
				waits[i] = time.Since(start)
			}
			q.done(k)
			q.shutDown()
		}
		for i, w := range waits {
			b.ReportMetric(float64(w)/1e6, fmt.Sprintf("retry%d-ms", i+1))
		}
	})
}
