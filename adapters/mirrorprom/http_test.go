package mirrorprom_test

import (
	"context"
	"net/http/httptest"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/memsource"
	"github.com/listwatch/mirror/workqueue"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readmeMetrics returns the metrics the README's table lists, with their
// types.
func readmeMetrics(t *testing.T) map[string]dto.MetricType {
	t.Helper()
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	types := map[string]dto.MetricType{
		"counter": dto.MetricType_COUNTER, "gauge": dto.MetricType_GAUGE, "histogram": dto.MetricType_HISTOGRAM,
	}
	listed := map[string]dto.MetricType{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\| ([a-z]+) \\|").FindAllStringSubmatch(string(readme), -1) {
		typ, ok := types[m[2]]
		require.True(t, ok, "README: %s has type %q", m[1], m[2])
		listed[m[1]] = typ
	}
	require.NotEmpty(t, listed)
	return listed
}

// A program serves the registry with promhttp; Prometheus scrapes it over
// the network. Served over loopback, the series of an informer and of a
// workqueue its handler feeds are there with the README's types, they
// move as they work, and they go when they stop. The informer runs on
// real goroutines, so what it has not yet counted when the handler has
// been called is awaited.
func TestMetrics_ServedOverHTTPAsTheREADMESays(t *testing.T) {
	m, registry := newMetrics(t)
	srv := httptest.NewServer(handler(registry))
	defer srv.Close()
	url := srv.URL + "/metrics"

	src := memsource.New(sourceKey, memsource.Options{})
	for _, name := range []string{"a", "b", "c"} {
		src.Put(item{Name: name})
	}
	inf := mirror.NewInformer(src, mirror.InformerOptions[string, item]{Name: "served", KeyFunc: itemKey, Metrics: m})
	queue := workqueue.New[string](workqueue.Options{Name: "served", Metrics: m})
	defer queue.ShutDown()
	reg, err := inf.AddEventHandler(mirror.HandlerFuncs[item]{
		UpdateFunc: func(_, it item) { queue.Add(it.Name) },
	}, mirror.HandlerOptions{Name: "h"})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	require.NoError(t, mirror.WaitForCacheSync(ctx, reg))

	// Counted before the handler had synced.
	s := scrapeURL(t, url)
	assert.Equal(t, 3.0, s.get(t, "mirror_cache_objects", "name", "served"))
	assert.Equal(t, 3.0, s.get(t, "mirror_handler_deliveries_total", "name", "served", "handler", "h"))
	assert.Equal(t, float64(src.Revision()), s.get(t, "mirror_cache_resource_version", "name", "served"))

	src.Put(item{Name: "a", Val: 1})
	got, err := queue.Get(ctx)
	require.NoError(t, err)
	require.Equal(t, "a", got)
	queue.Done(got)
	listed := readmeMetrics(t)
	require.Eventually(t, func() bool {
		var err error
		if s, err = tryScrapeURL(url); err != nil {
			return false
		}
		for name := range listed {
			if _, ok := s.types[name]; !ok {
				return false
			}
		}
		return s.values[key("mirror_handler_deliveries_total", "name", "served", "handler", "h")] == 4 &&
			s.values[key("mirror_workqueue_adds_total", "name", "served")] == 1 &&
			s.values[key("mirror_lists_total", "name", "served", "cause", "initial")] == 1 &&
			s.values[key("mirror_watch_events_total", "name", "served")] == 1
	}, 10*time.Second, 5*time.Millisecond, "every metric of the README, and the change counted")
	for name, typ := range listed {
		assert.Equal(t, typ, s.types[name], "%s: the README's type", name)
	}
	for name := range s.types {
		assert.Contains(t, listed, name, "exported but not in the README")
	}

	cancel()
	require.NoError(t, <-done)
	queue.ShutDown()
	assert.Empty(t, scrapeURL(t, url).values, "the series go with the informer and the queue")
}
