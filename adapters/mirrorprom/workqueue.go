package mirrorprom

import (
	"slices"
	"time"

	"github.com/listwatch/mirror/workqueue"
	"github.com/prometheus/client_golang/prometheus"
)

// queueBuckets are the buckets of the workqueue's time in queue and work
// duration, in seconds. client-go's workqueue metrics use the powers of
// ten from 10 ns to 1 s; ours start at 1 µs, as a sampled key's wait is
// measured across a worker's wake-up, which takes about that long, and go
// past 10 s to 30 s, 60 s and 300 s: the aging bound (Options.MaxWait)
// defaults to 30 s, so that a wait beyond it shows, and reconciles that
// call remote systems can take minutes.
var queueBuckets = []float64{1e-6, 1e-5, 1e-4, 1e-3, 0.01, 0.1, 1, 10, 30, 60, 300}

// namedPriorities are the priorities whose depth has a series from the
// start: those an informer's notifications map to.
var namedPriorities = []workqueue.Priority{workqueue.PriorityLive, workqueue.PriorityBackground, workqueue.PriorityResync}

// queueCollector holds the workqueues' metrics: the counters and gauges
// are made at each Collect from the queues' Stats, the histograms are
// vectors the queues observe into.
type queueCollector struct {
	depth, delayed, inProcess, adds, retries *prometheus.Desc
	longestRunning, unfinishedWork           *prometheus.Desc

	wait, work *prometheus.HistogramVec
}

func newQueueCollector() queueCollector {
	desc := func(fqName, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(fqName, help, append([]string{"name"}, labels...), nil)
	}
	histogram := func(fqName, help string, labels ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: fqName, Help: help, Buckets: queueBuckets},
			append([]string{"name"}, labels...))
	}
	return queueCollector{
		depth: desc("mirror_workqueue_depth",
			"Keys queued in the workqueue, waiting for a worker, by priority: live, background (initial list, relist), resync, or the number of a caller's own.", "priority"),
		delayed: desc("mirror_workqueue_delayed",
			"Keys waiting out a delay (AddAfter, AddRateLimited) before they are queued."),
		inProcess: desc("mirror_workqueue_in_process",
			"Keys handed to a worker and not yet Done."),
		adds: desc("mirror_workqueue_adds_total",
			"Keys the workqueue took: adds of a key it did not already hold queued or delayed, nor mark to be queued again at Done."),
		retries: desc("mirror_workqueue_retries_total",
			"Calls of AddRateLimited: retries after a per-key backoff."),
		longestRunning: desc("mirror_workqueue_longest_running_seconds",
			"Seconds the key longest in process has been in process, to within 10 ms; 0 when none is."),
		unfinishedWork: desc("mirror_workqueue_unfinished_work_seconds",
			"Seconds the keys in process have been in process, added up, to within 10 ms: work not yet in mirror_workqueue_work_duration_seconds. A steady rise means stuck workers."),
		wait: histogram("mirror_workqueue_wait_duration_seconds",
			"Seconds a key waited queued, from being queued to a worker taking it, by the priority it was taken at, for a sample of the keys (about one per 10 ms).", "priority"),
		work: histogram("mirror_workqueue_work_duration_seconds",
			"Seconds from a worker taking a key to its Done, for a sample of the keys (about two per 10 ms)."),
	}
}

func (c *queueCollector) constDescs() []*prometheus.Desc {
	return []*prometheus.Desc{c.depth, c.delayed, c.inProcess, c.adds, c.retries, c.longestRunning, c.unfinishedWork}
}

func (c *queueCollector) histograms() []*prometheus.HistogramVec {
	return []*prometheus.HistogramVec{c.wait, c.work}
}

// Queue starts the series of the workqueue named name (Options.Name);
// workqueue.New calls it. Its counters and gauges are read through src at
// every scrape until the returned QueueMetrics is stopped, which the
// queue does once it is shut down and no key is in process; that removes
// the queue's series, unless another running queue has its name. A queue
// never shut down keeps its series, and m keeps it reachable: shut down
// the queues a program is done with.
//
// Queues should have distinct names: the series of queues that share a
// name are merged, their counts added up, their longest running time the
// longest of theirs.
func (m *Metrics) Queue(name string, src workqueue.StatsSource) workqueue.QueueMetrics {
	qm := &queueMetrics{
		m:    m,
		name: name,
		src:  src,
		work: m.c.q.work.WithLabelValues(name),
	}
	m.mu.Lock()
	g := m.queues[name]
	if g == nil {
		g = &queueGroup{}
		m.queues[name] = g
	}
	g.running = append(g.running, qm)
	m.mu.Unlock()
	return qm
}

var _ workqueue.Metrics = (*Metrics)(nil)

// queueGroup is the running queues of one name.
type queueGroup struct {
	running []*queueMetrics // in the order they were made
	// seen holds the priorities of the callers' own that had keys at a
	// scrape: their depth keeps a series, at 0 when empty, so that a
	// priority's series does not come and go with its keys.
	seen []workqueue.Priority
}

// queueMetrics receives one queue's distributions and holds what Collect
// needs to read its counters.
type queueMetrics struct {
	m    *Metrics
	name string
	src  workqueue.StatsSource
	work prometheus.Observer
}

// Waited observes a sampled key's time in queue, under its priority.
func (qm *queueMetrics) Waited(p workqueue.Priority, wait time.Duration) {
	// At most about a hundred calls a second: the vector's lookup costs
	// less than keeping an observer per priority.
	qm.m.c.q.wait.WithLabelValues(qm.name, p.String()).Observe(wait.Seconds())
}

// Processed observes a sampled key's time in process.
func (qm *queueMetrics) Processed(took time.Duration) {
	qm.work.Observe(took.Seconds())
}

// Stop removes the queue: its counters are no longer read, and its series
// go unless another running queue has its name.
func (qm *queueMetrics) Stop() {
	m := qm.m
	m.mu.Lock()
	defer m.mu.Unlock()
	g := m.queues[qm.name]
	if g == nil {
		return // stopped already
	}
	i := slices.Index(g.running, qm)
	if i < 0 {
		return // stopped already
	}
	g.running = slices.Delete(g.running, i, i+1)
	if len(g.running) > 0 {
		return
	}
	delete(m.queues, qm.name)
	for _, h := range m.c.q.histograms() {
		h.DeletePartialMatch(prometheus.Labels{"name": qm.name})
	}
}

// collectQueue sends the counters and gauges of the running queues named
// name, added up; m.mu is held.
func (c *queueCollector) collectQueue(ch chan<- prometheus.Metric, name string, g *queueGroup) {
	depth := make(map[workqueue.Priority]int, len(namedPriorities)+len(g.seen))
	for _, p := range namedPriorities {
		depth[p] = 0
	}
	for _, p := range g.seen {
		depth[p] = 0
	}
	var (
		delayed, inProcess  int
		adds, retries       int64
		longest, unfinished time.Duration
	)
	for _, qm := range g.running {
		st := qm.src.Stats()
		for _, d := range st.Depth {
			if _, ok := depth[d.Priority]; !ok {
				g.seen = append(g.seen, d.Priority)
			}
			depth[d.Priority] += d.Keys
		}
		delayed += st.Delayed
		inProcess += st.InProcess
		adds += st.Adds
		retries += st.Retries
		longest = max(longest, st.LongestRunning)
		unfinished += st.UnfinishedWork
	}

	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append([]string{name}, labels...)...)
	}
	counter := func(d *prometheus.Desc, v int64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), name)
	}
	for p, keys := range depth {
		gauge(c.depth, float64(keys), p.String())
	}
	gauge(c.delayed, float64(delayed))
	gauge(c.inProcess, float64(inProcess))
	counter(c.adds, adds)
	counter(c.retries, retries)
	gauge(c.longestRunning, longest.Seconds())
	gauge(c.unfinishedWork, unfinished.Seconds())
}
