package metricscompat_test

import (
	"context"
	"strings"
	"testing"

	"github.com/listwatch/mirror/adapters/mirrorprom"
	"github.com/listwatch/mirror/workqueue"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientgoworkqueue "k8s.io/client-go/util/workqueue"
	"k8s.io/component-base/metrics/legacyregistry"

	// As Kubernetes' controller managers do: client-go's workqueue
	// metrics, registered in legacyregistry by component-base when the
	// first named queue is made.
	_ "k8s.io/component-base/metrics/prometheus/workqueue"
)

// clientGoWorkqueueFamilies are the metrics client-go's workqueues feed in
// v0.37, labelled name.
var clientGoWorkqueueFamilies = []string{
	"workqueue_depth",
	"workqueue_adds_total",
	"workqueue_queue_duration_seconds",
	"workqueue_work_duration_seconds",
	"workqueue_unfinished_work_seconds",
	"workqueue_longest_running_processor_seconds",
	"workqueue_retries_total",
}

// mirrorWorkqueueFamilies are the metrics of mirrorprom that a workqueue
// that handed out a key and had it done has, each labelled name (and
// priority).
var mirrorWorkqueueFamilies = []string{
	"mirror_workqueue_depth",
	"mirror_workqueue_delayed",
	"mirror_workqueue_in_process",
	"mirror_workqueue_adds_total",
	"mirror_workqueue_retries_total",
	"mirror_workqueue_longest_running_seconds",
	"mirror_workqueue_unfinished_work_seconds",
	"mirror_workqueue_wait_duration_seconds",
	"mirror_workqueue_work_duration_seconds",
}

// A Kubernetes controller registers client-go's workqueue metrics in
// component-base's legacyregistry; mirrorprom registered in that same
// registry must neither fail nor break the scrape, and the series of both
// queues must come out of it.
func TestMirrorprom_SharesTheRegistryOfClientGosWorkqueueMetrics(t *testing.T) {
	// Making a named client-go queue registers client-go's workqueue
	// metrics, so that a name of mirrorprom's that clashed would fail New
	// below (the other way round, client-go's registration would panic).
	clientGo := clientgoworkqueue.NewTypedRateLimitingQueueWithConfig(
		clientgoworkqueue.DefaultTypedControllerRateLimiter[string](),
		clientgoworkqueue.TypedRateLimitingQueueConfig[string]{Name: "metricscompat"})
	defer clientGo.ShutDown()

	reg := &undoRegisterer{Registerer: legacyregistry.Registerer()}
	defer reg.undo()
	metrics, err := mirrorprom.New(reg)
	require.NoError(t, err, "mirrorprom's names must not clash with client-go's")
	mine := workqueue.New[string](workqueue.Options{Name: "orders", Metrics: metrics})
	defer mine.ShutDown()

	// client-go's series outlive its queues, in the process's registry.
	theirs := map[string]string{"name": "metricscompat"}
	addsBefore := sample(t, gather(t), "workqueue_adds_total", theirs)

	clientGo.Add("a")
	key, shutdown := clientGo.Get()
	require.False(t, shutdown)
	clientGo.Done(key)
	mine.Add("a")
	mine.AddWithPriority("b", workqueue.PriorityBackground)
	key, err = mine.Get(context.Background())
	require.NoError(t, err)
	mine.Done(key)

	byName := gather(t)
	for _, name := range clientGoWorkqueueFamilies {
		require.Contains(t, byName, name, "client-go's family")
		assert.True(t, hasSeries(byName[name], theirs), "client-go's %s has the queue's series", name)
	}
	assert.Equal(t, addsBefore+1, sample(t, byName, "workqueue_adds_total", theirs))

	ours := map[string]string{"name": "orders"}
	for _, name := range mirrorWorkqueueFamilies {
		require.Contains(t, byName, name, "mirrorprom's family")
		assert.True(t, hasSeries(byName[name], ours), "mirrorprom's %s has the queue's series", name)
	}
	for _, f := range byName {
		if hasSeries(f, ours) {
			assert.True(t, strings.HasPrefix(f.GetName(), "mirror_"), "mirrorprom's %s is under mirror_", f.GetName())
		}
	}
	assert.Equal(t, 2.0, sample(t, byName, "mirror_workqueue_adds_total", ours))
	assert.Equal(t, 1.0, sample(t, byName, "mirror_workqueue_depth", map[string]string{"name": "orders", "priority": "background"}))
	assert.Equal(t, 1.0, sample(t, byName, "mirror_workqueue_work_duration_seconds", ours), "a's work, timed")
}

// gather scrapes the process's registry, by family name.
func gather(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	families, err := legacyregistry.DefaultGatherer.Gather()
	require.NoError(t, err, "the registry scrapes without error")
	byName := make(map[string]*dto.MetricFamily, len(families))
	for _, f := range families {
		byName[f.GetName()] = f
	}
	return byName
}
