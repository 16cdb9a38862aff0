package bench

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/adapters/k8s"
	"github.com/listwatch/mirror/memsource"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// selectorPods returns n Pods shaped as a cluster's: 100 namespaces,
// Deployments of 20 replicas (labels app and pod-template-hash, as a
// ReplicaSet's selector), each with a tier and a team label.
func selectorPods(n int) []*corev1.Pod {
	pods := make([]*corev1.Pod, n)
	for i := range n {
		app := i / 20
		ns := fmt.Sprintf("ns-%d", app%100)
		pods[i] = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: fmt.Sprintf("app-%d-%d", app, i%20),
			UID: types.UID(fmt.Sprintf("uid-%d", i)), ResourceVersion: "1",
			Labels: map[string]string{
				"app":               fmt.Sprintf("app-%d", app),
				"pod-template-hash": fmt.Sprintf("h%d", app),
				"tier":              []string{"web", "api", "db"}[app%3],
				"team":              fmt.Sprintf("team-%d", app%10),
			},
		}}
	}
	return pods
}

// BenchmarkList_Selector lists the Pods a ReplicaSet's selector
// (app=app-7,pod-template-hash=h7: 20 of them) selects among 10k and 80k
// Pods, across the cluster and within the namespace:
//
//   - impl=mirror-index: k8s.Lister, served from the label index;
//   - impl=mirror-scan: every cached Pod (or the namespace's, from the
//     namespace index) matched against the selector;
//   - impl=client-go: cache.ListAll and cache.ListAllByNamespace over
//     client-go's indexer with its namespace index, which is what its
//     listers (podLister.List, Pods(ns).List) do.
//
// One op is one List; pods/op is the Pods it returns. -short lists among
// 1k and 8k Pods.
func BenchmarkList_Selector(b *testing.B) {
	sel := labels.SelectorFromSet(labels.Set{"app": "app-7", "pod-template-hash": "h7"})
	const ns = "ns-7"
	for _, n := range []int{scaled(10_000), scaled(80_000)} {
		pods := selectorPods(n)
		inf, stop := syncedPodInformer(b, pods)
		lister, err := k8s.NewLister(inf)
		if err != nil {
			b.Fatal(err)
		}
		cg := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
		for _, p := range pods {
			if err := cg.Add(p); err != nil {
				b.Fatal(err)
			}
		}
		impls := []struct {
			name      string
			all, inNS func() int
		}{
			{"mirror-index",
				func() int { return len(lister.List(sel)) },
				func() int { return len(lister.Namespace(ns).List(sel)) }},
			{"mirror-scan",
				func() int {
					c := 0
					for _, p := range inf.All() {
						if sel.Matches(labels.Set(p.Labels)) {
							c++
						}
					}
					return c
				},
				func() int {
					c := 0
					for _, p := range inf.ByIndexAll(k8s.NamespaceIndex, ns) {
						if sel.Matches(labels.Set(p.Labels)) {
							c++
						}
					}
					return c
				}},
			{"client-go",
				func() int {
					c := 0
					_ = cache.ListAll(cg, sel, func(any) { c++ })
					return c
				},
				func() int {
					c := 0
					_ = cache.ListAllByNamespace(cg, ns, sel, func(any) { c++ })
					return c
				}},
		}
		for _, scope := range []string{"cluster", "namespace"} {
			for _, im := range impls {
				list := im.all
				if scope == "namespace" {
					list = im.inNS
				}
				b.Run(fmt.Sprintf("pods=%dk/scope=%s/impl=%s", n/1000, scope, im.name), func(b *testing.B) {
					b.ReportAllocs()
					got := 0
					for b.Loop() {
						got = list()
					}
					if got != 20 {
						b.Fatalf("listed %d Pods, want 20", got)
					}
					b.ReportMetric(float64(got), "pods/op")
				})
			}
		}
		stop()
	}
}

// syncedPodInformer returns a synced k8s informer of pods, and a function
// that stops it.
func syncedPodInformer(b *testing.B, pods []*corev1.Pod) (*mirror.Informer[k8s.Key, *corev1.Pod], func()) {
	b.Helper()
	src := memsource.New(k8s.StringKeyOf[*corev1.Pod], memsource.Options{})
	for _, p := range pods {
		if _, err := src.Put(p); err != nil {
			b.Fatal(err)
		}
	}
	inf := k8s.NewInformer[*corev1.Pod](src, k8s.InformerOptions[*corev1.Pod]{Logger: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = inf.Run(ctx)
	}()
	if err := inf.WaitForSync(ctx); err != nil {
		b.Fatal(err)
	}
	return inf, func() { cancel(); <-done }
}
