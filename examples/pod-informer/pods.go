package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/adapters/k8s"
	"github.com/listwatch/mirror/adapters/mirrorprom"
	"github.com/listwatch/mirror/reconcile"
	"github.com/listwatch/mirror/workqueue"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
)

// mirrorPods mirrors the Pods that clientset reaches, printing every change
// to out, and runs a controller over them that prints each node's number
// of running Pods when it changes, until ctx ends; then it prints how many
// Pods each namespace has. The informer, the controller's handler and its
// workers share ctx: when it ends the loop stops its workers and removes
// its handler, the informer stops, and mirrorPods returns once all have.
func mirrorPods(ctx context.Context, clientset kubernetes.Interface, cfg config, out io.Writer) error {
	p := &printer{out: out}
	var metrics http.Handler
	var factoryOpts k8s.FactoryOptions
	var queueOpts workqueue.Options // the controller's queue
	if cfg.metricsAddr != "" {
		m, h, err := newMetrics()
		if err != nil {
			return err
		}
		factoryOpts.Metrics, queueOpts.Metrics, metrics = m, m, h
	}
	// The factory shares one informer among every part of the program
	// that asks for the same Pods, and stops it when the last releases it.
	factory := k8s.NewFactory(factoryOpts)
	defer factory.Shutdown()
	pods, err := k8s.Typed(factory, k8s.Request[*corev1.Pod]{
		Name: "pods",
		Resource: k8s.Resource{GVR: corev1.SchemeGroupVersion.WithResource("pods"),
			Namespace: cfg.namespace, LabelSelector: cfg.selector},
		// No controller here reads managedFields: do not hold them.
		StripManagedFields: true,
	}, func(ns string, o k8s.Options) mirror.ListWatcher[*corev1.Pod] {
		pods := clientset.CoreV1().Pods(ns)
		return k8s.New[*corev1.Pod](pods.List, pods.Watch, o)
	})
	if err != nil {
		return err
	}
	defer pods.Release()
	inf := pods.Informer()
	if err := inf.AddIndexers(mirror.Indexers[*corev1.Pod]{runningOnIndex: indexRunningOn}); err != nil {
		return err
	}
	reg, err := pods.AddEventHandler(mirror.HandlerFuncs[*corev1.Pod]{
		AddFunc: func(pod *corev1.Pod, initial bool) {
			if !initial {
				p.printf("add    %s/%s  %s on %q", pod.Namespace, pod.Name, pod.Status.Phase, pod.Spec.NodeName)
			}
		},
		UpdateFunc: func(old, pod *corev1.Pod) {
			p.printf("update %s/%s  %s -> %s on %q", pod.Namespace, pod.Name, old.Status.Phase, pod.Status.Phase, pod.Spec.NodeName)
		},
		DeleteFunc: func(pod *corev1.Pod, finalStateUnknown bool) {
			how := "observed"
			if finalStateUnknown {
				how = "not observed: a relist found it gone, or re-created under a new UID"
			}
			p.printf("delete %s/%s  last %s (%s)", pod.Namespace, pod.Name, pod.Status.Phase, how)
		},
	}, mirror.HandlerOptions{Name: "print"})
	if err != nil {
		return err
	}
	// The controller: a change just made to a Pod is reconciled ahead of
	// the initial list's and the resyncs' keys (the loop's default
	// priorities by origin).
	loop := reconcile.New[k8s.Key](newNodeCounter(inf, p), reconcile.Options{Name: "nodes", Workers: 2, Queue: queueOpts})
	if _, err := reconcile.Watch(loop, inf, mirror.HandlerOptions{}); err != nil {
		return err
	}

	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	if cfg.metricsAddr != "" {
		ln, err := net.Listen("tcp", cfg.metricsAddr)
		if err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
		srv := &http.Server{Handler: metrics, ReadHeaderTimeout: 10 * time.Second}
		wg.Go(func() {
			if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				p.printf("metrics: %v", err)
			}
		})
		context.AfterFunc(ctx, func() { srv.Close() })
		p.printf("serving metrics at http://%s/metrics", ln.Addr())
	}
	factory.Start(ctx)

	wg.Go(func() {
		if err := loop.Run(ctx); err != nil {
			p.printf("controller: %v", err) // the cluster refused the informer for good
		}
	})

	start := time.Now()
	if err := mirror.WaitForCacheSync(ctx, reg); err != nil {
		// ctx ended, or the cluster refuses us (mirror.ErrPermanent:
		// no permission to list Pods, say).
		return fmt.Errorf("not synced: %w", err)
	}
	p.printf("synced %d pods in %v", inf.Len(), time.Since(start).Round(time.Millisecond))
	<-ctx.Done()
	p.printf("pods by namespace: %v", byNamespace(inf))
	return nil
}

// byNamespace returns "namespace=count" for every namespace with Pods, in
// order, read from the namespace index.
func byNamespace(inf *mirror.Informer[k8s.Key, *corev1.Pod]) []string {
	namespaces := inf.ListIndexFuncValues(k8s.NamespaceIndex)
	slices.Sort(namespaces)
	counts := make([]string, 0, len(namespaces))
	for _, ns := range namespaces {
		keys, err := inf.IndexKeys(k8s.NamespaceIndex, ns)
		if err != nil {
			continue // cannot happen: NewInformer makes the index
		}
		counts = append(counts, fmt.Sprintf("%s=%d", ns, len(keys)))
	}
	return counts
}

// newMetrics returns the Metrics to give the informer and what serves
// them, with the Go runtime's and the process's, at /metrics.
func newMetrics() (*mirrorprom.Metrics, http.Handler, error) {
	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m, err := mirrorprom.New(registry)
	if err != nil {
		return nil, nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	return m, mux, nil
}

// printer serialises output from the handler and the main goroutine.
type printer struct {
	mu  sync.Mutex
	out io.Writer
}

func (p *printer) printf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.out, format+"\n", args...)
}
