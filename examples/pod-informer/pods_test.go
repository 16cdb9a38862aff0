package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
)

// lines is an io.Writer that hands each line written to it to a channel.
type lines struct {
	mu  sync.Mutex
	all bytes.Buffer
	ch  chan string
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.all.Write(p)
	for _, line := range strings.Split(strings.TrimSuffix(string(p), "\n"), "\n") {
		l.ch <- line
	}
	return len(p), nil
}

// next returns the next line, failing the test if none comes.
func (l *lines) next(t *testing.T) string {
	t.Helper()
	select {
	case line := <-l.ch:
		return line
	case <-time.After(30 * time.Second):
		require.FailNow(t, "no output")
		return ""
	}
}

// until returns the first line that matches re, skipping the others.
func (l *lines) until(t *testing.T, re string) string {
	t.Helper()
	for {
		if line := l.next(t); regexp.MustCompile(re).MatchString(line) {
			return line
		}
	}
}

// event matches the lines of the printing handler, not the controller's.
const event = `^(add|update|delete) `

func pod(ns, name string, phase corev1.PodPhase) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "-" + name)},
		Spec:       corev1.PodSpec{NodeName: "node-1"},
		Status:     corev1.PodStatus{Phase: phase},
	}
}

// The program prints the Pods' changes, serves its metrics and, when
// interrupted, prints the Pods by namespace and succeeds. A fake clientset
// stands in for a cluster.
func TestMirrorPods_PrintsChangesServesMetricsAndStopsCleanly(t *testing.T) {
	clientset := fake.NewClientset(
		pod("shop", "web-1", corev1.PodRunning), pod("shop", "web-2", corev1.PodRunning), pod("kube-system", "dns", corev1.PodRunning))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	out := &lines{ch: make(chan string, 1000)}
	done := make(chan error, 1)
	go func() {
		done <- mirrorPods(ctx, clientset, config{metricsAddr: "127.0.0.1:0"}, out)
	}()

	addr := regexp.MustCompile(`serving metrics at (\S+)`).FindStringSubmatch(out.until(t, "serving metrics"))[1]
	assert.Equal(t, "synced 3 pods", strings.SplitN(out.until(t, "^synced"), " in ", 2)[0])

	pods := clientset.CoreV1().Pods("shop")
	_, err := pods.Create(ctx, pod("shop", "web-3", corev1.PodPending), metav1.CreateOptions{})
	require.NoError(t, err)
	assert.Equal(t, `add    shop/web-3  Pending on "node-1"`, out.until(t, event))
	_, err = pods.UpdateStatus(ctx, pod("shop", "web-3", corev1.PodRunning), metav1.UpdateOptions{})
	require.NoError(t, err)
	assert.Equal(t, `update shop/web-3  Pending -> Running on "node-1"`, out.until(t, event))
	require.NoError(t, pods.Delete(ctx, "web-1", metav1.DeleteOptions{}))
	assert.Equal(t, `delete shop/web-1  last Running (observed)`, out.until(t, event))

	resp, err := http.Get(addr)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	// The informer applied the deletion before the handler printed it,
	// and counted its list before it watched.
	assert.Contains(t, string(body), `mirror_cache_objects{name="pods"} 3`+"\n")
	assert.Contains(t, string(body), `mirror_lists_total{cause="initial",name="pods"} 1`+"\n")
	assert.Contains(t, string(body), `mirror_handler_deliveries_total{handler="print",name="pods"} `)
	assert.Contains(t, string(body), `mirror_workqueue_adds_total{name="nodes"} `, "the controller's queue")
	assert.Contains(t, string(body), "go_goroutines ")

	cancel()
	require.NoError(t, <-done)
	assert.Equal(t, "pods by namespace: [kube-system=1 shop=2]", out.until(t, "^pods by namespace"))
}

func TestRun_HelpSucceeds(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(t.Context(), []string{"--help"}, &out))
	assert.Contains(t, out.String(), "-kubeconfig")
}

func TestRun_RejectsBadFlagsAndAMissingKubeconfig(t *testing.T) {
	var out bytes.Buffer
	require.Error(t, run(t.Context(), []string{"stray"}, &out))
	require.Error(t, run(t.Context(), []string{"--no-such-flag"}, &out))
	require.ErrorContains(t, run(t.Context(), []string{"--kubeconfig", t.TempDir() + "/missing"}, &out), "kubeconfig")
}
