package main

import (
	"context"
	"maps"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/listwatch/mirror/examples/internal/cli/clitest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
)

var nodeLine = regexp.MustCompile(`(?m)^node   (\S+)  (\d+) running$`)

// printedCounts is what the controller's output says: each node's last
// printed count, the nodes printed at 0 left out.
func printedCounts(out string) map[string]int {
	counts := map[string]int{}
	for _, m := range nodeLine.FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(m[2])
		counts[m[1]] = n
		if n == 0 {
			delete(counts, m[1])
		}
	}
	return counts
}

// runningCounts is the cluster's state: the running Pods per node.
func runningCounts(t *testing.T, clientset kubernetes.Interface) map[string]int {
	list, err := clientset.CoreV1().Pods("").List(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	counts := map[string]int{}
	for _, p := range list.Items {
		if p.Status.Phase == corev1.PodRunning && p.Spec.NodeName != "" {
			counts[p.Spec.NodeName]++
		}
	}
	return counts
}

func podOn(ns, name, node string, phase corev1.PodPhase) *corev1.Pod {
	p := pod(ns, name, phase)
	p.Spec.NodeName = node
	return p
}

// The controller's output converges to the cluster's running Pods per
// node, from the initial list and through additions, phase changes, a
// Pod re-created on another node and deletions, down to a node emptied,
// which is printed at 0; and it prints a node only when its count
// changes.
func TestController_NodeCountsConvergeToTheCluster(t *testing.T) {
	clientset := fake.NewClientset(
		podOn("shop", "web-1", "node-1", corev1.PodRunning),
		podOn("shop", "web-2", "node-1", corev1.PodRunning),
		podOn("shop", "job-1", "node-2", corev1.PodSucceeded),
		podOn("kube-system", "dns", "node-2", corev1.PodRunning),
		podOn("shop", "queued", "", corev1.PodPending))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	out := &clitest.Output{}
	done := make(chan error, 1)
	go func() { done <- mirrorPods(ctx, clientset, config{}, out) }()

	converged := func(msg string) {
		t.Helper()
		want := runningCounts(t, clientset)
		require.Eventually(t, func() bool { return maps.Equal(want, printedCounts(out.String())) },
			30*time.Second, 10*time.Millisecond, "%s: want %v, output:\n%s", msg, want, out.String())
	}
	converged("initial list")
	assert.Equal(t, map[string]int{"node-1": 2, "node-2": 1}, printedCounts(out.String()))
	assert.Len(t, nodeLine.FindAllString(out.String(), -1), 2, "one line per node for the initial list")

	pods := clientset.CoreV1().Pods("shop")
	_, err := pods.Create(ctx, podOn("shop", "web-3", "node-2", corev1.PodRunning), metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = pods.UpdateStatus(ctx, podOn("shop", "queued", "node-3", corev1.PodRunning), metav1.UpdateOptions{})
	require.NoError(t, err)
	converged("added and scheduled")

	_, err = pods.UpdateStatus(ctx, podOn("shop", "web-2", "node-1", corev1.PodFailed), metav1.UpdateOptions{})
	require.NoError(t, err)
	require.NoError(t, pods.Delete(ctx, "web-1", metav1.DeleteOptions{}))
	converged("node-1 emptied")
	assert.Contains(t, out.String(), "node   node-1  0 running\n")

	// Re-created under its name on another node: counted out of the old.
	require.NoError(t, pods.Delete(ctx, "web-3", metav1.DeleteOptions{}))
	recreated := podOn("shop", "web-3", "node-3", corev1.PodRunning)
	recreated.UID = "shop-web-3-again"
	_, err = pods.Create(ctx, recreated, metav1.CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, clientset.CoreV1().Pods("kube-system").Delete(ctx, "dns", metav1.DeleteOptions{}))
	converged("moved and deleted")
	assert.Equal(t, map[string]int{"node-3": 2}, printedCounts(out.String()))

	cancel()
	require.NoError(t, <-done)
	s := out.String()
	lines := nodeLine.FindAllStringSubmatch(s, -1)
	last := map[string]string{}
	for _, m := range lines {
		assert.NotEqual(t, last[m[1]], m[2], "node %s printed twice at %s: %s", m[1], m[2], s)
		last[m[1]] = m[2]
	}
}
