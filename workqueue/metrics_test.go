package workqueue

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeMetrics records what a queue reports.
type fakeMetrics struct {
	mu        sync.Mutex
	name      string
	src       StatsSource
	waited    []waitSample
	processed []time.Duration
	stops     int
	none      bool // Queue returns nil
}

type waitSample struct {
	p    Priority
	wait time.Duration
}

func (m *fakeMetrics) Queue(name string, src StatsSource) QueueMetrics {
	m.name, m.src = name, src
	if m.none {
		return nil
	}
	return m
}

func (m *fakeMetrics) Waited(p Priority, wait time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.waited = append(m.waited, waitSample{p, wait})
}

func (m *fakeMetrics) Processed(took time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.processed = append(m.processed, took)
}

func (m *fakeMetrics) Stop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stops++
}

func (m *fakeMetrics) stopped() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.stops > 0
}

func TestQueue_StatsCountKeysByPriorityAndState(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New[string](Options{})
		defer q.ShutDown()
		q.AddWithPriority("r", PriorityResync)
		q.AddWithPriority("b1", PriorityBackground)
		q.AddWithPriority("b2", PriorityBackground)
		q.Add("l")
		q.Add("l") // deduplicated: not an add
		q.AddAfter("d", time.Hour)
		q.AddRateLimited("f")
		k, _ := tryGet(q) // l
		q.AddRateLimited(k)
		assert.Equal(t, Stats{
			Depth: []PriorityDepth{
				{PriorityBackground, 2},
				{PriorityResync, 1},
			},
			Delayed:   3,
			InProcess: 1,
			Adds:      7,
			Retries:   2,
		}, q.Stats())
	})
}

func TestQueue_MetricsSampleWaitAndWorkTimes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &fakeMetrics{}
		q := New[string](Options{Name: "jobs", Metrics: m})
		defer q.ShutDown()
		require.Equal(t, "jobs", m.name)
		require.Same(t, q, m.src)

		q.AddWithPriority("a", PriorityBackground)
		q.Add("b") // queued in the same instant: its wait is not sampled
		sleep(time.Second)
		b, _ := tryGet(q)
		require.Equal(t, "b", b)
		a, _ := tryGet(q)
		sleep(2 * time.Second)
		q.Done(a)
		q.Done(b)
		assert.Equal(t, []waitSample{{PriorityBackground, time.Second}}, m.waited)
		// a's work is timed from its sampled wait on; b's because it was
		// the first key handed out.
		assert.Equal(t, []time.Duration{2 * time.Second, 2 * time.Second}, m.processed)

		// A period later, the same again.
		q.Add("c")
		q.Add("d")
		c, _ := tryGet(q)
		sleep(time.Second)
		d, _ := tryGet(q)
		sleep(time.Second)
		q.Done(c)
		q.Done(d)
		assert.Equal(t, []waitSample{{PriorityBackground, time.Second}, {PriorityLive, 0}}, m.waited)
		assert.Equal(t, []time.Duration{2 * time.Second, 2 * time.Second, 2 * time.Second, time.Second}, m.processed)
	})
}

func TestQueue_StatsLongestRunningAndUnfinishedWork(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New[string](Options{Metrics: &fakeMetrics{}})
		defer q.ShutDown()
		for _, k := range []string{"a", "b", "c"} {
			q.Add(k)
			_, _ = tryGet(q)
			sleep(time.Second)
		}
		s := q.Stats()
		assert.Equal(t, 3*time.Second, s.LongestRunning)
		assert.Equal(t, 6*time.Second, s.UnfinishedWork)
		q.Done("b")
		s = q.Stats()
		assert.Equal(t, 3*time.Second, s.LongestRunning)
		assert.Equal(t, 4*time.Second, s.UnfinishedWork)
		q.Done("a")
		s = q.Stats()
		assert.Equal(t, time.Second, s.LongestRunning)
		assert.Equal(t, time.Second, s.UnfinishedWork)
		q.Done("c")
		s = q.Stats()
		assert.Zero(t, s.LongestRunning)
		assert.Zero(t, s.UnfinishedWork)
	})
}

func TestQueue_StatsStartTimesWithinSamplePeriod(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New[int](Options{Metrics: &fakeMetrics{}})
		defer q.ShutDown()
		// Keys handed out a millisecond apart: most take a start time
		// from a clock read up to samplePeriod earlier.
		for i := range 100 {
			q.Add(i)
			_, _ = tryGet(q)
			sleep(time.Millisecond)
		}
		s := q.Stats()
		assert.InDelta(t, 100*time.Millisecond, s.LongestRunning, float64(samplePeriod))
		exact := time.Duration(100*101/2) * time.Millisecond
		assert.GreaterOrEqual(t, s.UnfinishedWork, exact)
		assert.LessOrEqual(t, s.UnfinishedWork, exact+100*samplePeriod)
	})
}

func TestQueue_MetricsStopAfterShutDownAndLastDone(t *testing.T) {
	m := &fakeMetrics{}
	q := New[string](Options{Metrics: m})
	q.Add("a")
	a, _ := tryGet(q)
	q.ShutDown()
	assert.False(t, m.stopped(), "a is in process")
	q.Done(a)
	assert.True(t, m.stopped())
	q.ShutDown()
	q.Done(a)
	assert.Equal(t, 1, m.stops)
}

// orderMetrics fails the test if Waited or Processed is under way or
// called when Stop is called or after it. Its Processed blocks until
// release is closed, the first time.
type orderMetrics struct {
	t        *testing.T
	mu       sync.Mutex
	inCall   int
	stops    int
	calls    int
	entered  chan struct{}
	release  chan struct{}
	blocking bool
}

func (m *orderMetrics) Queue(string, StatsSource) QueueMetrics { return m }

func (m *orderMetrics) call(block bool) {
	m.mu.Lock()
	assert.Zero(m.t, m.stops, "called after Stop")
	m.inCall++
	m.calls++
	first := block && !m.blocking
	m.blocking = m.blocking || block
	m.mu.Unlock()
	if first {
		close(m.entered)
		<-m.release
	}
	m.mu.Lock()
	m.inCall--
	m.mu.Unlock()
}

func (m *orderMetrics) Waited(Priority, time.Duration) { m.call(false) }
func (m *orderMetrics) Processed(time.Duration)        { m.call(true) }

func (m *orderMetrics) Stop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	assert.Zero(m.t, m.inCall, "Stop while a call is under way")
	m.stops++
}

// Two Dones on a shut-down queue: the first one's Processed, made outside
// the queue's lock, used to come after the last one's Stop.
func TestQueue_MetricsNothingCalledAfterStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &orderMetrics{t: t, entered: make(chan struct{}), release: make(chan struct{})}
		q := New[string](Options{Metrics: m})
		q.Add("a") // sampled: the first key queued
		sleep(samplePeriod)
		q.Add("b") // sampled: a period later
		a, _ := tryGet(q)
		b, _ := tryGet(q)
		q.ShutDown()
		go q.Done(a) // its Processed blocks
		<-m.entered
		q.Done(b)
		synctest.Wait()
		close(m.release)
		synctest.Wait()
		m.mu.Lock()
		defer m.mu.Unlock()
		assert.Equal(t, 4, m.calls, "two Waited, two Processed")
		assert.Equal(t, 1, m.stops, "stopped once, after the last call")
	})
}

func TestQueue_NilQueueMetricsMeasuresNothing(t *testing.T) {
	m := &fakeMetrics{none: true}
	q := New[string](Options{Metrics: m})
	q.Add("a")
	assert.Equal(t, []string{"a"}, processAll(q))
	q.ShutDown()
	assert.Empty(t, m.waited)
	assert.Zero(t, m.stops)
}

func TestPriority_String(t *testing.T) {
	for p, want := range map[Priority]string{
		PriorityLive:       "live",
		PriorityBackground: "background",
		PriorityResync:     "resync",
		7:                  "7",
		-50:                "-50",
	} {
		assert.Equal(t, want, p.String())
	}
}
