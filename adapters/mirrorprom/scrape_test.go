package mirrorprom_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
)

// scrape is what one scrape returned: every sample by series, a
// histogram as its _count and _sum, and each family's type.
type scrape struct {
	values map[string]float64
	types  map[string]dto.MetricType
}

// key names a series as the text format does, labels sorted:
// key("x", "name", "a", "cause", "b") is `x{cause="b",name="a"}`.
func key(name string, labels ...string) string {
	var pairs []string
	for i := 0; i+1 < len(labels); i += 2 {
		pairs = append(pairs, labels[i]+"="+`"`+labels[i+1]+`"`)
	}
	slices.Sort(pairs)
	return name + "{" + strings.Join(pairs, ",") + "}"
}

// get returns the sample of a series, failing the test if there is none.
func (s scrape) get(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	v, ok := s.values[key(name, labels...)]
	require.True(t, ok, "no series %s in the scrape", key(name, labels...))
	return v
}

// has reports whether the scrape holds a series.
func (s scrape) has(name string, labels ...string) bool {
	_, ok := s.values[key(name, labels...)]
	return ok
}

// named returns the keys of the series that carry the label name=value.
func (s scrape) named(value string) []string {
	var keys []string
	for k := range s.values {
		if strings.Contains(k, `name="`+value+`"`) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// parseScrape reads Prometheus' text format.
func parseScrape(body io.Reader) (scrape, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(body)
	if err != nil {
		return scrape{}, err
	}
	s := scrape{values: map[string]float64{}, types: map[string]dto.MetricType{}}
	for name, f := range families {
		s.types[name] = f.GetType()
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName(), l.GetValue())
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				s.values[key(name, labels...)] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				s.values[key(name, labels...)] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				s.values[key(name+"_count", labels...)] = float64(m.GetHistogram().GetSampleCount())
				s.values[key(name+"_sum", labels...)] = m.GetHistogram().GetSampleSum()
			}
		}
	}
	return s, nil
}

// handler is what a program serves at /metrics.
func handler(registry *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(registry, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError})
}

// scrapeHandler scrapes registry through promhttp's handler, in this
// goroutine: no socket, so that it works in a synctest bubble.
func scrapeHandler(t *testing.T, registry *prometheus.Registry) scrape {
	t.Helper()
	rec := httptest.NewRecorder()
	handler(registry).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	s, err := parseScrape(rec.Body)
	require.NoError(t, err)
	return s
}

// scrapeURL scrapes a server over the network, as Prometheus does.
func scrapeURL(t *testing.T, url string) scrape {
	t.Helper()
	s, err := tryScrapeURL(url)
	require.NoError(t, err)
	return s
}

// tryScrapeURL is scrapeURL for a goroutine other than the test's.
func tryScrapeURL(url string) (scrape, error) {
	resp, err := http.Get(url)
	if err != nil {
		return scrape{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return scrape{}, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return parseScrape(resp.Body)
}
