package workqueue

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// controller-runtime's priority queue panics on a second ShutDown.
func TestQueue_ShutDownIsIdempotent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New[string](Options{})
		q.Add("a")
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(q.ShutDown)
		}
		wg.Wait()
		q.ShutDown()
		assert.ErrorIs(t, q.ShutDownWithDrain(context.Background()), ErrShutdown, "a was dropped")
	})
}

func TestQueue_ShutDownStopsHandingOutAtOnce(t *testing.T) {
	q := New[string](Options{})
	q.Add("a")
	q.AddAfter("b", time.Hour)
	q.ShutDown()
	_, err := q.Get(context.Background())
	assert.ErrorIs(t, err, ErrShutdown)
	assert.Equal(t, 0, q.Len())
	assert.Equal(t, Stats{Adds: 2}, q.Stats())

	q.Add("c")
	q.AddWithPriority("c", 1)
	q.AddAfter("c", time.Second)
	q.AddRateLimited("c")
	assert.Equal(t, 0, q.Len(), "adds after shutdown are ignored")
	assert.Equal(t, 0, q.NumRequeues("c"))
	assert.Empty(t, q.index)
}

func TestQueue_ShutDownWakesWaitingGets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New[string](Options{})
		errs := make(chan error)
		for range 3 {
			go func() {
				_, err := q.Get(context.Background())
				errs <- err
			}()
		}
		synctest.Wait()
		q.ShutDown()
		for range 3 {
			assert.ErrorIs(t, <-errs, ErrShutdown)
		}
	})
}

func TestQueue_KeyInProcessAtShutDownDroppedAtDone(t *testing.T) {
	q := New[string](Options{})
	q.Add("a")
	k, _ := tryGet(q)
	q.Add(k) // to be queued again at Done...
	q.ShutDown()
	assert.Equal(t, 1, q.Stats().InProcess)
	q.Done(k) // ...but the queue is shut down
	assert.Equal(t, Stats{Adds: 2}, q.Stats())
	assert.Empty(t, q.index)
}

// client-go's ShutDownWithDrain returns while keys are still queued
// (kubernetes#141079).
func TestQueue_DrainWaitsForQueuedAndInProcessKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New[string](Options{})
		q.Add("x")
		x, _ := tryGet(q)
		q.Add("a")
		q.Add("b")
		drained := make(chan error, 1)
		go func() { drained <- q.ShutDownWithDrain(context.Background()) }()
		returned := func() bool {
			synctest.Wait()
			return len(drained) > 0
		}
		require.False(t, returned())
		k, err := q.Get(context.Background())
		require.NoError(t, err)
		assert.Equal(t, "a", k)
		q.Done(k)
		require.False(t, returned(), "b is queued, x in process")
		q.Done(x)
		require.False(t, returned(), "b is queued")
		k, err = q.Get(context.Background())
		require.NoError(t, err)
		assert.Equal(t, "b", k)
		require.False(t, returned(), "b is in process")
		q.Done(k)
		assert.NoError(t, <-drained)
		_, err = q.Get(context.Background())
		assert.ErrorIs(t, err, ErrShutdown)
	})
}

func TestQueue_DrainHandsOutKeyAddedWhileInProcess(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New[string](Options{})
		q.Add("x")
		x, _ := tryGet(q)
		q.Add(x) // before the drain: to be processed again
		drained := make(chan error, 1)
		go func() { drained <- q.ShutDownWithDrain(context.Background()) }()
		synctest.Wait()
		q.Add("y") // during the drain: ignored
		got := make(chan string)
		go func() {
			// Nothing is queued, but x will be at its Done: Get waits
			// for it rather than return ErrShutdown.
			k, err := q.Get(context.Background())
			assert.NoError(t, err)
			got <- k
			_, err = q.Get(context.Background())
			assert.ErrorIs(t, err, ErrShutdown)
			close(got)
		}()
		synctest.Wait()
		q.Done(x)
		assert.Equal(t, "x", <-got)
		q.Done(x)
		_, open := <-got
		assert.False(t, open)
		assert.NoError(t, <-drained)
	})
}

func TestQueue_DrainDropsDelayedKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New[string](Options{})
		q.AddAfter("later", time.Hour)
		q.Add("a")
		k, _ := tryGet(q)
		q.AddRateLimited(k)
		drained := make(chan error, 1)
		go func() { drained <- q.ShutDownWithDrain(context.Background()) }()
		synctest.Wait()
		assert.Equal(t, 0, q.Stats().Delayed)
		q.Done(k)
		assert.NoError(t, <-drained)
		assert.Empty(t, q.index)
	})
}

func TestQueue_DrainShutsDownWhenContextEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New[string](Options{})
		q.Add("a")
		q.Add("b")
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		assert.ErrorIs(t, q.ShutDownWithDrain(ctx), context.DeadlineExceeded)
		_, err := q.Get(context.Background())
		assert.ErrorIs(t, err, ErrShutdown, "shut down: nothing more handed out")
	})
}

func TestQueue_ShutDownCutsDrainShort(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New[string](Options{})
		q.Add("x")
		x, _ := tryGet(q)
		q.Add("a")
		drained := make(chan error, 1)
		go func() { drained <- q.ShutDownWithDrain(context.Background()) }()
		synctest.Wait()
		q.ShutDown()
		synctest.Wait()
		assert.Empty(t, drained, "x is still in process")
		q.Done(x)
		assert.ErrorIs(t, <-drained, ErrShutdown, "a was dropped")
	})
}

func TestQueue_DrainOfEmptyQueueReturnsAtOnce(t *testing.T) {
	q := New[string](Options{})
	require.NoError(t, q.ShutDownWithDrain(context.Background()))
	require.NoError(t, q.ShutDownWithDrain(context.Background()), "again")
	q.ShutDown()
	_, err := q.Get(context.Background())
	assert.ErrorIs(t, err, ErrShutdown)
}

// The bubble fails the test if a goroutine is left blocked; the timers
// are checked to be stopped, so that none fires into a queue shut down.
func TestQueue_NothingOutlivesShutDown(t *testing.T) {
	for _, drain := range []bool{false, true} {
		t.Run(map[bool]string{false: "ShutDown", true: "ShutDownWithDrain"}[drain], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := &fakeMetrics{}
				q := New[int](Options{MaxWait: time.Second, Metrics: m})
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				var wg sync.WaitGroup
				for range 4 {
					wg.Go(func() {
						for {
							k, err := q.Get(ctx) // a context that can end: Get registers on it
							if errors.Is(err, ErrShutdown) {
								return
							}
							time.Sleep(time.Duration(1+k%7) * time.Millisecond)
							if k%3 == 0 && q.NumRequeues(k) == 0 {
								q.AddRateLimited(k)
							}
							q.Done(k)
						}
					})
				}
				for i := range 100 {
					q.AddWithPriority(i, Priority(i%3))
					q.AddAfter(1000+i, time.Duration(i)*time.Millisecond)
				}
				time.Sleep(50 * time.Millisecond)
				if drain {
					require.NoError(t, q.ShutDownWithDrain(context.Background()))
				} else {
					q.ShutDown()
				}
				wg.Wait()
				for _, timer := range []*time.Timer{q.tickTimer, q.delayTimer, q.sampleTimer} {
					require.NotNil(t, timer)
					assert.False(t, timer.Stop(), "timer still set")
				}
				assert.True(t, m.stopped())
			})
		})
	}
}
