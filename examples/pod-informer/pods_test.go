package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/listwatch/mirror/examples/internal/cli/clitest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
)

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
	out := &clitest.Output{}
	done := make(chan error, 1)
	go func() {
		done <- mirrorPods(ctx, clientset, config{metricsAddr: "127.0.0.1:0"}, out)
	}()

	addr := regexp.MustCompile(`serving metrics at (\S+)`).FindStringSubmatch(out.Until(t, "serving metrics"))[1]
	assert.Equal(t, "synced 3 pods", strings.SplitN(out.Until(t, "^synced"), " in ", 2)[0])

	pods := clientset.CoreV1().Pods("shop")
	_, err := pods.Create(ctx, pod("shop", "web-3", corev1.PodPending), metav1.CreateOptions{})
	require.NoError(t, err)
	assert.Equal(t, `add    shop/web-3  Pending on "node-1"`, out.Until(t, event))
	_, err = pods.UpdateStatus(ctx, pod("shop", "web-3", corev1.PodRunning), metav1.UpdateOptions{})
	require.NoError(t, err)
	assert.Equal(t, `update shop/web-3  Pending -> Running on "node-1"`, out.Until(t, event))
	require.NoError(t, pods.Delete(ctx, "web-1", metav1.DeleteOptions{}))
	assert.Equal(t, `delete shop/web-1  last Running (observed)`, out.Until(t, event))

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
	assert.Equal(t, "summary: 3 pods; by namespace: [kube-system=1 shop=2]", out.Until(t, "^summary: "))
}

func TestMain(m *testing.M) { clitest.Main(m, main) }

// The program's exit status: 0 for --help, 2 for a bad flag or argument,
// saying why, 1 for a failure.
func TestMain_ExitStatus(t *testing.T) {
	clitest.RunCases(t, []clitest.Case{
		{Name: "help", Args: []string{"--help"}, Stdout: "-sync-timeout"},
		{Name: "unknown flag", Args: []string{"--no-such-flag"}, Code: 2, Stderr: "flag provided but not defined: -no-such-flag"},
		{Name: "argument", Args: []string{"stray"}, Code: 2, Stderr: `unexpected arguments ["stray"]`},
		{Name: "no kubeconfig", Args: []string{"--kubeconfig", t.TempDir() + "/missing"}, Code: 1, Stderr: "kubeconfig: "},
		{Name: "not synced in time", Args: []string{"--kubeconfig", silentCluster(t), "--sync-timeout", "1s"}, Code: 1, Stderr: "not synced: not synced within --sync-timeout 1s"},
	})
}

// Ctrl-C stops the program with the summary and status 0, even before
// the first sync.
func TestMain_InterruptPrintsTheSummaryAndExitsZero(t *testing.T) {
	p := clitest.InterruptAt(t, "^waiting for the first sync", "--kubeconfig", silentCluster(t))
	p.Stdout.Until(t, `^summary: 0 pods; by namespace: \[\]$`)
}

// --quiet prints the summary alone: no progress, no logs.
func TestMain_QuietPrintsOnlyTheSummary(t *testing.T) {
	p := clitest.Start(t, "--kubeconfig", silentCluster(t), "--quiet", "--sync-timeout", "0", "--duration", "1500ms")
	require.Equal(t, 1, p.Wait(t), "stderr:\n%s", p.Stderr)
	assert.Empty(t, p.Stdout.String())
	assert.Regexp(t, `^pod-informer: not synced: not synced within --duration 1.5s: [^\n]+\n$`, p.Stderr.String())
}

// silentCluster returns a kubeconfig file naming a cluster that accepts
// connections and never answers.
func silentCluster(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: silent, cluster: {server: "http://`+ln.Addr().String()+`"}}]
contexts: [{name: silent, context: {cluster: silent, user: nobody}}]
users: [{name: nobody, user: {}}]
current-context: silent
`), 0o600))
	return kubeconfig
}
