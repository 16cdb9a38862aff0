package metricscompat_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/adapters/k8s"
	"github.com/listwatch/mirror/adapters/mirrorprom"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/metrics/legacyregistry"

	// As Kubernetes' binaries do: client-go's metrics, registered in
	// legacyregistry by component-base.
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
)

// clientGoInformerFamilies are the metrics client-go's informers feed in
// v0.37, labelled name, group, version and resource.
var clientGoInformerFamilies = []string{
	"informer_queued_items",
	"informer_processing_latency_seconds",
	"informer_store_resource_version",
}

// mirrorFamilies are the metrics of mirrorprom that a synced informer with
// one handler has, each labelled name (and handler, cause or kind).
var mirrorFamilies = []string{
	"mirror_cache_objects",
	"mirror_cache_resource_version",
	"mirror_queue_depth",
	"mirror_queue_adds_total",
	"mirror_apply_latency_seconds",
	"mirror_handler_backlog",
	"mirror_handler_deliveries_total",
	"mirror_handler_panics_total",
	"mirror_handler_delivery_latency_seconds",
	"mirror_lists_total",
	"mirror_list_duration_seconds",
	"mirror_list_objects",
	"mirror_watches_total",
	"mirror_watch_restarts_total",
	"mirror_watch_events_total",
	"mirror_errors_total",
	"mirror_staleness_seconds",
	"mirror_source_failing",
}

func pod(name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)}}
}

// A Kubernetes program registers client-go's informer metrics in
// component-base's legacyregistry and serves it; mirrorprom registered in
// that same registry must neither fail nor break the scrape, and both sets
// of series must come out of it, fed by informers that run.
func TestMirrorprom_SharesTheRegistryOfClientGosInformerMetrics(t *testing.T) {
	client := fake.NewClientset(pod("a"), pod("b"))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()

	// A client-go informer with an informer name, as kube-controller-manager
	// makes them: making it registers client-go's informer metrics, so
	// that a name of mirrorprom's that clashed would fail New below (the
	// other way round, client-go's registration would panic).
	informerName, err := cache.NewInformerName("metricscompat")
	require.NoError(t, err)
	defer informerName.Release()
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithInformerName(informerName))
	defer factory.Shutdown()
	clientGoAdds := make(chan string, 16)
	_, err = factory.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { clientGoAdds <- obj.(*corev1.Pod).Name },
	})
	require.NoError(t, err)

	reg := &undoRegisterer{Registerer: legacyregistry.Registerer()}
	defer reg.undo()
	metrics, err := mirrorprom.New(reg)
	require.NoError(t, err, "mirrorprom's names must not clash with client-go's")

	pods := client.CoreV1().Pods(metav1.NamespaceAll)
	inf := k8s.NewInformer(k8s.New[*corev1.Pod](pods.List, pods.Watch, k8s.Options{}), k8s.InformerOptions[*corev1.Pod]{
		Name:    "pods",
		Metrics: metrics,
	})
	mirrorAdds := make(chan string, 16)
	_, err = inf.AddEventHandler(mirror.HandlerFuncs[*corev1.Pod]{
		AddFunc: func(obj *corev1.Pod, _ bool) { mirrorAdds <- obj.Name },
	}, mirror.HandlerOptions{Name: "adds"})
	require.NoError(t, err)

	factory.Start(ctx.Done())
	runDone := make(chan error, 1)
	go func() { runDone <- inf.Run(ctx) }()
	defer func() {
		cancel()
		<-runDone
	}()

	waitAdds(t, "client-go", clientGoAdds, "a", "b")
	waitAdds(t, "mirror", mirrorAdds, "a", "b")
	// A change after the list, so that the watches feed the metrics too.
	_, err = client.CoreV1().Pods("default").Create(ctx, pod("c"), metav1.CreateOptions{})
	require.NoError(t, err)
	waitAdds(t, "client-go", clientGoAdds, "c")
	waitAdds(t, "mirror", mirrorAdds, "c")

	families, err := legacyregistry.DefaultGatherer.Gather()
	require.NoError(t, err, "the registry scrapes without error")
	byName := make(map[string]*dto.MetricFamily, len(families))
	for _, f := range families {
		byName[f.GetName()] = f
	}

	clientGo := map[string]string{"name": "metricscompat", "group": "", "version": "v1", "resource": "pods"}
	for _, name := range clientGoInformerFamilies {
		require.Contains(t, byName, name, "client-go's family")
		assert.True(t, hasSeries(byName[name], clientGo), "client-go's %s has the pods informer's series", name)
	}
	// Observed once the list's processing returned, which was before c's.
	assert.Positive(t, sample(t, byName, "informer_processing_latency_seconds", clientGo), "client-go's informer processed the list")

	mine := map[string]string{"name": "pods"}
	for _, name := range mirrorFamilies {
		require.Contains(t, byName, name, "mirrorprom's family")
		assert.True(t, hasSeries(byName[name], mine), "mirrorprom's %s has the pods informer's series", name)
	}
	for _, f := range families {
		if hasSeries(f, mine) {
			assert.True(t, strings.HasPrefix(f.GetName(), "mirror_"), "mirrorprom's %s is under mirror_", f.GetName())
		}
	}
	assert.Equal(t, 3.0, sample(t, byName, "mirror_cache_objects", mine))
	assert.Equal(t, 1.0, sample(t, byName, "mirror_lists_total", map[string]string{"name": "pods", "cause": "initial"}))
	assert.Equal(t, 1.0, sample(t, byName, "mirror_watch_events_total", mine), "c's creation")
}

// undoRegisterer registers in the process's registry and unregisters at
// the end of the test what it registered, so that the test can run again
// in the process (go test -count).
type undoRegisterer struct {
	prometheus.Registerer
	registered []prometheus.Collector
}

func (r *undoRegisterer) Register(c prometheus.Collector) error {
	if err := r.Registerer.Register(c); err != nil {
		return err
	}
	r.registered = append(r.registered, c)
	return nil
}

func (r *undoRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

func (r *undoRegisterer) undo() {
	for _, c := range r.registered {
		r.Unregister(c)
	}
}

// waitAdds waits for the handler of which to be called with the names,
// failing the test if one has not come after long enough for any machine.
func waitAdds(t *testing.T, which string, adds <-chan string, names ...string) {
	t.Helper()
	for _, want := range names {
		select {
		case got := <-adds:
			require.Equal(t, want, got, "%s's handler", which)
		case <-time.After(time.Minute):
			require.FailNow(t, fmt.Sprintf("%s's handler never got %s", which, want))
		}
	}
}

// hasSeries reports whether f has a series whose labels include labels.
func hasSeries(f *dto.MetricFamily, labels map[string]string) bool {
	for _, m := range f.GetMetric() {
		if matches(m, labels) {
			return true
		}
	}
	return false
}

func matches(m *dto.Metric, labels map[string]string) bool {
	found := 0
	for _, l := range m.GetLabel() {
		if v, ok := labels[l.GetName()]; ok {
			if v != l.GetValue() {
				return false
			}
			found++
		}
	}
	return found == len(labels)
}

// sample returns the value of the series of family name with exactly
// labels: a gauge's or counter's value, a histogram's count.
func sample(t *testing.T, byName map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	t.Helper()
	f, ok := byName[name]
	require.True(t, ok, "no family %s", name)
	for _, m := range f.GetMetric() {
		if len(m.GetLabel()) != len(labels) || !matches(m, labels) {
			continue
		}
		switch {
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue()
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue()
		case m.GetHistogram() != nil:
			return float64(m.GetHistogram().GetSampleCount())
		}
	}
	require.FailNow(t, fmt.Sprintf("no series %s%v", name, labels))
	return 0
}
