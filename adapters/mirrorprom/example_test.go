package mirrorprom_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/adapters/mirrorprom"
	"github.com/listwatch/mirror/memsource"
	"github.com/listwatch/mirror/workqueue"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

type service struct{ Name, Zone string }

func serviceKey(s service) (string, error) { return s.Name, nil }

// An informer over an in-memory source, exporting its metrics to a
// registry; a program serves the registry with promhttp.HandlerFor.
func Example() {
	registry := prometheus.NewRegistry()
	metrics, err := mirrorprom.New(registry)
	if err != nil {
		panic(err)
	}
	src := memsource.New(serviceKey, memsource.Options{})
	for _, name := range []string{"api", "db", "web"} {
		src.Put(service{Name: name, Zone: "eu"})
	}
	inf := mirror.NewInformer(src, mirror.InformerOptions[string, service]{
		Name:    "services",
		KeyFunc: serviceKey,
		Metrics: metrics,
	})
	reg, err := inf.AddEventHandler(mirror.HandlerFuncs[service]{}, mirror.HandlerOptions{Name: "audit"})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- inf.Run(ctx) }()
	if err := mirror.WaitForCacheSync(ctx, reg); err != nil {
		panic(err)
	}

	families, err := registry.Gather()
	if err != nil {
		panic(err)
	}
	for _, line := range series(families) {
		if strings.HasPrefix(line, "mirror_cache_objects") ||
			strings.HasPrefix(line, "mirror_cache_resource_version") ||
			strings.HasPrefix(line, "mirror_handler_deliveries_total") {
			fmt.Println(line)
		}
	}

	// Once Run has returned, the informer's series are gone.
	cancel()
	<-done
	families, err = registry.Gather()
	if err != nil {
		panic(err)
	}
	fmt.Println("series after Run returned:", len(series(families)))
	// Output:
	// mirror_cache_objects{name="services"} 3
	// mirror_cache_resource_version{name="services"} 4
	// mirror_handler_deliveries_total{handler="audit",name="services"} 3
	// series after Run returned: 0
}

// A workqueue exporting its metrics: its depth by priority, read at each
// scrape; its series go once it is shut down with nothing in process.
func ExampleMetrics_Queue() {
	registry := prometheus.NewRegistry()
	metrics, err := mirrorprom.New(registry)
	if err != nil {
		panic(err)
	}
	queue := workqueue.New[string](workqueue.Options{Name: "services", Metrics: metrics})
	for _, key := range []string{"api", "db", "web"} {
		queue.AddWithPriority(key, workqueue.PriorityBackground) // an initial list
	}
	queue.Add("db") // a live change: db is raised
	queue.AddAfter("cache", time.Minute)

	families, err := registry.Gather()
	if err != nil {
		panic(err)
	}
	for _, line := range series(families) {
		if strings.HasPrefix(line, "mirror_workqueue_depth") ||
			strings.HasPrefix(line, "mirror_workqueue_delayed") ||
			strings.HasPrefix(line, "mirror_workqueue_adds_total") {
			fmt.Println(line)
		}
	}

	queue.ShutDown()
	families, err = registry.Gather()
	if err != nil {
		panic(err)
	}
	fmt.Println("series after ShutDown:", len(series(families)))
	// Output:
	// mirror_workqueue_adds_total{name="services"} 4
	// mirror_workqueue_delayed{name="services"} 1
	// mirror_workqueue_depth{name="services",priority="background"} 2
	// mirror_workqueue_depth{name="services",priority="live"} 1
	// mirror_workqueue_depth{name="services",priority="resync"} 0
	// series after ShutDown: 0
}

// series renders the counters and gauges of families, one line a series,
// as Prometheus' text format does, in order; a histogram as its count.
func series(families []*dto.MetricFamily) []string {
	var lines []string
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			var v float64
			switch {
			case m.Counter != nil:
				v = m.GetCounter().GetValue()
			case m.Gauge != nil:
				v = m.GetGauge().GetValue()
			case m.Histogram != nil:
				v = float64(m.GetHistogram().GetSampleCount())
			}
			lines = append(lines, fmt.Sprintf("%s{%s} %g", f.GetName(), strings.Join(labels, ","), v))
		}
	}
	slices.Sort(lines)
	return lines
}
