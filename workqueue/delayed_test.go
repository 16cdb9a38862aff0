package workqueue

import (
	"context"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sleep lets d pass in the bubble and the timers due by then fire.
func sleep(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

func TestQueue_AddAfterQueuesAfterDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New[string](Options{})
		defer q.ShutDown()
		q.AddAfter("b", 2*time.Second)
		q.AddAfter("a", time.Second)
		q.AddAfter("c", 0) // now
		assert.Equal(t, 1, q.Len())
		assert.Equal(t, 2, q.Stats().Delayed)
		sleep(999 * time.Millisecond)
		assert.Equal(t, []string{"c"}, processAll(q))
		sleep(time.Millisecond)
		assert.Equal(t, []string{"a"}, processAll(q))
		sleep(time.Second)
		assert.Equal(t, []string{"b"}, processAll(q))
		assert.Equal(t, 0, q.Stats().Delayed)
	})
}

// client-go queues the key twice, once from each set (kubernetes#110642).
func TestQueue_AddAfterThenAddProcessedOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New[string](Options{})
		defer q.ShutDown()
		q.AddAfter("a", time.Second)
		q.Add("a")
		assert.Equal(t, []string{"a"}, processAll(q))
		assert.Equal(t, 0, q.Stats().Delayed, "the add took the key out of the delayed set")
		sleep(2 * time.Second)
		assert.Empty(t, processAll(q))
	})
}

func TestQueue_AddAfterOfQueuedKeyDoesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New[string](Options{})
		defer q.ShutDown()
		q.Add("a")
		q.AddAfter("a", time.Second)
		assert.Equal(t, 0, q.Stats().Delayed)
		assert.Equal(t, []string{"a"}, processAll(q))
		sleep(2 * time.Second)
		assert.Empty(t, processAll(q))
	})
}

func TestQueue_EarlierAddAfterMovesDelayedKeyEarlierLaterDoesNot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New[string](Options{})
		defer q.ShutDown()
		q.AddAfter("a", 10*time.Second)
		q.AddAfter("b", 5*time.Second)
		q.AddAfter("a", 2*time.Second)  // earlier: moves
		q.AddAfter("b", 20*time.Second) // later: stays at 5 s
		sleep(2 * time.Second)
		assert.Equal(t, []string{"a"}, processAll(q))
		sleep(3 * time.Second)
		assert.Equal(t, []string{"b"}, processAll(q))
		sleep(time.Minute)
		assert.Empty(t, processAll(q))
	})
}

func TestQueue_AddAfterKeepsKeyPriority(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New[string](Options{})
		defer q.ShutDown()
		q.AddWithPriority("bg", PriorityBackground)
		k, _ := tryGet(q)
		q.AddAfter(k, time.Second) // in process at background
		q.AddAfter("new", time.Second)
		q.Done(k)
		sleep(time.Second)
		q.AddWithPriority("bg2", PriorityBackground)
		q.Add("live")
		assert.Equal(t, []string{"new", "live", "bg", "bg2"}, processAll(q))
	})
}

func TestQueue_AddOfDelayedKeyQueuesItAtHigherPriority(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New[string](Options{})
		defer q.ShutDown()
		q.AddWithPriority("a", PriorityBackground)
		k, _ := tryGet(q)
		q.AddAfter(k, time.Second) // delayed at background
		q.Done(k)
		q.AddWithPriority("a", PriorityResync) // queued now, not lowered
		q.AddWithPriority("bg", PriorityBackground)
		assert.Equal(t, []string{"a", "bg"}, processAll(q))
	})
}

func TestQueue_DelayedKeyInProcessQueuedAtDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New[string](Options{})
		defer q.ShutDown()
		q.Add("a")
		k, _ := tryGet(q)
		q.AddAfter(k, time.Second)
		sleep(2 * time.Second)
		assert.Equal(t, 0, q.Len(), "due, but in process")
		q.Done(k)
		assert.Equal(t, []string{"a"}, processAll(q))

		// An add of a delayed key in process marks it the same way.
		q.Add("b")
		k, _ = tryGet(q)
		q.AddAfter(k, time.Hour)
		q.Add(k)
		assert.Equal(t, 0, q.Stats().Delayed)
		q.Done(k)
		assert.Equal(t, []string{"b"}, processAll(q))
	})
}

func TestQueue_AddRateLimitedBacksOffPerKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New[string](Options{BaseDelay: time.Second, MaxDelay: 5 * time.Second})
		defer q.ShutDown()
		// retry fails key once more and returns how long it waited.
		retry := func(key string) time.Duration {
			k, ok := tryGet(q)
			require.True(t, ok)
			require.Equal(t, key, k)
			q.AddRateLimited(k)
			q.Done(k)
			start := time.Now()
			for q.Len() == 0 {
				sleep(100 * time.Millisecond)
			}
			return time.Since(start)
		}
		q.Add("a")
		var waits []time.Duration
		for range 5 {
			waits = append(waits, retry("a"))
		}
		assert.Equal(t, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}, waits)
		assert.Equal(t, 5, q.NumRequeues("a"))

		q.Forget("a")
		assert.Equal(t, 0, q.NumRequeues("a"))
		assert.Equal(t, time.Second, retry("a"))
		assert.Equal(t, 1, q.NumRequeues("a"))
		assert.Equal(t, 0, q.NumRequeues("other"), "each key backs off on its own")
		assert.EqualValues(t, 6, q.Stats().Retries)
	})
}

// client-go's default limiter adds a 10 qps bucket over every key, so 1M
// keys failing at once take a day to retry.
func TestQueue_MassFailureRetriesWithinPerKeyBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New[int](Options{BaseDelay: time.Second})
		defer q.ShutDown()
		const keys = 100_000
		for i := range keys {
			q.Add(i)
		}
		for range keys {
			k, _ := tryGet(q)
			q.AddRateLimited(k)
			q.Done(k)
		}
		sleep(time.Second)
		assert.Equal(t, keys, q.Len())
	})
}

func TestQueue_RetryCountKeptAfterDoneThenForgotten(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New[string](Options{BaseDelay: time.Second})
		defer q.ShutDown()
		q.Add("a")
		k, _ := tryGet(q)
		q.AddRateLimited(k)
		q.Done(k)
		assert.Equal(t, 1, q.NumRequeues("a"), "kept while delayed")
		sleep(time.Second)
		assert.Equal(t, 1, q.NumRequeues("a"), "kept while queued")
		k, _ = tryGet(q)
		assert.Equal(t, 1, q.NumRequeues("a"), "kept while in process")
		q.Done(k) // succeeded, never forgotten
		assert.Equal(t, 1, q.NumRequeues("a"), "kept a while after Done")
		assert.Zero(t, q.Len())
		assert.Zero(t, q.Stats().Delayed)
		sleep(keepFails + DefaultMaxWait/4)
		assert.Equal(t, 0, q.NumRequeues("a"), "forgotten in time")
		assert.Empty(t, q.index)

		// Forget lets go of a key kept for its count at once.
		q.Add("b")
		k, _ = tryGet(q)
		q.AddRateLimited(k)
		q.Done(k)
		sleep(time.Second)
		k, _ = tryGet(q)
		q.Done(k)
		q.Forget("b")
		assert.Equal(t, 0, q.NumRequeues("b"))
		assert.Empty(t, q.index)

		// A retry of a key the queue does not hold counts from zero.
		q.AddRateLimited("c")
		assert.Equal(t, 1, q.NumRequeues("c"))
		sleep(time.Second)
		assert.Equal(t, []string{"c"}, processAll(q))
		assert.Equal(t, 1, q.NumRequeues("c"))
	})
}

// client-go's and controller-runtime's rate limiters remember a failure
// until Forget, so a worker that calls Done before AddRateLimited backs
// off as one that calls them the other way round; ours used to drop the
// count at Done and retry every BaseDelay.
func TestQueue_BackoffSameWhetherDoneBeforeOrAfterAddRateLimited(t *testing.T) {
	// waits fails key "a" n times, calling Done and AddRateLimited in
	// the order given, and returns how long each retry waited.
	waits := func(t *testing.T, doneFirst bool, n int) []time.Duration {
		q := New[string](Options{})
		defer q.ShutDown()
		q.Add("a")
		k, ok := tryGet(q)
		require.True(t, ok)
		var ws []time.Duration
		for range n {
			if doneFirst {
				q.Done(k)
				q.AddRateLimited(k)
			} else {
				q.AddRateLimited(k)
				q.Done(k)
			}
			start := time.Now()
			var err error
			k, err = q.Get(context.Background())
			require.NoError(t, err)
			require.Equal(t, "a", k)
			ws = append(ws, time.Since(start))
		}
		return ws
	}
	synctest.Test(t, func(t *testing.T) {
		before := waits(t, false, 6)
		after := waits(t, true, 6)
		assert.Equal(t, before, after)
		for i := 1; i < len(after); i++ {
			assert.Equal(t, 2*after[i-1], after[i], "retry %d backs off twice as long", i)
		}
	})
}

// The counts Done keeps are bounded by the keys that failed recently: a
// burst of failures is forgotten once the time has passed, and the
// tables shrink.
func TestQueue_RetryCountsKeptAfterDoneAreForgottenAfterABurst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New[int](Options{MaxWait: 8 * time.Second})
		defer q.ShutDown()
		const keys = 10_000
		for i := range keys {
			q.Add(i)
		}
		for range keys {
			k, _ := tryGet(q)
			q.Done(k)
			q.AddRateLimited(k)
		}
		sleep(time.Second)
		for range keys {
			k, _ := tryGet(q)
			q.Done(k) // succeeded, never forgotten
		}
		assert.Len(t, q.index, keys, "every count kept for now")
		q.AddRateLimited(0)
		sleep(keepFails + 8*time.Second/4)
		assert.Equal(t, []int{0}, processAll(q), "the key retried in time")
		assert.Equal(t, 2, q.NumRequeues(0))
		sleep(keepFails + 8*time.Second/4)
		assert.Empty(t, q.index)
		sleep(2 * 8 * time.Second / agingSteps)
		assert.LessOrEqual(t, cap(q.recs), idleRecs, "tables shrunk")
		assert.Zero(t, q.remembered.len())
	})
}

func TestQueue_DelayedKeysDueTogetherQueuedInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New[string](Options{})
		defer q.ShutDown()
		var want []string
		for i := range 50 {
			k := strconv.Itoa(i)
			want = append(want, k)
			q.AddAfter(k, time.Second)
		}
		sleep(time.Second)
		assert.Equal(t, want, processAll(q))
	})
}
