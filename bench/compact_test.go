package bench

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/adapters/k8s"
	corev1 "k8s.io/api/core/v1"
)

func newPod() *corev1.Pod { return new(corev1.Pod) }

// runCompactPods runs a compact informer of the Pods, transformed by
// transform before encoding, and waits until it has synced.
func runCompactPods(w *wirePods, transform func(*corev1.Pod) (*corev1.Pod, error)) (*mirror.Informer[k8s.Key, *k8s.Compact[*corev1.Pod]], func()) {
	lw := k8s.CompactListWatcher[*corev1.Pod](podSource[*corev1.Pod]{w, newPod}, newPod, transform)
	inf := k8s.NewCompactInformer(lw, mirror.InformerOptions[k8s.Key, *k8s.Compact[*corev1.Pod]]{Logger: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = inf.Run(ctx)
	}()
	if err := inf.WaitForSync(ctx); err != nil {
		panic(err)
	}
	return inf, func() { cancel(); <-done }
}

func startCompactPods(w *wirePods, transform func(*corev1.Pod) (*corev1.Pod, error)) func() {
	_, stop := runCompactPods(w, transform)
	return stop
}

// BenchmarkCompact_Read measures the cost of reading the compact cache
// against the default one, over 10k realistic Pods (managedFields
// stripped in both): a Get by key (impl=compact decodes the Pod; p50-ns
// and p99-ns are the percentiles of single Gets), and a List of one
// namespace's 100 Pods from the namespace index (decoding each).
func BenchmarkCompact_Read(b *testing.B) {
	const n = 10_000
	w := newWirePods(n)
	keys := make([]k8s.Key, n)
	for i := range keys {
		p := realisticPod(i)
		keys[i] = k8s.Key{Namespace: p.Namespace, Name: p.Name}
	}
	compact, stopCompact := runCompactPods(w, k8s.StripManagedFields[*corev1.Pod])
	defer stopCompact()
	plain := k8s.NewInformer[*corev1.Pod](podSource[*corev1.Pod]{w, newPod},
		k8s.InformerOptions[*corev1.Pod]{Transform: k8s.StripManagedFields[*corev1.Pod], Logger: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = plain.Run(ctx) }()
	defer func() { cancel(); <-done }()
	if err := plain.WaitForSync(ctx); err != nil {
		b.Fatal(err)
	}

	gets := map[string]func(k8s.Key) *corev1.Pod{
		"default": func(k k8s.Key) *corev1.Pod { p, _ := plain.GetByKey(k); return p },
		"compact": func(k k8s.Key) *corev1.Pod {
			c, _ := compact.GetByKey(k)
			p, err := c.Object()
			if err != nil {
				b.Fatal(err)
			}
			return p
		},
	}
	for _, impl := range []string{"default", "compact"} {
		get := gets[impl]
		b.Run("op=get/impl="+impl, func(b *testing.B) {
			b.ReportAllocs()
			var took []time.Duration
			i := 0
			for b.Loop() {
				t0 := time.Now()
				if get(keys[i%n]) == nil {
					b.Fatal("no Pod")
				}
				if len(took) < 1_000_000 {
					took = append(took, time.Since(t0))
				}
				i++
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Nanoseconds()), "p50-ns")
			b.ReportMetric(float64(took[len(took)*99/100].Nanoseconds()), "p99-ns")
		})
	}
	lists := map[string]func(ns string) int{
		"default": func(ns string) int { l, _ := plain.ByIndex(k8s.NamespaceIndex, ns); return len(l) },
		"compact": func(ns string) int {
			l, _ := compact.ByIndex(k8s.NamespaceIndex, ns)
			for _, c := range l {
				if _, err := c.Object(); err != nil {
					b.Fatal(err)
				}
			}
			return len(l)
		},
	}
	for _, impl := range []string{"default", "compact"} {
		list := lists[impl]
		b.Run("op=list-namespace/impl="+impl, func(b *testing.B) {
			b.ReportAllocs()
			got := 0
			for b.Loop() {
				got = list("ns-7")
			}
			b.ReportMetric(float64(got), "pods/op")
		})
	}
}

// BenchmarkCompact_Sync measures the time from Run to synced of an
// informer of realistic Pods (managedFields kept), decoded off the wire
// as JSON or as protobuf by the source, as a client does, at 10k Pods
// (and 100k with -pods100k): client-go's shared index informer, mirror's
// k8s.NewInformer (default) and k8s.NewCompactInformer (compact). The
// implementations run in turn within each count, so -count interleaves
// them. One op builds, syncs and stops the informer; pods/s is its rate.
func BenchmarkCompact_Sync(b *testing.B) {
	sizes := []int{scaled(10_000)}
	if *pods100k {
		sizes = append(sizes, 100_000)
	}
	for _, n := range sizes {
		for _, wire := range []string{"json", "protobuf"} {
			var w *wirePods
			if wire == "json" {
				w = newWirePods(n)
			} else {
				w = newProtoWirePods(n)
			}
			impls := []struct {
				name  string
				start func() func()
			}{
				{"client-go", func() func() { return startClientGoPods(w, nil) }},
				{"default", func() func() { return startMirrorPods(podSource[*corev1.Pod]{w, newPod}, nil) }},
				{"compact", func() func() { return startCompactPods(w, nil) }},
			}
			for _, im := range impls {
				b.Run(fmt.Sprintf("pods=%s/wire=%s/impl=%s", thousands(n), wire, im.name), func(b *testing.B) {
					b.ReportAllocs()
					runtime.GC()
					for b.Loop() {
						im.start()()
					}
					b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "pods/s")
				})
			}
		}
	}
}
