package bench

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/listwatch/mirror/source"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/adapters/k8s"
	corev1 "k8s.io/api/core/v1"
)

func newPod() *corev1.Pod { return new(corev1.Pod) }

// runCompactPods runs a compact informer of the Pods, transformed by
// transform before encoding, and waits until it has synced. Pods on a
// protobuf wire are kept as they arrived unless there is a transform or
// reencode is set: then they are decoded and encoded again.
func runCompactPods(w *wirePods, transform func(*corev1.Pod) (*corev1.Pod, error), reencode bool) (*mirror.Informer[k8s.Key, *k8s.Compact[*corev1.Pod]], func()) {
	var src source.ListWatcher[*corev1.Pod] = podSource[*corev1.Pod]{w, newPod}
	if w.proto != nil && !reencode {
		src = encodedPodSource{podSource[*corev1.Pod]{w, newPod}}
	}
	lw := k8s.CompactListWatcher[*corev1.Pod](src, newPod, transform)
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
	_, stop := runCompactPods(w, transform, false)
	return stop
}

// encodedPodSource is a podSource of Pods on a protobuf wire that also
// lists them as their encodings (k8s.EncodedListWatcher), each sharing the
// wire's bytes, as items cut from a page read off the network would.
type encodedPodSource struct{ podSource[*corev1.Pod] }

func (s encodedPodSource) ListEncoded(context.Context, source.ListOptions) (source.ListResult[[]byte], error) {
	return source.ListResult[[]byte]{Items: slices.Clone(s.w.proto), ResourceVersion: "100000000"}, nil
}

func (s encodedPodSource) WatchEncoded(ctx context.Context, _ source.WatchOptions) (source.Watcher[[]byte], error) {
	return &idleWatcher[[]byte]{ctx: ctx}, nil
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
	compact, stopCompact := runCompactPods(w, k8s.StripManagedFields[*corev1.Pod], false)
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
		"compact-shared": func(k k8s.Key) *corev1.Pod {
			c, _ := compact.GetByKey(k)
			p, err := c.Shared()
			if err != nil {
				b.Fatal(err)
			}
			return p
		},
	}
	for _, impl := range []string{"default", "compact", "compact-shared"} {
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
		"compact-shared": func(ns string) int {
			l, _ := compact.ByIndex(k8s.NamespaceIndex, ns)
			for _, c := range l {
				if _, err := c.Shared(); err != nil {
					b.Fatal(err)
				}
			}
			return len(l)
		},
	}
	for _, impl := range []string{"default", "compact", "compact-shared"} {
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
// k8s.NewInformer (default) and k8s.NewCompactInformer (compact; on the
// protobuf wire it keeps the encodings as they arrived, and
// compact-reencoded decodes and encodes them again, as it must over a
// source that cannot hand them out). The
// implementations run in turn within each count, so -count interleaves
// them. One op builds, syncs and stops the informer; pods/s is its rate.
func BenchmarkCompact_Sync(b *testing.B) {
	sizes := []int{scaled(10_000)}
	if *pods100k {
		sizes = append(sizes, 100_000)
	}
	for _, n := range sizes {
		for _, wire := range []string{"json", "protobuf"} {
			// Made once, and only if a benchmark of the wire runs.
			wireOf := sync.OnceValue(func() *wirePods {
				if wire == "json" {
					return newWirePods(n)
				}
				return newProtoWirePods(n)
			})
			impls := []struct {
				name  string
				start func() func()
			}{
				{"client-go", func() func() { return startClientGoPods(wireOf(), nil) }},
				{"default", func() func() { return startMirrorPods(podSource[*corev1.Pod]{wireOf(), newPod}, nil) }},
				{"compact", func() func() { return startCompactPods(wireOf(), nil) }},
			}
			if wire == "protobuf" {
				// A source that cannot hand out the encodings.
				impls = append(impls, struct {
					name  string
					start func() func()
				}{"compact-reencoded", func() func() { _, stop := runCompactPods(wireOf(), nil, true); return stop }})
			}
			for _, im := range impls {
				b.Run(fmt.Sprintf("pods=%s/wire=%s/impl=%s", thousands(n), wire, im.name), func(b *testing.B) {
					b.ReportAllocs()
					wireOf()
					runtime.GC()
					b.ResetTimer()
					for b.Loop() {
						im.start()()
					}
					b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "pods/s")
				})
			}
		}
	}
}

// TestCompact_EveryReadEqualsThePodStored reads every Pod of a compact
// informer with Object and with Shared, twice (the second time the
// shared runs are decoded already), and compares each read with the Pod
// the source holds, for bench's realistic and varied Pods, with and
// without managedFields.
func TestCompact_EveryReadEqualsThePodStored(t *testing.T) {
	const n = 400 // 20 ReplicaSets
	for _, gen := range []struct {
		name string
		pod  func(int) *corev1.Pod
	}{{"realistic", realisticPod}, {"varied", variedPod}} {
		for _, strip := range []bool{false, true} {
			t.Run(fmt.Sprintf("pods=%s/stripped=%t", gen.name, strip), func(t *testing.T) {
				w := &wirePods{proto: make([][]byte, n)}
				want := make(map[k8s.Key]*corev1.Pod, n)
				for i := range n {
					p := gen.pod(i)
					if strip {
						p.ManagedFields = nil
					}
					b, err := p.Marshal()
					if err != nil {
						t.Fatal(err)
					}
					w.proto[i] = b
					p = new(corev1.Pod)
					if err := p.Unmarshal(b); err != nil {
						t.Fatal(err)
					}
					want[k8s.Key{Namespace: p.Namespace, Name: p.Name}] = p
				}
				inf, stop := runCompactPods(w, nil, false)
				defer stop()
				if inf.Len() != n {
					t.Fatalf("%d Pods cached, want %d", inf.Len(), n)
				}
				for range 2 {
					for key, p := range want {
						c, ok := inf.GetByKey(key)
						if !ok {
							t.Fatalf("%s not cached", key)
						}
						for read, get := range map[string]func() (*corev1.Pod, error){"Object": c.Object, "Shared": c.Shared} {
							got, err := get()
							if err != nil {
								t.Fatalf("%s: %s: %v", key, read, err)
							}
							if !reflect.DeepEqual(p, got) {
								t.Fatalf("%s: %s: not the Pod stored", key, read)
							}
						}
					}
				}
			})
		}
	}
}
