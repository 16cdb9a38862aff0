package workqueue

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// liveStream runs two workers on q for a minute of bubble time: a live
// stream keeps ten live keys queued (each one processed is replaced by a
// new one, so live keys never run out but do not pile up), while a
// background key is added every second for the first 45 s. Work takes
// 50-150 ms a key, varying from key to key. It returns how long each
// background key that was handed out waited, and the longest wait of a
// live key.
func liveStream(t *testing.T, q *Queue[string]) (bgWaits map[string]time.Duration, liveMax time.Duration) {
	var mu sync.Mutex
	added := map[string]time.Time{}
	bgWaits = map[string]time.Duration{}
	add := func(k string, p Priority) {
		mu.Lock()
		added[k] = time.Now()
		mu.Unlock()
		q.AddWithPriority(k, p)
	}
	live := 0
	nextLive := func() string {
		mu.Lock()
		defer mu.Unlock()
		live++
		return fmt.Sprint("live", live)
	}
	for range 10 {
		add(nextLive(), PriorityLive)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for {
				k, err := q.Get(context.Background())
				if errors.Is(err, ErrShutdown) {
					return
				}
				mu.Lock()
				wait := time.Since(added[k])
				if k[0] == 'b' {
					bgWaits[k] = wait
				} else {
					liveMax = max(liveMax, wait)
				}
				work := time.Duration(50+rng.IntN(101)) * time.Millisecond
				mu.Unlock()
				time.Sleep(work)
				if k[0] == 'l' {
					add(nextLive(), PriorityLive)
				}
				q.Done(k)
			}
		})
	}
	for i := range 45 {
		add(fmt.Sprint("bg", i), PriorityBackground)
		time.Sleep(time.Second)
	}
	time.Sleep(15 * time.Second)
	q.ShutDown()
	wg.Wait()
	return bgWaits, liveMax
}

// controller-runtime's priority queue starves low priorities for as long
// as higher ones keep coming (controller-runtime#3496).
func TestQueue_AgingBoundsWaitUnderLiveStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const maxWait = 10 * time.Second
		const maxWork = 150 * time.Millisecond
		bgWaits, liveMax := liveStream(t, New[string](Options{MaxWait: maxWait}))
		assert.Len(t, bgWaits, 45, "every background key was handed out")
		for k, wait := range bgWaits {
			assert.LessOrEqual(t, wait, maxWait+maxWork, k)
			assert.Greater(t, wait, maxWait-maxWait/agingSteps-maxWork, "%s: aged, not served early", k)
		}
		assert.Less(t, liveMax, maxWait/2, "live keys stay ahead")
	})
}

func TestQueue_WithoutAgingLiveStreamStarvesBackground(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bgWaits, _ := liveStream(t, New[string](Options{MaxWait: -1}))
		assert.Empty(t, bgWaits)
	})
}

func TestQueue_AgedKeysGetOneHandOutInFourOldestFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New[string](Options{MaxWait: 8 * time.Second})
		defer q.ShutDown()
		q.AddWithPriority("b1", PriorityBackground)
		sleep(time.Second)
		q.AddWithPriority("r1", PriorityResync)
		sleep(time.Second)
		q.AddWithPriority("b2", PriorityBackground)
		sleep(4 * time.Second)
		q.AddWithPriority("b3", PriorityBackground) // not aged by the Gets
		sleep(4 * time.Second)
		for i := range 4 {
			q.Add(fmt.Sprint("l", i))
		}
		// The oldest aged key, then three by priority, then the oldest
		// aged key again (r1, older than b2), then by priority: l3, and
		// b2 and b3, the highest priority queued once l3 is gone.
		assert.Equal(t, []string{"b1", "l0", "l1", "l2", "r1", "l3", "b2", "b3"}, processAll(q))
	})
}

// Aging used to serve every aged key before any other: behind an initial
// list that took longer than MaxWait to drain, live keys waited for the
// whole aged rest of it, as in client-go's FIFO.
func TestQueue_LiveKeysNotBuriedByAgedBacklog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New[int](Options{MaxWait: 8 * time.Second})
		defer q.ShutDown()
		const backlog = 1000
		for i := range backlog {
			q.AddWithPriority(i, PriorityBackground)
		}
		sleep(9 * time.Second) // all aged
		next, handedOut := 0, 0
		for live := -1; live >= -100; live-- {
			q.Add(live)
			gets := 0
			for {
				k, ok := tryGet(q)
				require.True(t, ok)
				q.Done(k)
				gets++
				handedOut++
				if k == live {
					break
				}
				require.Equal(t, next, k, "the backlog in order")
				next++
			}
			require.LessOrEqual(t, gets, 2, "live key %d waited for at most one aged key", live)
		}
		assert.GreaterOrEqual(t, next, handedOut/agedShare, "aged keys got their share")
		assert.Len(t, processAll(q), backlog-next)
	})
}

// Aging used to serve the oldest aged key first, whatever its priority:
// when the live keys themselves had waited longer than MaxWait, an aged
// background key waited behind every live key older than it.
func TestQueue_AgedBackgroundKeyServedAheadOfOlderLiveBacklog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New[int](Options{MaxWait: 8 * time.Second})
		defer q.ShutDown()
		const live = 100
		for i := range live {
			q.Add(i)
		}
		sleep(time.Second)
		q.AddWithPriority(-1, PriorityBackground)
		sleep(8 * time.Second) // all aged, the live keys the oldest
		gets := 0
		for {
			k, ok := tryGet(q)
			require.True(t, ok)
			gets++
			if k == -1 {
				break
			}
			q.Add(k) // the live stream goes on
			q.Done(k)
		}
		assert.LessOrEqual(t, gets, agedShare)
	})
}

func TestQueue_RaisedKeyKeepsItsAge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New[string](Options{MaxWait: 8 * time.Second})
		defer q.ShutDown()
		q.AddWithPriority("a", PriorityBackground)
		sleep(5 * time.Second)
		for i := range 3 {
			q.Add(fmt.Sprint("l", i))
		}
		q.Add("a") // raised behind the live keys, but 5 s old
		assert.Equal(t, 4, q.Len())
		assert.Equal(t, []PriorityDepth{{PriorityLive, 4}}, q.Stats().Depth)
		sleep(4 * time.Second)
		// a has waited 9 s: aged, and served first; the live keys, 4 s
		// old, follow in order.
		assert.Equal(t, []string{"a", "l0", "l1", "l2"}, processAll(q))
	})
}

// client-go's single FIFO puts a live change behind the whole initial
// list (kubernetes#68179, #74397).
func TestQueue_LiveKeyAheadOfInitialListBacklog(t *testing.T) {
	q := New[int](Options{})
	defer q.ShutDown()
	const backlog = 100_000
	for i := range backlog {
		q.AddWithPriority(i, PriorityBackground)
	}
	q.Add(-1)
	k, ok := tryGet(q)
	require.True(t, ok)
	assert.Equal(t, -1, k)
	q.Done(k)
	keys := processAll(q)
	require.Len(t, keys, backlog)
	for i, k := range keys {
		if k != i {
			t.Fatalf("backlog out of order at %d: %d", i, k)
		}
	}
}

func TestQueue_ManyPrioritiesReleasedWhenEmpty(t *testing.T) {
	q := New[int](Options{})
	defer q.ShutDown()
	for i := range 100 {
		q.AddWithPriority(i, Priority(i))
	}
	keys := processAll(q)
	require.Len(t, keys, 100)
	assert.Equal(t, 99, keys[0])
	assert.LessOrEqual(t, len(q.levels), maxIdleLevels)
}
