package workqueue

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// endedCtx is a context that has ended: Get with it returns a queued key
// or, if there is none, at once with context.Canceled.
var endedCtx = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// tryGet returns a queued key without blocking.
func tryGet[K comparable](q *Queue[K]) (K, bool) {
	k, err := q.Get(endedCtx)
	return k, err == nil
}

// processAll hands out and finishes the queued keys, one at a time, and
// returns them in the order they were handed out.
func processAll[K comparable](q *Queue[K]) []K {
	var keys []K
	for {
		k, ok := tryGet(q)
		if !ok {
			return keys
		}
		keys = append(keys, k)
		q.Done(k)
	}
}

func TestQueue_AddDeduplicatesQueuedKey(t *testing.T) {
	q := New[string](Options{})
	defer q.ShutDown()
	q.Add("a")
	q.Add("b")
	q.Add("a")
	assert.Equal(t, 2, q.Len())
	assert.Equal(t, []string{"a", "b"}, processAll(q))
}

func TestQueue_HigherPriorityFirstFIFOWithin(t *testing.T) {
	q := New[string](Options{})
	defer q.ShutDown()
	q.AddWithPriority("resync1", PriorityResync)
	q.AddWithPriority("bg1", PriorityBackground)
	q.Add("live1")
	q.AddWithPriority("bg2", PriorityBackground)
	q.AddWithPriority("custom", 7)
	q.Add("live2")
	q.AddWithPriority("resync2", PriorityResync)
	assert.Equal(t, []string{"custom", "live1", "live2", "bg1", "bg2", "resync1", "resync2"}, processAll(q))
}

func TestQueue_ReAddRaisesPriorityNeverLowers(t *testing.T) {
	q := New[string](Options{})
	defer q.ShutDown()
	for _, k := range []string{"a", "b", "c"} {
		q.AddWithPriority(k, PriorityBackground)
	}
	q.Add("live")
	q.Add("c")                                 // raised: behind the live key queued before
	q.AddWithPriority("a", PriorityResync)     // not lowered
	q.AddWithPriority("b", PriorityBackground) // unchanged: keeps its place
	assert.Equal(t, 4, q.Len())
	assert.Equal(t, []string{"live", "c", "a", "b"}, processAll(q))
	assert.Equal(t, []PriorityDepth(nil), q.Stats().Depth)
}

func TestQueue_KeyInProcessQueuedAgainOnlyAtDone(t *testing.T) {
	q := New[string](Options{})
	defer q.ShutDown()
	q.Add("a")
	k, ok := tryGet(q)
	require.True(t, ok)
	require.Equal(t, "a", k)

	q.Add("a")
	q.Add("b")
	assert.Equal(t, 1, q.Len(), "a is in process: not queued again yet")
	k, ok = tryGet(q)
	require.True(t, ok)
	assert.Equal(t, "b", k, "a is not handed to a second worker")
	_, ok = tryGet(q)
	assert.False(t, ok)

	q.Done("a")
	assert.Equal(t, 1, q.Len())
	k, ok = tryGet(q)
	require.True(t, ok)
	assert.Equal(t, "a", k)
	q.Done("a")
	q.Done("b")
	assert.Equal(t, 0, q.Len())
	assert.Equal(t, 0, len(q.index), "the queue let go of every key")
}

func TestQueue_KeyInProcessQueuedAtHighestPriorityAsked(t *testing.T) {
	for _, tc := range []struct {
		name  string
		adds  []Priority
		order []string
	}{
		{"raised", []Priority{PriorityResync, PriorityLive, PriorityBackground}, []string{"live", "a", "bg"}},
		{"background only", []Priority{PriorityBackground}, []string{"live", "bg", "a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := New[string](Options{})
			defer q.ShutDown()
			q.Add("a") // handed out at live...
			_, _ = tryGet(q)
			for _, p := range tc.adds { // ...and added again at these
				q.AddWithPriority("a", p)
			}
			q.Add("live")
			q.AddWithPriority("bg", PriorityBackground)
			q.Done("a")
			assert.Equal(t, tc.order, processAll(q))
		})
	}
}

func TestQueue_DoneOfKeyNotInProcessDoesNothing(t *testing.T) {
	q := New[string](Options{})
	defer q.ShutDown()
	q.Done("nothing")
	q.Add("a")
	q.Done("a") // queued, not in process
	assert.Equal(t, 1, q.Len())
	assert.Equal(t, []string{"a"}, processAll(q))
	q.Done("a") // done twice
	assert.Equal(t, 0, q.Len())
}

func TestQueue_GetBlocksUntilKeyQueued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New[string](Options{})
		defer q.ShutDown()
		got := make(chan string)
		go func() {
			k, err := q.Get(context.Background())
			assert.NoError(t, err)
			got <- k
		}()
		synctest.Wait()
		select {
		case k := <-got:
			t.Fatalf("Get returned %q from an empty queue", k)
		default:
		}
		q.Add("a")
		assert.Equal(t, "a", <-got)
	})
}

func TestQueue_GetReturnsWhenContextEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New[string](Options{})
		defer q.ShutDown()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := q.Get(ctx)
		assert.ErrorIs(t, err, context.DeadlineExceeded)

		// A key queued after that is still handed out.
		q.Add("a")
		k, err := q.Get(context.Background())
		require.NoError(t, err)
		assert.Equal(t, "a", k)
	})
}

func TestQueue_ManyWaitingGetsEachGetOneKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New[int](Options{})
		defer q.ShutDown()
		const workers = 8
		got := make(chan int, workers)
		for range workers {
			go func() {
				k, err := q.Get(context.Background())
				assert.NoError(t, err)
				got <- k
			}()
		}
		synctest.Wait()
		for i := range workers {
			q.Add(i)
		}
		seen := map[int]bool{}
		for range workers {
			seen[<-got] = true
		}
		assert.Len(t, seen, workers)
	})
}
