package workqueue

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestQueue_ConcurrentRandomOps runs adders and workers on one queue at
// once, each doing random operations (adds at every priority, delays,
// rate-limited retries, forgets, adds of keys in process), and ends each
// round with a drain, a shutdown at a random moment, or both. It checks
// that no key is processed by two workers at once, that no key is lost
// (after a drain, every key added is processed after its last add), and
// that none is stuck (the bubble fails the test if every goroutine
// blocks; the drain must finish).
func TestQueue_ConcurrentRandomOps(t *testing.T) {
	rounds := 90
	if testing.Short() || raceEnabled {
		rounds = 30
	}
	for round := range rounds {
		end := []string{"drain", "shutdown", "both"}[round%3]
		t.Run(fmt.Sprint(end, round), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { stressRound(t, uint64(round), end) })
		})
	}
}

func stressRound(t *testing.T, seed uint64, end string) {
	const (
		keys    = 64
		adders  = 4
		workers = 6
		ops     = 1000
	)
	q := New[int](Options{
		MaxWait:   time.Duration(1+seed%20) * time.Millisecond,
		BaseDelay: time.Millisecond,
		MaxDelay:  20 * time.Millisecond,
		Metrics:   &fakeMetrics{},
	})
	var (
		// added counts the adds that queue a key now; a worker notes the
		// count when it gets the key, in covered, so covered[k] >=
		// added[k] once k was processed after its last add.
		added   [keys]atomic.Int64
		covered [keys]int64 // only the key's worker touches it
		busy    [keys]atomic.Bool
		// Adds that count in added take stop's read lock, so that none
		// slips in once the drain has begun: it would be ignored.
		stop     sync.RWMutex
		stopping bool
	)
	addNow := func(rng *rand.Rand, k int) {
		stop.RLock()
		defer stop.RUnlock()
		if stopping {
			return
		}
		added[k].Add(1)
		switch rng.IntN(3) {
		case 0:
			q.Add(k)
		case 1:
			q.AddWithPriority(k, modelPriorities[rng.IntN(len(modelPriorities))])
		case 2:
			q.AddAfter(k, 0)
		}
	}
	other := func(rng *rand.Rand, k int) {
		switch rng.IntN(6) {
		case 0:
			q.AddAfter(k, time.Duration(1+rng.IntN(5000))*time.Microsecond)
		case 1:
			q.AddRateLimited(k)
		case 2:
			q.Forget(k)
		case 3:
			_ = q.NumRequeues(k)
		case 4:
			_ = q.Stats()
		case 5:
			_ = q.Len()
		}
	}

	var wg sync.WaitGroup
	for w := range workers {
		rng := rand.New(rand.NewPCG(seed, uint64(100+w)))
		wg.Go(func() {
			for {
				k, err := q.Get(context.Background())
				if errors.Is(err, ErrShutdown) {
					return
				}
				if !assert.NoError(t, err) {
					return
				}
				if !busy[k].CompareAndSwap(false, true) {
					t.Errorf("key %d handed to two workers", k)
				}
				covered[k] = added[k].Load()
				time.Sleep(time.Duration(rng.IntN(300)) * time.Microsecond)
				switch rng.IntN(4) {
				case 0:
					addNow(rng, k) // to be processed again after Done
				case 1:
					other(rng, k)
				}
				busy[k].Store(false)
				q.Done(k)
			}
		})
	}
	var adding sync.WaitGroup
	for a := range adders {
		rng := rand.New(rand.NewPCG(seed, uint64(a)))
		adding.Go(func() {
			for range ops {
				k := rng.IntN(keys)
				if rng.IntN(2) == 0 {
					addNow(rng, k)
				} else {
					other(rng, k)
				}
				if rng.IntN(4) == 0 {
					time.Sleep(time.Duration(rng.IntN(200)) * time.Microsecond)
				}
			}
		})
	}

	rng := rand.New(rand.NewPCG(seed, 999))
	if end != "drain" {
		wg.Go(func() {
			time.Sleep(time.Duration(rng.IntN(30_000)) * time.Microsecond)
			q.ShutDown()
		})
	}
	adding.Wait()
	stop.Lock()
	stopping = true
	stop.Unlock()
	if end != "shutdown" {
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		err := q.ShutDownWithDrain(ctx)
		if end == "drain" {
			require.NoError(t, err, "the drain finished")
		} else if err != nil {
			require.ErrorIs(t, err, ErrShutdown, "cut short by ShutDown")
		}
		if err == nil {
			for k := range keys {
				assert.GreaterOrEqual(t, covered[k], added[k].Load(), "key %d processed after its last add", k)
			}
		}
	}
	wg.Wait()
	q.ShutDown()
	s := q.Stats()
	assert.Equal(t, Stats{Adds: s.Adds, Retries: s.Retries}, s, "nothing left")
	assert.Empty(t, q.index)
}
