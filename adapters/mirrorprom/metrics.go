// Package mirrorprom exports the metrics of mirror's informers and
// workqueues to Prometheus.
//
// New registers the metrics in a prometheus.Registerer; the Metrics it
// returns is given to any number of informers, in
// mirror.InformerOptions.Metrics, and of workqueues, in
// workqueue.Options.Metrics, and every series carries the informer's or
// the queue's name (InformerOptions.Name, workqueue.Options.Name) in the
// label "name":
//
//	m, err := mirrorprom.New(registry)
//	if err != nil {
//		return err // the names are taken in registry
//	}
//	inf := mirror.NewInformer(source, mirror.InformerOptions[string, Service]{
//		Name:    "services",
//		KeyFunc: serviceKey,
//		Metrics: m,
//	})
//	queue := workqueue.New[string](workqueue.Options{Name: "services", Metrics: m})
//
// Counters and gauges are read from the informer (Informer.Stats) or the
// queue (Queue.Stats) when Prometheus scrapes, so they cost nothing
// between scrapes; latencies and list sizes are histograms, fed by the
// informer or the queue as it works. The series of an informer appear
// when its Run starts and go when Run returns; those of a queue appear
// when it is made and go once it is shut down and no key is in process.
//
// Every metric is named mirror_…: none has a name of client-go's metrics
// (informer_…, workqueue_…), so New may be given the registry of a
// Kubernetes component, k8s.io/component-base's legacyregistry.Registerer(),
// where client-go's informers and workqueues register theirs. The
// module's README lists every metric, and those of client-go's that are
// closest.
package mirrorprom

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/listwatch/mirror"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics is a mirror.Metrics and a workqueue.Metrics that exports what
// informers and workqueues measure to Prometheus. Create it with New; one
// Metrics serves any number of informers and queues, each under its own
// name. It is safe for concurrent use.
//
// Informers should have distinct names: the series of informers that
// share a name are merged, their counters and sizes added up, their
// staleness the worst of theirs, their resource version that of the one
// that started first.
type Metrics struct {
	c *collector

	mu        sync.Mutex
	informers map[string][]*informerMetrics // by name, in the order their Run started
	queues    map[string]*queueGroup        // by name
}

// New returns a Metrics whose series reg exposes; it registers them in reg
// once, whatever number of informers and queues the Metrics is given. It fails if reg
// is nil, or if reg refuses them, as it does when the names are already
// registered there (a *prometheus.AlreadyRegisteredError, for a second New
// on the same registry, say).
func New(reg prometheus.Registerer) (*Metrics, error) {
	if reg == nil {
		return nil, errors.New("mirrorprom: nil prometheus.Registerer")
	}
	m := &Metrics{
		informers: make(map[string][]*informerMetrics),
		queues:    make(map[string]*queueGroup),
	}
	m.c = newCollector(m)
	if err := reg.Register(m.c); err != nil {
		return nil, fmt.Errorf("mirrorprom: register the metrics: %w", err)
	}
	return m, nil
}

var _ mirror.Metrics = (*Metrics)(nil)

// Informer starts the series of the informer named name; the informer
// calls it when its Run starts. Its counters and gauges are read through
// src at every scrape until the returned InformerMetrics is stopped,
// which removes the informer's series.
func (m *Metrics) Informer(name string, src mirror.StatsSource) mirror.InformerMetrics {
	im := &informerMetrics{
		m:          m,
		name:       name,
		src:        src,
		started:    time.Now(),
		processing: m.c.processing.WithLabelValues(name),
	}
	m.mu.Lock()
	m.informers[name] = append(m.informers[name], im)
	m.mu.Unlock()
	return im
}

// informerMetrics receives one running informer's distributions and holds
// what Collect needs to read its counters.
type informerMetrics struct {
	m       *Metrics
	name    string
	src     mirror.StatsSource
	started time.Time // when Run started: staleness counts from it until the first list

	processing prometheus.Observer
	delivery   sync.Map // handler name → prometheus.Observer
}

// Listed observes a completed list's duration and size.
func (im *informerMetrics) Listed(cause mirror.ListCause, objects int, took time.Duration) {
	c := cause.String()
	im.m.c.listDuration.WithLabelValues(im.name, c).Observe(took.Seconds())
	im.m.c.listObjects.WithLabelValues(im.name, c).Observe(float64(objects))
}

// Applied observes a sampled wait from an event's arrival to its
// application to the cache.
func (im *informerMetrics) Applied(latency time.Duration) {
	im.processing.Observe(latency.Seconds())
}

// Delivered observes a sampled delay from the application of a change to
// a handler's call with it.
func (im *informerMetrics) Delivered(handler string, latency time.Duration) {
	o, ok := im.delivery.Load(handler)
	if !ok {
		// Once per handler; the vector keeps the series until Stop.
		o, _ = im.delivery.LoadOrStore(handler, im.m.c.delivery.WithLabelValues(im.name, handler))
	}
	o.(prometheus.Observer).Observe(latency.Seconds())
}

// Stop removes the informer: its counters are no longer read, and its
// series go unless another running informer has its name.
func (im *informerMetrics) Stop() {
	m := im.m
	m.mu.Lock()
	defer m.mu.Unlock()
	running := m.informers[im.name]
	i := slices.Index(running, im)
	if i < 0 {
		return // stopped already
	}
	running = slices.Delete(running, i, i+1)
	if len(running) > 0 {
		m.informers[im.name] = running
		return
	}
	delete(m.informers, im.name)
	m.c.deleteHistograms(im.name)
}
