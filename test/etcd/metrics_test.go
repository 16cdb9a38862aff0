package etcd

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/listwatch/mirror"
	etcdmirror "github.com/listwatch/mirror/adapters/etcd"
	"github.com/listwatch/mirror/adapters/mirrorprom"
	"github.com/listwatch/mirror/source"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// metricsServer serves a registry's metrics over loopback, as a program
// does, and reads them as Prometheus does.
type metricsServer struct {
	url  string
	name string // the informer's, the name label of its series
}

func newMetricsServer(t *testing.T, registry *prometheus.Registry, name string) *metricsServer {
	t.Helper()
	srv := httptest.NewServer(promhttp.HandlerFor(registry, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}))
	t.Cleanup(srv.Close)
	return &metricsServer{url: srv.URL + "/metrics", name: name}
}

// value scrapes the server and returns the value of the informer's series
// metric with the given extra label pairs, and whether it was there; a
// histogram's series are metric_count and metric_sum.
func (s *metricsServer) value(metric string, labels ...string) (float64, bool, error) {
	resp, err := http.Get(s.url)
	if err != nil {
		return 0, false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		return 0, false, fmt.Errorf("GET %s: %s: %s", s.url, resp.Status, body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return 0, false, err
	}
	family, part := metric, ""
	for _, suffix := range []string{"_count", "_sum"} {
		if base, ok := strings.CutSuffix(metric, suffix); ok && families[metric] == nil {
			family, part = base, suffix
		}
	}
	want := map[string]string{"name": s.name}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
next:
	for _, m := range families[family].GetMetric() {
		if len(m.GetLabel()) != len(want) {
			continue
		}
		for _, l := range m.GetLabel() {
			if want[l.GetName()] != l.GetValue() {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true, nil
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true, nil
		case m.Histogram != nil && part == "_count":
			return float64(m.GetHistogram().GetSampleCount()), true, nil
		case m.Histogram != nil && part == "_sum":
			return m.GetHistogram().GetSampleSum(), true, nil
		}
	}
	return 0, false, nil
}

// get is value for the test's goroutine: it fails the test if the scrape
// fails or the series is missing.
func (s *metricsServer) get(t *testing.T, metric string, labels ...string) float64 {
	t.Helper()
	v, ok, err := s.value(metric, labels...)
	require.NoError(t, err)
	require.True(t, ok, "no series %s%v for %s", metric, labels, s.name)
	return v
}

// eventually waits until the series satisfies cond, scraping over and
// over: the informer and etcd run on their own.
func (s *metricsServer) eventually(t *testing.T, cond func(float64) bool, msg, metric string, labels ...string) {
	t.Helper()
	require.Eventually(t, func() bool {
		v, ok, err := s.value(metric, labels...)
		return err == nil && ok && cond(v)
	}, convergeTimeout, 10*time.Millisecond, msg)
}

// The Prometheus module's etcd-related metrics, against a real etcd that
// the mirror reaches through a proxy, scraped over loopback: staleness
// grows while the mirror is cut off and falls when it is back; a watch
// cut and resumed is a restart whose cause says the source was
// unavailable, without a relist; a cut during which etcd compacts the
// history the watch needs is a relist whose cause is "expired".
func TestMetrics_EtcdCutsAndCompactionMoveRestartsRelistsAndStaleness(t *testing.T) {
	t.Parallel()
	for _, q := range informerQueues {
		t.Run(q.name, func(t *testing.T) {
			t.Parallel()
			m := startEtcd(t)
			direct := newClient(t, m.endpoint())
			p := newProxy(t, m.cliURL.Host)
			ctx := context.Background()
			const prefix = "/metrics/"
			putN(t, direct, prefix, 50)

			registry := prometheus.NewRegistry()
			metrics, err := mirrorprom.New(registry)
			require.NoError(t, err)
			srv := newMetricsServer(t, registry, "etcd-"+q.name)
			log := &errorLog{}
			inf := etcdmirror.NewInformer(etcdmirror.New(newClient(t, p.endpoint()), prefix, fastOptions), etcdmirror.InformerOptions[[]byte]{
				Name:         srv.name,
				Metrics:      metrics,
				ErrorHandler: log.add,
				ListWatch:    mirror.ListWatchOptions{InitialBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond},
			})
			runCtx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- inf.Run(runCtx) }()
			t.Cleanup(func() {
				cancel()
				assert.NoError(t, <-done)
			})
			require.NoError(t, mirror.WaitForCacheSync(ctx, inf))
			assert.Equal(t, 50.0, srv.get(t, "mirror_cache_objects"))
			srv.eventually(t, func(v float64) bool { return v == 1 }, "the initial list", "mirror_lists_total", "cause", "initial")
			assert.Equal(t, 50.0, srv.get(t, "mirror_list_objects_sum", "cause", "initial"))
			resp, err := direct.Put(ctx, prefix+"x", "1")
			require.NoError(t, err)
			srv.eventually(t, func(v float64) bool { return v == float64(resp.Header.Revision) },
				"the put reaches the cache", "mirror_cache_resource_version")
			restarts := srv.get(t, "mirror_watch_restarts_total", "cause", "unavailable")
			watchErrors := srv.get(t, "mirror_errors_total", "kind", "watch")

			// Cut off: the watch fails, and the staleness grows past the
			// bookmarks' interval, 100ms here, until the mirror is back.
			p.Cut()
			srv.eventually(t, func(v float64) bool { return v == 1 }, "the source is seen failing", "mirror_source_failing")
			stale := srv.get(t, "mirror_staleness_seconds")
			srv.eventually(t, func(v float64) bool { return v >= stale+0.5 }, "the staleness grows while cut", "mirror_staleness_seconds")
			assert.Greater(t, srv.get(t, "mirror_errors_total", "kind", "watch"), watchErrors)
			p.Resume()
			srv.eventually(t, func(v float64) bool { return v > restarts }, "the watch restarts, the source was unavailable",
				"mirror_watch_restarts_total", "cause", "unavailable")
			srv.eventually(t, func(v float64) bool { return v < 0.5 }, "the staleness falls once back", "mirror_staleness_seconds")
			assert.Zero(t, srv.get(t, "mirror_source_failing"))
			assert.Zero(t, srv.get(t, "mirror_lists_total", "cause", "expired"), "no relist: the history was there")

			// Cut off while etcd compacts past what the watch needs: the
			// mirror must relist.
			p.Cut()
			srv.eventually(t, func(v float64) bool { return v == 1 }, "the source is seen failing", "mirror_source_failing")
			for i := range 10 {
				_, err := direct.Delete(ctx, nthKey(prefix, i))
				require.NoError(t, err)
			}
			d, err := direct.Put(ctx, prefix+"x", "2")
			require.NoError(t, err)
			_, err = direct.Compact(ctx, d.Header.Revision, clientv3.WithCompactPhysical())
			require.NoError(t, err)
			p.Resume()
			srv.eventually(t, func(v float64) bool { return v == 1 }, "a relist because the version expired",
				"mirror_lists_total", "cause", "expired")
			srv.eventually(t, func(v float64) bool { return v == 1 }, "its size and duration",
				"mirror_list_objects_count", "cause", "expired")
			assert.Equal(t, 41.0, srv.get(t, "mirror_list_objects_sum", "cause", "expired"), "50 keys and x, less the 10 deleted")
			assert.Equal(t, 1.0, srv.get(t, "mirror_list_duration_seconds_count", "cause", "expired"))
			srv.eventually(t, func(v float64) bool { return v == float64(d.Header.Revision) },
				"the cache is at etcd's revision", "mirror_cache_resource_version")
			assert.Equal(t, 41.0, srv.get(t, "mirror_cache_objects"))
			assert.True(t, log.has(source.ErrExpired))
		})
	}
}
