package workqueue

import (
	"runtime"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// liveHeap returns the bytes of live heap objects.
func liveHeap() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// Both peers keep 110-130 MB after a burst of a million keys that failed
// once and were never forgotten: client-go's failure map never forgets
// (kubernetes#105031 leaked 2 GB), and maps do not shrink.
func TestQueue_HeapReturnsAfterBurstOfFailures(t *testing.T) {
	keys := 1_000_000
	if testing.Short() || raceEnabled {
		keys = 200_000
	}
	synctest.Test(t, func(t *testing.T) {
		q := New[string](Options{BaseDelay: time.Second})
		defer q.ShutDown()
		// burst queues n keys at all three priorities; each fails once
		// (retried, never forgotten), then succeeds.
		burst := func(n int) {
			for i := range n {
				q.AddWithPriority(strconv.Itoa(i), Priority(i%3-1)*100)
			}
			for done := 0; done < 2*n; {
				k, ok := tryGet(q)
				if !ok {
					sleep(time.Second)
					continue
				}
				if q.NumRequeues(k) == 0 {
					q.AddRateLimited(k)
				}
				q.Done(k)
				done++
			}
			// Idle until the retry counts Done kept are forgotten, and
			// two ticks more: the tables shrink at the second.
			sleep(keepFails + DefaultMaxWait/4 + 2*DefaultMaxWait/agingSteps)
		}
		// The baseline is taken after a small burst, so that what the
		// runtime keeps of any burst (threads, their stacks) is in it.
		burst(keys / 10)
		baseline := liveHeap()
		burst(keys)
		assert.Empty(t, q.index, "no failure is remembered")
		after := liveHeap()
		t.Logf("live heap: %d bytes idle, %d after %d keys", baseline, after, keys)
		assert.LessOrEqual(t, after, baseline+baseline/10)
		runtime.KeepAlive(q)
	})
}

func TestQueue_TablesShrinkAfterBurstWhileKeysHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &fakeMetrics{}
		q := New[int](Options{Metrics: m})
		defer q.ShutDown()
		const keys = 100_000
		for i := range keys {
			q.AddWithPriority(i, PriorityBackground)
		}
		k0, _ := tryGet(q)
		start0 := time.Now()
		sleep(time.Second)
		k1, _ := tryGet(q)
		start1 := time.Now()
		for i := 1; i <= 3; i++ {
			q.AddAfter(-i, time.Hour)
		}
		for range keys - 6 {
			k, _ := tryGet(q)
			q.Done(k)
		}
		q.Add(keys - 1) // raised: entries at two levels
		// The tables shrink at the second tick with few keys held.
		sleep(2 * DefaultMaxWait / agingSteps)

		assert.LessOrEqual(t, cap(q.recs), shrinkMin, "records compacted")
		assert.Len(t, q.index, 9)
		s := q.Stats()
		assert.Equal(t, []PriorityDepth{{PriorityLive, 1}, {PriorityBackground, 3}}, s.Depth)
		assert.Equal(t, 3, s.Delayed)
		assert.Equal(t, 2, s.InProcess)
		assert.Equal(t, time.Since(start0), s.LongestRunning, "the list of keys in process survived")
		assert.Equal(t, time.Since(start0)+time.Since(start1), s.UnfinishedWork)

		assert.Equal(t, []int{keys - 1, keys - 4, keys - 3, keys - 2}, processAll(q))
		q.Done(k1)
		assert.Equal(t, time.Since(start0), q.Stats().LongestRunning)
		q.Done(k0)
		assert.Equal(t, []int{0, 1}, []int{k0, k1})
		sleep(time.Hour)
		assert.Equal(t, []int{-1, -2, -3}, processAll(q))
		assert.Empty(t, q.index)
	})
}

func TestQueue_RecordReusedForAnotherKeyLeavesOldEntriesStale(t *testing.T) {
	q := New[string](Options{})
	defer q.ShutDown()
	q.AddWithPriority("a", PriorityBackground)
	q.AddWithPriority("b", PriorityBackground)
	q.Add("a") // raised: a's background entry stays behind b
	a, _ := tryGet(q)
	require.Equal(t, "a", a)
	q.Done(a)                              // a's record is freed...
	q.AddWithPriority("c", PriorityResync) // ...and reused for c
	assert.Equal(t, []string{"b", "c"}, processAll(q))
}
