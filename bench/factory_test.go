package bench

import (
	"context"
	"log/slog"
	"runtime"
	"testing"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/adapters/k8s"
	"github.com/listwatch/mirror/source"
	corev1 "k8s.io/api/core/v1"
)

// BenchmarkFactory_ReleaseFreesTheCache acquires an informer of 10k
// realistic Pods (1k with -short) from a k8s.Factory for two consumers,
// syncs it, and releases both. held-MB is the live heap the synced
// informer held; left-% is the heap left after the last release over
// the heap before the acquisitions, in percent of what the informer held
// (the target: within 5%); goroutines-left is the goroutines left over
// those before.
func BenchmarkFactory_ReleaseFreesTheCache(b *testing.B) {
	n := scaled(10_000)
	w := newWirePods(n)
	newLW := func(string, k8s.Options) source.ListWatcher[*corev1.Pod] {
		return podSource[*corev1.Pod]{w, newPod}
	}
	req := k8s.Request[*corev1.Pod]{Resource: k8s.Resource{GVR: corev1.SchemeGroupVersion.WithResource("pods")}}
	b.ReportAllocs()
	var held, left float64
	var goroutines int
	for b.Loop() {
		f := k8s.NewFactory(k8s.FactoryOptions{Logger: slog.New(slog.DiscardHandler)})
		f.Start(context.Background())
		g0, before := runtime.NumGoroutine(), heapAlloc()
		h1, err := k8s.Typed(f, req, newLW)
		if err != nil {
			b.Fatal(err)
		}
		h2, err := k8s.Typed(f, req, newLW)
		if err != nil {
			b.Fatal(err)
		}
		if err := mirror.WaitForCacheSync(context.Background(), h1, h2); err != nil {
			b.Fatal(err)
		}
		synced := heapAlloc()
		h1.Release()
		h2.Release()
		after := heapAlloc()
		held += float64(synced) - float64(before)
		left += (float64(after) - float64(before)) / (float64(synced) - float64(before)) * 100
		goroutines += runtime.NumGoroutine() - g0
		f.Shutdown()
	}
	b.ReportMetric(held/float64(b.N)/1e6, "held-MB")
	b.ReportMetric(left/float64(b.N), "left-%")
	b.ReportMetric(float64(goroutines)/float64(b.N), "goroutines-left")
}
