package mirrorprom

import (
	"strconv"
	"time"

	"github.com/listwatch/mirror"
	"github.com/prometheus/client_golang/prometheus"
)

// Buckets of the histograms. The latencies' are those client-go's
// informers use for their processing latency, with two below a
// millisecond, where an informer that keeps up spends its time; lists run
// from milliseconds (a few keys) to minutes (millions).
var (
	latencyBuckets      = []float64{0.00001, 0.0001, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
	listDurationBuckets = []float64{0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}
	listObjectsBuckets  = []float64{0, 10, 100, 1000, 10_000, 100_000, 1_000_000, 10_000_000}
)

// collector is the prometheus.Collector of a Metrics: the counters and
// gauges are made at each Collect from the informers' Stats, the
// histograms are vectors the informers observe into.
type collector struct {
	m *Metrics

	objects, queued, adds                  *prometheus.Desc
	backlog, deliveries, panics            *prometheus.Desc
	lists, watches, restarts, events, errs *prometheus.Desc
	storeVersion, staleness, failed        *prometheus.Desc

	processing, delivery, listDuration, listObjects *prometheus.HistogramVec

	q queueCollector // the workqueues' (workqueue.go)
}

func newCollector(m *Metrics) *collector {
	name := []string{"name"}
	desc := func(fqName, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(fqName, help, append(name, labels...), nil)
	}
	histogram := func(fqName, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: fqName, Help: help, Buckets: buckets}, append(name, labels...))
	}
	return &collector{
		m:       m,
		objects: desc("mirror_cache_objects", "Objects in the informer's cache."),
		queued: desc("mirror_queue_depth",
			"Entries waiting in the queue between the Reflector and the cache: changes, lists and resyncs (in-order queue), or keys (DeltaFIFO)."),
		adds: desc("mirror_queue_adds_total", "Entries ever added to the queue between the Reflector and the cache (keys, for a DeltaFIFO)."),
		backlog: desc("mirror_handler_backlog",
			"Notifications waiting for the handler.", "handler"),
		deliveries: desc("mirror_handler_deliveries_total",
			"Notifications handed to the handler.", "handler"),
		panics: desc("mirror_handler_panics_total",
			"Calls of the handler that panicked.", "handler"),
		lists: desc("mirror_lists_total",
			"Lists of the source that completed, by cause: initial (the first), expired (the version to watch from was gone), error (after a watch failed otherwise); those not initial are relists.", "cause"),
		watches: desc("mirror_watches_total", "Watches opened, streaming lists included."),
		restarts: desc("mirror_watch_restarts_total",
			"Watches reopened from the last version seen without a relist, by why the one before ended: closed (normally, a timeout say), short (in under a second without an event), unavailable (the source was unreachable).", "cause"),
		events: desc("mirror_watch_events_total", "Watch events received, of every type."),
		errs: desc("mirror_errors_total",
			"Errors reported, by kind: list (a list failed), watch (a watch failed or ended too soon), skipped (an object the source could not produce), store (an object or list the queue refused), apply (a change the cache refused: an index function failed), checkpoint (a checkpoint not loaded or written).", "kind"),
		storeVersion: desc("mirror_cache_resource_version",
			"The resource version of the last change applied to the cache, if it is a decimal number: its 15 least significant digits."),
		staleness: desc("mirror_staleness_seconds",
			"Seconds since the source last confirmed the mirror current (a list completed, an event or a bookmark arrived); before the first list, since the informer started."),
		failed: desc("mirror_source_failing",
			"1 if the last attempt to list or watch failed and no list, event or bookmark came since, 0 otherwise."),
		processing: histogram("mirror_apply_latency_seconds",
			"Seconds from an event's arrival in the queue to its application to the cache, for a sample of the events (at most one per 10 ms).", latencyBuckets),
		delivery: histogram("mirror_handler_delivery_latency_seconds",
			"Seconds from the application of a change to the cache to the handler taking it, for a sample of the notifications (at most one per 10 ms).", latencyBuckets, "handler"),
		listDuration: histogram("mirror_list_duration_seconds",
			"Seconds a completed list took, from its first request to its last page.", listDurationBuckets, "cause"),
		listObjects: histogram("mirror_list_objects",
			"Objects a completed list held.", listObjectsBuckets, "cause"),
		q: newQueueCollector(),
	}
}

func (c *collector) constDescs() []*prometheus.Desc {
	return []*prometheus.Desc{
		c.objects, c.queued, c.adds, c.backlog, c.deliveries, c.panics,
		c.lists, c.watches, c.restarts, c.events, c.errs,
		c.storeVersion, c.staleness, c.failed,
	}
}

func (c *collector) histograms() []*prometheus.HistogramVec {
	return []*prometheus.HistogramVec{c.processing, c.delivery, c.listDuration, c.listObjects}
}

// Describe sends the descriptors of every metric.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range append(c.constDescs(), c.q.constDescs()...) {
		ch <- d
	}
	for _, h := range append(c.histograms(), c.q.histograms()...) {
		h.Describe(ch)
	}
}

// Collect reads every running informer's and workqueue's Stats and sends
// their counters and gauges, then the histograms.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	now := time.Now()
	// Stats are read under the lock, so that no informer or queue is read
	// after its Stop; Stats takes their locks only briefly, and nothing
	// an informer or a queue calls while holding one takes this lock.
	c.m.mu.Lock()
	for name, running := range c.m.informers {
		c.collectInformer(ch, name, running, now)
	}
	for name, g := range c.m.queues {
		c.q.collectQueue(ch, name, g)
	}
	c.m.mu.Unlock()
	for _, h := range append(c.histograms(), c.q.histograms()...) {
		h.Collect(ch)
	}
}

// totals are the counters and gauges of the informers that share a name,
// added up.
type totals struct {
	objects, queued       int
	adds, watches, events int64
	lists                 [3]int64 // initial, expired, error
	restarts              [3]int64 // closed, short, unavailable
	errs                  [6]int64 // list, watch, skipped, store, apply, checkpoint
	storeVersion          string
	staleness             time.Duration
	failing               bool
	handlers              []mirror.HandlerStats // one per handler name, in order
	handlerIndex          map[string]int
}

func (c *collector) collectInformer(ch chan<- prometheus.Metric, name string, running []*informerMetrics, now time.Time) {
	var t totals
	for i, im := range running {
		st, fr := im.src.Stats(), im.src.Freshness()
		t.objects += st.Objects
		t.queued += st.QueueDepth
		t.adds += st.QueueAdds
		r := st.Reflector
		t.lists[0] += r.Lists - r.RelistsExpired - r.RelistsAfterError
		t.lists[1] += r.RelistsExpired
		t.lists[2] += r.RelistsAfterError
		t.restarts[0] += r.RestartsClosed
		t.restarts[1] += r.RestartsShort
		t.restarts[2] += r.RestartsUnavailable
		t.watches += r.Watches
		t.events += r.Events
		t.errs[0] += r.ListErrors
		t.errs[1] += r.WatchErrors
		t.errs[2] += r.Skipped
		t.errs[3] += r.StoreErrors
		t.errs[4] += st.ApplyErrors
		t.errs[5] += st.CheckpointErrors
		if i == 0 {
			t.storeVersion = fr.ResourceVersion
		}
		since := im.started
		if !fr.ConfirmedAt.IsZero() {
			since = fr.ConfirmedAt
		}
		t.staleness = max(t.staleness, now.Sub(since))
		t.failing = t.failing || fr.Err != nil
		for _, h := range st.Handlers {
			t.addHandler(h)
		}
	}

	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append([]string{name}, labels...)...)
	}
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), append([]string{name}, labels...)...)
	}
	gauge(c.objects, float64(t.objects))
	gauge(c.queued, float64(t.queued))
	counter(c.adds, t.adds)
	for _, h := range t.handlers {
		gauge(c.backlog, float64(h.Backlog), h.Name)
		counter(c.deliveries, h.Delivered, h.Name)
		counter(c.panics, h.Panics, h.Name)
	}
	for i, cause := range []mirror.ListCause{mirror.ListInitial, mirror.ListExpired, mirror.ListAfterError} {
		counter(c.lists, t.lists[i], cause.String())
	}
	counter(c.watches, t.watches)
	for i, cause := range []string{"closed", "short", "unavailable"} {
		counter(c.restarts, t.restarts[i], cause)
	}
	counter(c.events, t.events)
	for i, kind := range []string{"list", "watch", "skipped", "store", "apply", "checkpoint"} {
		counter(c.errs, t.errs[i], kind)
	}
	if v, ok := versionValue(t.storeVersion); ok {
		gauge(c.storeVersion, v)
	}
	gauge(c.staleness, t.staleness.Seconds())
	failing := 0.0
	if t.failing {
		failing = 1
	}
	gauge(c.failed, failing)
}

// addHandler adds h to the totals of the handlers of its name: handlers
// without a name, or sharing one, make one series.
func (t *totals) addHandler(h mirror.HandlerStats) {
	i, ok := t.handlerIndex[h.Name]
	if !ok {
		if t.handlerIndex == nil {
			t.handlerIndex = make(map[string]int)
		}
		t.handlerIndex[h.Name] = len(t.handlers)
		t.handlers = append(t.handlers, h)
		return
	}
	sum := &t.handlers[i]
	sum.Backlog += h.Backlog
	sum.Delivered += h.Delivered
	sum.Panics += h.Panics
}

// versionValue returns resource version v as a gauge's value, as client-go
// does for its informers' store resource version: the number its last 15
// digits make, which a float64 holds exactly; 0 for "", none yet. ok is
// false if v is not a decimal number: the series is then left out.
func versionValue(v string) (value float64, ok bool) {
	if v == "" {
		return 0, true
	}
	if len(v) > 15 {
		v = v[len(v)-15:]
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, false
	}
	return float64(n), true
}

// deleteHistograms removes the histogram series of the informers named
// name (not those of a workqueue of that name).
func (c *collector) deleteHistograms(name string) {
	for _, h := range c.histograms() {
		h.DeletePartialMatch(prometheus.Labels{"name": name})
	}
}
