package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/adapters/k8s"
	"github.com/listwatch/mirror/examples/internal/metricsrv"
	"github.com/listwatch/mirror/reconcile"
	"github.com/listwatch/mirror/source"
	"github.com/listwatch/mirror/workqueue"
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
	ctx, cancel := cfg.Context(ctx) // --duration
	defer cancel()
	p := cfg.Printer(out)
	factoryOpts := k8s.FactoryOptions{Logger: cfg.Logger()} // nil, slog's default, unless --quiet
	queueOpts := workqueue.Options{}                        // the controller's queue
	if cfg.metricsAddr != "" {
		m, stop, err := metricsrv.Serve(cfg.metricsAddr, p)
		if err != nil {
			return err
		}
		defer stop() // once the informer and the controller have stopped
		factoryOpts.Metrics, queueOpts.Metrics = m, m
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
	}, func(ns string, o k8s.Options) source.ListWatcher[*corev1.Pod] {
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
				p.Printf("add    %s/%s  %s on %q", pod.Namespace, pod.Name, pod.Status.Phase, pod.Spec.NodeName)
			}
		},
		UpdateFunc: func(old, pod *corev1.Pod) {
			p.Printf("update %s/%s  %s -> %s on %q", pod.Namespace, pod.Name, old.Status.Phase, pod.Status.Phase, pod.Spec.NodeName)
		},
		DeleteFunc: func(pod *corev1.Pod, finalStateUnknown bool) {
			how := "observed"
			if finalStateUnknown {
				how = "not observed: a relist found it gone, or re-created under a new UID"
			}
			p.Printf("delete %s/%s  last %s (%s)", pod.Namespace, pod.Name, pod.Status.Phase, how)
		},
	}, mirror.HandlerOptions{Name: "print"})
	if err != nil {
		return err
	}
	// The controller: a change just made to a Pod is reconciled ahead of
	// the initial list's and the resyncs' keys (the loop's default
	// priorities by origin).
	loop := reconcile.New[k8s.Key](newNodeCounter(inf, p), reconcile.Options{
		Name: "nodes", Workers: 2, Queue: queueOpts, Logger: cfg.Logger()})
	if _, err := reconcile.Watch(loop, inf, mirror.HandlerOptions{}); err != nil {
		return err
	}

	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	factory.Start(ctx)
	wg.Go(func() {
		if err := loop.Run(ctx); err != nil {
			p.Printf("controller: %v", err) // the cluster refused the informer for good
		}
	})

	start := time.Now()
	summary := func() { p.Summary("summary: %d pods; by namespace: %v", inf.Len(), byNamespace(inf)) }
	// WaitForSync fails if the cluster refuses us (mirror.ErrPermanent:
	// no permission to list Pods, say).
	if err := cfg.WaitForSync(ctx, p, inf, reg); err != nil {
		return cfg.Finish(ctx, fmt.Errorf("not synced: %w", err), p, summary)
	}
	p.Printf("synced %d pods in %v", inf.Len(), time.Since(start).Round(time.Millisecond))
	<-ctx.Done()
	return cfg.Finish(ctx, nil, p, summary)
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
