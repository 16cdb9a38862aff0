package main

import (
	"context"
	"sync"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/adapters/k8s"
	"github.com/listwatch/mirror/examples/internal/cli"
	"github.com/listwatch/mirror/reconcile"
	corev1 "k8s.io/api/core/v1"
)

// runningOnIndex indexes the running Pods by the node they run on: a Pod
// that is not running, or not yet scheduled, is in no entry.
const runningOnIndex = "running-on"

func indexRunningOn(pod *corev1.Pod) ([]string, error) {
	if pod.Status.Phase != corev1.PodRunning || pod.Spec.NodeName == "" {
		return nil, nil
	}
	return []string{pod.Spec.NodeName}, nil
}

// nodeCounter is the controller's reconciler: it keeps, per node, the
// number of running Pods it last printed, and prints a node's line when
// that number changes. Reconcile reads the cache, not the change, so
// calling it again for a key changes nothing, and a Pod deleted, moved or
// no longer running is counted out wherever it was.
type nodeCounter struct {
	inf *mirror.Informer[k8s.Key, *corev1.Pod]
	p   *cli.Printer

	mu      sync.Mutex
	lastOn  map[k8s.Key]string // the node each Pod was last reconciled on
	printed map[string]int     // the count last printed for each node
}

func newNodeCounter(inf *mirror.Informer[k8s.Key, *corev1.Pod], p *cli.Printer) *nodeCounter {
	return &nodeCounter{inf: inf, p: p, lastOn: map[k8s.Key]string{}, printed: map[string]int{}}
}

// Reconcile recounts the running Pods of the node key's Pod runs on now
// and of the node it ran on when last reconciled, from the index.
func (c *nodeCounter) Reconcile(_ context.Context, key k8s.Key) (reconcile.Result, error) {
	c.mu.Lock() // several workers may reconcile Pods of one node at once
	defer c.mu.Unlock()
	node := ""
	if pod, ok := c.inf.GetByKey(key); ok && pod.Status.Phase == corev1.PodRunning {
		node = pod.Spec.NodeName
	}
	nodes := []string{node}
	if prev, ok := c.lastOn[key]; ok && prev != node {
		nodes = append(nodes, prev)
	}
	if node == "" {
		delete(c.lastOn, key)
	} else {
		c.lastOn[key] = node
	}
	for _, n := range nodes {
		if n == "" {
			continue
		}
		keys, err := c.inf.IndexKeys(runningOnIndex, n)
		if err != nil {
			return reconcile.Result{}, reconcile.Terminal(err) // no such index: a bug
		}
		if was, ok := c.printed[n]; ok && was == len(keys) || !ok && len(keys) == 0 {
			continue
		}
		c.printed[n] = len(keys)
		c.p.Printf("node   %s  %d running", n, len(keys))
	}
	return reconcile.Result{}, nil
}
