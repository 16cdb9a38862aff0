package mirrorprom_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/workqueue"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// take takes the next key, which the test knows is queued.
func take(t *testing.T, q *workqueue.Queue[string]) string {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // a queued key is handed out at once; none is an error
	key, err := q.Get(ctx)
	require.NoError(t, err)
	return key
}

// Each metric moves as a real queue works on fake time: keys queued at
// each priority, one delayed, two handed out and done, a retry; and the
// series go once the queue is shut down and its last key is done, not
// before. The keys are queued a second apart, so that the queue samples
// each one, and the waits and work durations are exact.
func TestQueueMetrics_EachMetricMovesAsTheQueueWorks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, registry := newMetrics(t)
		q := workqueue.New[string](workqueue.Options{Name: "orders", Metrics: m})
		defer q.ShutDown()
		scrapeNow := func() scrape { return scrapeHandler(t, registry) }
		get := func(s scrape, metric string, labels ...string) float64 {
			t.Helper()
			return s.get(t, metric, append([]string{"name", "orders"}, labels...)...)
		}
		const own = workqueue.Priority(7) // a caller's own priority, above live

		// Made: the series are there, at zero.
		s := scrapeNow()
		for _, p := range []string{"live", "background", "resync"} {
			assert.Zero(t, get(s, "mirror_workqueue_depth", "priority", p), p)
		}
		assert.False(t, s.has("mirror_workqueue_depth", "name", "orders", "priority", "7"), "no key at 7 yet")
		for _, name := range []string{
			"mirror_workqueue_delayed", "mirror_workqueue_in_process", "mirror_workqueue_adds_total",
			"mirror_workqueue_retries_total", "mirror_workqueue_longest_running_seconds", "mirror_workqueue_unfinished_work_seconds",
		} {
			assert.Zero(t, get(s, name), name)
		}

		// Queued at each priority, and one delayed.
		q.AddWithPriority("b", workqueue.PriorityBackground)
		time.Sleep(time.Second)
		q.AddWithPriority("r", workqueue.PriorityResync)
		time.Sleep(time.Second)
		q.Add("l")
		q.Add("l") // the same key: not an add
		time.Sleep(time.Second)
		q.AddWithPriority("u", own)
		q.AddAfter("d", time.Hour)
		time.Sleep(time.Second)
		s = scrapeNow()
		for p, want := range map[string]float64{"live": 1, "background": 1, "resync": 1, "7": 1} {
			assert.Equal(t, want, get(s, "mirror_workqueue_depth", "priority", p), p)
		}
		assert.Equal(t, 1.0, get(s, "mirror_workqueue_delayed"))
		assert.Equal(t, 5.0, get(s, "mirror_workqueue_adds_total"))
		assert.Zero(t, get(s, "mirror_workqueue_in_process"))

		// Two keys handed out, highest priority first: u waited 1 s, l 2 s.
		require.Equal(t, "u", take(t, q))
		require.Equal(t, "l", take(t, q))
		time.Sleep(3 * time.Second)
		s = scrapeNow()
		assert.Equal(t, 2.0, get(s, "mirror_workqueue_in_process"))
		assert.Equal(t, 3.0, get(s, "mirror_workqueue_longest_running_seconds"))
		assert.Equal(t, 6.0, get(s, "mirror_workqueue_unfinished_work_seconds"), "two keys 3 s each")
		assert.Zero(t, get(s, "mirror_workqueue_depth", "priority", "live"))
		assert.Zero(t, get(s, "mirror_workqueue_depth", "priority", "7"), "a priority seen keeps its series")
		assert.Equal(t, 1.0, get(s, "mirror_workqueue_wait_duration_seconds_count", "priority", "7"))
		assert.Equal(t, 1.0, get(s, "mirror_workqueue_wait_duration_seconds_sum", "priority", "7"))
		assert.Equal(t, 1.0, get(s, "mirror_workqueue_wait_duration_seconds_count", "priority", "live"))
		assert.Equal(t, 2.0, get(s, "mirror_workqueue_wait_duration_seconds_sum", "priority", "live"))
		assert.False(t, s.has("mirror_workqueue_wait_duration_seconds_count", "name", "orders", "priority", "background"), "none handed out yet")

		// Done, after 3 s and 4 s; a retry of a key the queue did not hold.
		q.Done("u")
		time.Sleep(time.Second)
		q.Done("l")
		q.AddRateLimited("f")
		s = scrapeNow()
		assert.Zero(t, get(s, "mirror_workqueue_in_process"))
		assert.Zero(t, get(s, "mirror_workqueue_longest_running_seconds"))
		assert.Zero(t, get(s, "mirror_workqueue_unfinished_work_seconds"))
		assert.Equal(t, 2.0, get(s, "mirror_workqueue_work_duration_seconds_count"))
		assert.Equal(t, 7.0, get(s, "mirror_workqueue_work_duration_seconds_sum"))
		assert.Equal(t, 1.0, get(s, "mirror_workqueue_retries_total"))
		assert.Equal(t, 6.0, get(s, "mirror_workqueue_adds_total"))
		assert.Equal(t, 2.0, get(s, "mirror_workqueue_delayed"), "d and f")

		// Shut down with a key in process: the series stay until its Done.
		require.Equal(t, "b", take(t, q))
		q.ShutDown()
		s = scrapeNow()
		assert.Equal(t, 1.0, get(s, "mirror_workqueue_in_process"))
		assert.Zero(t, get(s, "mirror_workqueue_depth", "priority", "resync"), "dropped")
		assert.Zero(t, get(s, "mirror_workqueue_delayed"), "dropped")
		q.Done("b")
		assert.Empty(t, scrapeNow().values, "every series was the queue's")
	})
}

// statsSource is a workqueue.StatsSource whose stats a test sets.
type statsSource struct {
	mu sync.Mutex
	st workqueue.Stats
}

func (s *statsSource) Stats() workqueue.Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st
}

func (s *statsSource) set(st workqueue.Stats) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st = st
}

// Every counter and gauge is read from Stats at the scrape, each field
// under its own series and type; a priority of the caller's own keeps its
// series, at 0, once its keys are gone.
func TestQueueMetrics_SeriesSayWhatStatsSay(t *testing.T) {
	m, registry := newMetrics(t)
	src := &statsSource{}
	src.set(workqueue.Stats{
		Depth: []workqueue.PriorityDepth{
			{Priority: 10, Keys: 2},
			{Priority: workqueue.PriorityLive, Keys: 40},
			{Priority: -50, Keys: 3},
			{Priority: workqueue.PriorityResync, Keys: 9000},
		},
		Delayed:        17,
		InProcess:      4,
		Adds:           123456,
		Retries:        321,
		LongestRunning: 90 * time.Second,
		UnfinishedWork: 150 * time.Second,
	})
	qm := m.Queue("orders", src)
	defer qm.Stop()

	s := scrapeHandler(t, registry)
	for _, tc := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"mirror_workqueue_depth", []string{"priority", "10"}, 2},
		{"mirror_workqueue_depth", []string{"priority", "live"}, 40},
		{"mirror_workqueue_depth", []string{"priority", "background"}, 0},
		{"mirror_workqueue_depth", []string{"priority", "-50"}, 3},
		{"mirror_workqueue_depth", []string{"priority", "resync"}, 9000},
		{"mirror_workqueue_delayed", nil, 17},
		{"mirror_workqueue_in_process", nil, 4},
		{"mirror_workqueue_adds_total", nil, 123456},
		{"mirror_workqueue_retries_total", nil, 321},
		{"mirror_workqueue_longest_running_seconds", nil, 90},
		{"mirror_workqueue_unfinished_work_seconds", nil, 150},
	} {
		labels := append([]string{"name", "orders"}, tc.labels...)
		assert.Equal(t, tc.want, s.get(t, tc.name, labels...), key(tc.name, labels...))
	}
	for name, typ := range readmeMetrics(t) {
		if _, ok := s.types[name]; ok {
			assert.Equal(t, typ, s.types[name], "%s: the README's type", name)
		}
	}

	src.set(workqueue.Stats{Depth: []workqueue.PriorityDepth{{Priority: 10, Keys: 1}}})
	s = scrapeHandler(t, registry)
	assert.Equal(t, 1.0, s.get(t, "mirror_workqueue_depth", "name", "orders", "priority", "10"))
	assert.Zero(t, s.get(t, "mirror_workqueue_depth", "name", "orders", "priority", "-50"), "seen before: at 0, not gone")
	assert.Zero(t, s.get(t, "mirror_workqueue_depth", "name", "orders", "priority", "live"))
}

// The histograms take what the queue pushes, the waits by priority; their
// buckets reach past the default aging bound, so that a key that waited
// longer than that shows.
func TestQueueMetrics_HistogramsTakeWhatTheQueuePushes(t *testing.T) {
	m, registry := newMetrics(t)
	qm := m.Queue("orders", &statsSource{})
	defer qm.Stop()
	qm.Waited(workqueue.PriorityLive, 2*time.Millisecond)
	qm.Waited(workqueue.PriorityLive, 3*time.Millisecond)
	qm.Waited(workqueue.PriorityBackground, workqueue.DefaultMaxWait+15*time.Second)
	qm.Waited(-50, time.Second)
	qm.Processed(250 * time.Millisecond)

	s := scrapeHandler(t, registry)
	for _, tc := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"mirror_workqueue_wait_duration_seconds_count", []string{"priority", "live"}, 2},
		{"mirror_workqueue_wait_duration_seconds_sum", []string{"priority", "live"}, 0.005},
		{"mirror_workqueue_wait_duration_seconds_count", []string{"priority", "background"}, 1},
		{"mirror_workqueue_wait_duration_seconds_sum", []string{"priority", "background"}, 45},
		{"mirror_workqueue_wait_duration_seconds_count", []string{"priority", "-50"}, 1},
		{"mirror_workqueue_work_duration_seconds_count", nil, 1},
		{"mirror_workqueue_work_duration_seconds_sum", nil, 0.25},
	} {
		labels := append([]string{"name", "orders"}, tc.labels...)
		assert.InDelta(t, tc.want, s.get(t, tc.name, labels...), 1e-9, key(tc.name, labels...))
	}

	families, err := registry.Gather()
	require.NoError(t, err)
	var checked bool
	for _, f := range families {
		if f.GetName() != "mirror_workqueue_wait_duration_seconds" {
			continue
		}
		for _, series := range f.GetMetric() {
			if !matchesLabels(series.GetLabel(), "priority", "background") {
				continue
			}
			cumulative := map[float64]uint64{}
			for _, b := range series.GetHistogram().GetBucket() {
				cumulative[b.GetUpperBound()] = b.GetCumulativeCount()
			}
			bound := workqueue.DefaultMaxWait.Seconds()
			require.Contains(t, cumulative, bound, "a bucket at the default aging bound")
			assert.Zero(t, cumulative[bound], "45 s is past the bound")
			assert.Equal(t, uint64(1), cumulative[60])
			checked = true
		}
	}
	assert.True(t, checked, "the background series was gathered")
}

// matchesLabels reports whether labels hold name=value.
func matchesLabels(labels []*dto.LabelPair, name, value string) bool {
	for _, l := range labels {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

// Queues that share a name share its series, added up, the longest
// running the longest of theirs; when one stops the other's stay. An
// informer of the same name keeps its series when the queues stop, and
// the other way round.
func TestQueueMetrics_QueuesSharingANameAreAddedUpAndStopApart(t *testing.T) {
	m, registry := newMetrics(t)
	a := m.Queue("jobs", &statsSource{st: workqueue.Stats{
		Depth: []workqueue.PriorityDepth{{Priority: workqueue.PriorityLive, Keys: 2}},
		Adds:  10, Retries: 1, InProcess: 1,
		LongestRunning: 5 * time.Second, UnfinishedWork: 5 * time.Second,
	}})
	b := m.Queue("jobs", &statsSource{st: workqueue.Stats{
		Depth: []workqueue.PriorityDepth{
			{Priority: workqueue.PriorityLive, Keys: 1},
			{Priority: workqueue.PriorityBackground, Keys: 4},
		},
		Adds: 20, Delayed: 3, InProcess: 2,
		LongestRunning: 8 * time.Second, UnfinishedWork: 9 * time.Second,
	}})
	inf := m.Informer("jobs", fixed(mirror.InformerStats{Objects: 6}))
	a.Waited(workqueue.PriorityLive, time.Millisecond)
	b.Waited(workqueue.PriorityLive, time.Millisecond)
	a.Processed(time.Millisecond)
	inf.Applied(time.Millisecond)

	s := scrapeHandler(t, registry)
	get := func(metric string, labels ...string) float64 {
		t.Helper()
		return s.get(t, metric, append([]string{"name", "jobs"}, labels...)...)
	}
	assert.Equal(t, 3.0, get("mirror_workqueue_depth", "priority", "live"))
	assert.Equal(t, 4.0, get("mirror_workqueue_depth", "priority", "background"))
	assert.Equal(t, 30.0, get("mirror_workqueue_adds_total"))
	assert.Equal(t, 1.0, get("mirror_workqueue_retries_total"))
	assert.Equal(t, 3.0, get("mirror_workqueue_delayed"))
	assert.Equal(t, 3.0, get("mirror_workqueue_in_process"))
	assert.Equal(t, 8.0, get("mirror_workqueue_longest_running_seconds"))
	assert.Equal(t, 14.0, get("mirror_workqueue_unfinished_work_seconds"))
	assert.Equal(t, 2.0, get("mirror_workqueue_wait_duration_seconds_count", "priority", "live"))

	a.Stop()
	a.Stop() // a second Stop does nothing
	s = scrapeHandler(t, registry)
	assert.Equal(t, 1.0, get("mirror_workqueue_depth", "priority", "live"), "b's alone")
	assert.Equal(t, 20.0, get("mirror_workqueue_adds_total"))
	assert.Equal(t, 2.0, get("mirror_workqueue_wait_duration_seconds_count", "priority", "live"), "the samples of both")

	b.Stop()
	s = scrapeHandler(t, registry)
	for k := range s.values {
		assert.NotContains(t, k, "mirror_workqueue_", "no queue runs")
	}
	assert.Equal(t, 6.0, get("mirror_cache_objects"), "the informer's series stay")
	assert.Equal(t, 1.0, get("mirror_apply_latency_seconds_count"))

	c := m.Queue("jobs", &statsSource{st: workqueue.Stats{Adds: 1}})
	defer c.Stop()
	c.Processed(time.Millisecond)
	inf.Stop()
	s = scrapeHandler(t, registry)
	assert.Equal(t, 1.0, get("mirror_workqueue_adds_total"))
	assert.Equal(t, 1.0, get("mirror_workqueue_work_duration_seconds_count"), "the informer's Stop leaves the queue's histograms")
	assert.False(t, s.has("mirror_cache_objects", "name", "jobs"))
}

// Scrapes while workers add, take and finish keys, and while the queue
// drains and stops, neither block the queue nor race with it (-race), and
// a scrape once the work is done counts every add and retry.
func TestQueueMetrics_ScrapesRaceWithWorkersAndTheStop(t *testing.T) {
	m, registry := newMetrics(t)
	q := workqueue.New[int](workqueue.Options{Name: "busy", Metrics: m})
	const keys, workers = 2000, 4
	const retries = (keys + 6) / 7 // the keys k%7 == 0 each retry a key of their own
	processed := make(chan int, keys+retries)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				k, err := q.Get(context.Background())
				if err != nil {
					return // drained
				}
				if k%7 == 0 && k < keys {
					q.AddRateLimited(k + keys)
				}
				q.Done(k)
				processed <- k
			}
		})
	}
	stop := make(chan struct{})
	scrapeErr := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				scrapeErr <- nil
				return
			default:
				if _, err := registry.Gather(); err != nil {
					scrapeErr <- err
					return
				}
			}
		}
	}()
	for k := range keys {
		q.AddWithPriority(k, workqueue.Priority(k%3-1))
	}
	for range keys + retries {
		<-processed
	}
	s := scrapeHandler(t, registry)
	assert.Equal(t, float64(keys+retries), s.get(t, "mirror_workqueue_adds_total", "name", "busy"))
	assert.Equal(t, float64(retries), s.get(t, "mirror_workqueue_retries_total", "name", "busy"))
	require.NoError(t, q.ShutDownWithDrain(context.Background()))
	wg.Wait()
	close(stop)
	require.NoError(t, <-scrapeErr)
	assert.Empty(t, scrapeHandler(t, registry).values, "the queue stopped")
}
