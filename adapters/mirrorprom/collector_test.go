package mirrorprom_test

import (
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/adapters/mirrorprom"
	"github.com/listwatch/mirror/workqueue"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// newMetrics returns a Metrics registered in a registry of its own.
func newMetrics(tb testing.TB) (*mirrorprom.Metrics, *prometheus.Registry) {
	tb.Helper()
	registry := prometheus.NewRegistry()
	m, err := mirrorprom.New(registry)
	require.NoError(tb, err)
	return m, registry
}

// fixed is a StatsSource that always returns the same stats and
// freshness.
type fixedSource struct {
	st mirror.InformerStats
	fr mirror.Freshness
}

func (f fixedSource) Stats() mirror.InformerStats { return f.st }
func (f fixedSource) Freshness() mirror.Freshness { return f.fr }

// fixed returns a StatsSource that always returns st and, if given, fr.
func fixed(st mirror.InformerStats, fr ...mirror.Freshness) mirror.StatsSource {
	f := fixedSource{st: st}
	if len(fr) > 0 {
		f.fr = fr[0]
	}
	return f
}

func TestNew_RefusesANilRegistererAndNamesTakenAlready(t *testing.T) {
	_, err := mirrorprom.New(nil)
	require.Error(t, err)

	registry := prometheus.NewRegistry()
	_, err = mirrorprom.New(registry)
	require.NoError(t, err)
	_, err = mirrorprom.New(registry)
	var taken prometheus.AlreadyRegisteredError
	require.ErrorAs(t, err, &taken, "the second Metrics on one registry")
}

// Every metric is named mirror_…, so that none takes a name client-go's
// informers, reflectors or workqueues register (informer_…, workqueue_…)
// in the registry of a Kubernetes program; test/k8s/metricscompat
// registers both in one.
func TestMetrics_EveryNameIsUnderTheMirrorPrefix(t *testing.T) {
	registry := prometheus.NewPedanticRegistry()
	m, err := mirrorprom.New(registry)
	require.NoError(t, err)
	im := m.Informer("orders", fixed(mirror.InformerStats{
		Handlers: []mirror.HandlerStats{{Name: "audit"}},
	}, mirror.Freshness{ResourceVersion: "7"}))
	defer im.Stop()
	im.Listed(mirror.ListInitial, 1, time.Millisecond)
	im.Applied(time.Millisecond)
	im.Delivered("audit", time.Millisecond)
	qm := m.Queue("orders", &statsSource{})
	defer qm.Stop()
	qm.Waited(workqueue.PriorityLive, time.Millisecond)
	qm.Processed(time.Millisecond)

	families, err := registry.Gather()
	require.NoError(t, err)
	var names []string
	for _, f := range families {
		names = append(names, f.GetName())
		assert.True(t, strings.HasPrefix(f.GetName(), "mirror_"), f.GetName())
	}
	listed := readmeMetrics(t)
	assert.Len(t, names, len(listed), "every metric of the README has a series")
}

// Every counter and gauge is read from Stats at the scrape, each field
// under its own series; this pins the mapping, which a running informer
// cannot drive field by field (a very short watch, say).
func TestMetrics_SeriesSayWhatStatsSay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, registry := newMetrics(t)
		confirmed := time.Now()
		im := m.Informer("orders", fixed(mirror.InformerStats{
			Reflector: mirror.ReflectorStats{
				Lists: 7, Relists: 6, RelistsExpired: 4, RelistsAfterError: 2,
				Watches: 11, WatchRestarts: 9, RestartsClosed: 5, RestartsShort: 3, RestartsUnavailable: 1,
				Events: 1000,
				Errors: 20, ListErrors: 2, WatchErrors: 8, Skipped: 3, StoreErrors: 7,
			},
			Objects:    300,
			QueueDepth: 12,
			QueueAdds:  5000,
			Handlers: []mirror.HandlerStats{
				{Name: "audit", Backlog: 4, Delivered: 900, Panics: 2},
				{Name: "", Backlog: 1, Delivered: 50},
			},
		}, mirror.Freshness{ResourceVersion: "1100", ConfirmedAt: confirmed, Err: errors.New("down")}))
		defer im.Stop()
		time.Sleep(90 * time.Second)

		s := scrapeHandler(t, registry)
		for _, tc := range []struct {
			name   string
			labels []string
			want   float64
		}{
			{"mirror_cache_objects", nil, 300},
			{"mirror_queue_depth", nil, 12},
			{"mirror_queue_adds_total", nil, 5000},
			{"mirror_handler_backlog", []string{"handler", "audit"}, 4},
			{"mirror_handler_deliveries_total", []string{"handler", "audit"}, 900},
			{"mirror_handler_panics_total", []string{"handler", "audit"}, 2},
			{"mirror_handler_backlog", []string{"handler", ""}, 1},
			{"mirror_handler_deliveries_total", []string{"handler", ""}, 50},
			{"mirror_handler_panics_total", []string{"handler", ""}, 0},
			{"mirror_lists_total", []string{"cause", "initial"}, 1},
			{"mirror_lists_total", []string{"cause", "expired"}, 4},
			{"mirror_lists_total", []string{"cause", "error"}, 2},
			{"mirror_watches_total", nil, 11},
			{"mirror_watch_restarts_total", []string{"cause", "closed"}, 5},
			{"mirror_watch_restarts_total", []string{"cause", "short"}, 3},
			{"mirror_watch_restarts_total", []string{"cause", "unavailable"}, 1},
			{"mirror_watch_events_total", nil, 1000},
			{"mirror_errors_total", []string{"kind", "list"}, 2},
			{"mirror_errors_total", []string{"kind", "watch"}, 8},
			{"mirror_errors_total", []string{"kind", "skipped"}, 3},
			{"mirror_errors_total", []string{"kind", "store"}, 7},
			{"mirror_cache_resource_version", nil, 1100},
			{"mirror_staleness_seconds", nil, 90},
			{"mirror_source_failing", nil, 1},
		} {
			labels := append([]string{"name", "orders"}, tc.labels...)
			assert.Equal(t, tc.want, s.get(t, tc.name, labels...), key(tc.name, labels...))
		}
		for name, typ := range map[string]dto.MetricType{
			"mirror_cache_objects":            dto.MetricType_GAUGE,
			"mirror_queue_depth":              dto.MetricType_GAUGE,
			"mirror_queue_adds_total":         dto.MetricType_COUNTER,
			"mirror_handler_backlog":          dto.MetricType_GAUGE,
			"mirror_handler_deliveries_total": dto.MetricType_COUNTER,
			"mirror_lists_total":              dto.MetricType_COUNTER,
			"mirror_staleness_seconds":        dto.MetricType_GAUGE,
		} {
			assert.Equal(t, typ, s.types[name], name)
		}
	})
}

// The histograms take what the informer pushes: list durations and sizes
// by cause, sampled latencies, per handler for deliveries.
func TestMetrics_HistogramsTakeWhatTheInformerPushes(t *testing.T) {
	m, registry := newMetrics(t)
	im := m.Informer("orders", fixed(mirror.InformerStats{}))
	defer im.Stop()
	im.Listed(mirror.ListInitial, 300, 2*time.Second)
	im.Listed(mirror.ListExpired, 10, 250*time.Millisecond)
	im.Listed(mirror.ListExpired, 20, 750*time.Millisecond)
	im.Applied(3 * time.Millisecond)
	im.Delivered("audit", 5*time.Millisecond)
	im.Delivered("audit", 7*time.Millisecond)
	im.Delivered("mail", time.Second)

	s := scrapeHandler(t, registry)
	for _, tc := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"mirror_list_duration_seconds_count", []string{"cause", "initial"}, 1},
		{"mirror_list_duration_seconds_sum", []string{"cause", "initial"}, 2},
		{"mirror_list_objects_sum", []string{"cause", "initial"}, 300},
		{"mirror_list_duration_seconds_count", []string{"cause", "expired"}, 2},
		{"mirror_list_duration_seconds_sum", []string{"cause", "expired"}, 1},
		{"mirror_list_objects_count", []string{"cause", "expired"}, 2},
		{"mirror_list_objects_sum", []string{"cause", "expired"}, 30},
		{"mirror_apply_latency_seconds_count", nil, 1},
		{"mirror_apply_latency_seconds_sum", nil, 0.003},
		{"mirror_handler_delivery_latency_seconds_count", []string{"handler", "audit"}, 2},
		{"mirror_handler_delivery_latency_seconds_sum", []string{"handler", "audit"}, 0.012},
		{"mirror_handler_delivery_latency_seconds_count", []string{"handler", "mail"}, 1},
	} {
		labels := append([]string{"name", "orders"}, tc.labels...)
		assert.InDelta(t, tc.want, s.get(t, tc.name, labels...), 1e-9, key(tc.name, labels...))
	}
	assert.False(t, s.has("mirror_list_duration_seconds_count", "name", "orders", "cause", "error"), "no list of that cause yet")
}

// Informers that share a name share its series: counts and sizes are
// added up, the staleness is the worst, the version the first's.
func TestMetrics_InformersSharingANameAreAddedUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, registry := newMetrics(t)
		start := time.Now()
		first := m.Informer("shared", fixed(mirror.InformerStats{
			Objects: 3, QueueAdds: 10,
			Reflector: mirror.ReflectorStats{Lists: 1},
			Handlers:  []mirror.HandlerStats{{Name: "h", Delivered: 7, Backlog: 1}},
		}, mirror.Freshness{ResourceVersion: "5", ConfirmedAt: start.Add(10 * time.Second)}))
		defer first.Stop()
		second := m.Informer("shared", fixed(mirror.InformerStats{
			Objects: 4, QueueAdds: 20,
			Reflector: mirror.ReflectorStats{Lists: 2, Relists: 1, RelistsExpired: 1},
			Handlers:  []mirror.HandlerStats{{Name: "h", Delivered: 1, Backlog: 2}, {Name: "h", Delivered: 1}},
		}, mirror.Freshness{ResourceVersion: "9", ConfirmedAt: start}))
		defer second.Stop()
		time.Sleep(time.Minute)

		s := scrapeHandler(t, registry)
		assert.Equal(t, 7.0, s.get(t, "mirror_cache_objects", "name", "shared"))
		assert.Equal(t, 30.0, s.get(t, "mirror_queue_adds_total", "name", "shared"))
		assert.Equal(t, 5.0, s.get(t, "mirror_cache_resource_version", "name", "shared"))
		assert.Equal(t, 60.0, s.get(t, "mirror_staleness_seconds", "name", "shared"))
		assert.Equal(t, 2.0, s.get(t, "mirror_lists_total", "name", "shared", "cause", "initial"))
		assert.Equal(t, 1.0, s.get(t, "mirror_lists_total", "name", "shared", "cause", "expired"))
		assert.Equal(t, 9.0, s.get(t, "mirror_handler_deliveries_total", "name", "shared", "handler", "h"))
		assert.Equal(t, 3.0, s.get(t, "mirror_handler_backlog", "name", "shared", "handler", "h"))
	})
}

// Stop removes an informer's series, histograms included, and leaves
// those of the others; while another informer has the name, its series
// stay.
func TestMetrics_StopRemovesTheInformersSeries(t *testing.T) {
	m, registry := newMetrics(t)
	push := func(im mirror.InformerMetrics) {
		im.Listed(mirror.ListInitial, 1, time.Millisecond)
		im.Applied(time.Millisecond)
		im.Delivered("h", time.Millisecond)
	}
	a := m.Informer("a", fixed(mirror.InformerStats{Objects: 1}))
	b := m.Informer("b", fixed(mirror.InformerStats{Objects: 2}))
	b2 := m.Informer("b", fixed(mirror.InformerStats{Objects: 3}))
	push(a)
	push(b)
	push(b2)
	s := scrapeHandler(t, registry)
	require.NotEmpty(t, s.named("a"))
	require.NotEmpty(t, s.named("b"))

	a.Stop()
	a.Stop() // a second Stop does nothing
	b.Stop()
	s = scrapeHandler(t, registry)
	assert.Empty(t, s.named("a"), "a stopped")
	assert.Equal(t, 3.0, s.get(t, "mirror_cache_objects", "name", "b"), "b2 runs on")
	assert.Equal(t, 2.0, s.get(t, "mirror_apply_latency_seconds_count", "name", "b"), "the samples of both b")

	b2.Stop()
	s = scrapeHandler(t, registry)
	assert.Empty(t, s.values, "no informer runs")
}

// A resource version becomes a gauge only if it is a decimal number, cut
// to its 15 least significant digits as client-go cuts it, so that a
// float64 holds it exactly; otherwise the series is left out.
func TestMetrics_ResourceVersionGaugeTakesDecimalVersionsOnly(t *testing.T) {
	for _, tc := range []struct {
		version string
		want    float64
		present bool
	}{
		{"", 0, true},
		{"42", 42, true},
		{"123456789012345", 123456789012345, true},
		{"98765123456789012345", 123456789012345, true},
		{"abc", 0, false},
		{"-1", 0, false},
		{"1.5", 0, false},
	} {
		t.Run(tc.version, func(t *testing.T) {
			m, registry := newMetrics(t)
			im := m.Informer("v", fixed(mirror.InformerStats{}, mirror.Freshness{ResourceVersion: tc.version}))
			defer im.Stop()
			s := scrapeHandler(t, registry)
			for _, name := range []string{"mirror_cache_resource_version"} {
				require.Equal(t, tc.present, s.has(name, "name", "v"), name)
				if tc.present {
					assert.Equal(t, tc.want, s.get(t, name, "name", "v"), name)
				}
			}
		})
	}
}
