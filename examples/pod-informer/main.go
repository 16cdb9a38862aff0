// Command pod-informer keeps a typed, indexed cache of a Kubernetes
// cluster's Pods and prints every change, until interrupted:
//
//	go run ./examples/pod-informer --kubeconfig ~/.kube/config
//
// It is also a small controller, read-only: a reconcile loop fed by the
// informer keeps each node's number of running Pods and prints a node's
// line ("node   worker-1  12 running") when that number changes. A Pod
// just changed is reconciled ahead of the initial list's Pods.
//
// It reads the cluster that the kubeconfig's current context names
// ($KUBECONFIG or ~/.kube/config without the flag; the Pod's service
// account when run in a cluster), in every namespace or in --namespace,
// optionally restricted by a --selector on labels. With --metrics-addr it
// serves the informer's metrics for Prometheus (see adapters/mirrorprom) at
// /metrics.
//
// It behaves as every example does (see examples/internal/cli): --help
// exits 0 and a bad flag 2; the first sync must complete within
// --sync-timeout (30s by default), or the program says why and exits 1;
// Ctrl-C or SIGTERM is a normal stop: the program prints the summary, the
// Pods by namespace, and exits 0; --quiet prints only the summary and
// fatal errors.
package main

import (
	"context"
	"fmt"
	"io"

	"github.com/listwatch/mirror/examples/internal/cli"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func main() { cli.Main("pod-informer", run) }

type config struct {
	kubeconfig  string
	namespace   string
	selector    string
	metricsAddr string
	cli.Flags   // --quiet, --sync-timeout, --duration
}

func parseFlags(args []string, out io.Writer) (config, error) {
	var c config
	fs := cli.NewFlagSet("pod-informer", "until interrupted", &c.Flags)
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or in-cluster)")
	fs.StringVar(&c.namespace, "namespace", "", "namespace to mirror (default: all)")
	fs.StringVar(&c.selector, "selector", "", `label selector, such as "app=web" (default: every Pod)`)
	fs.StringVar(&c.metricsAddr, "metrics-addr", "", `address to serve /metrics on, such as ":9090" (default: none)`)
	return c, cli.Parse(fs, args, out)
}

func run(ctx context.Context, args []string, out io.Writer) error {
	cfg, err := parseFlags(args, out)
	if err != nil {
		return err
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = cfg.kubeconfig
	restConfig, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	clientset, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return err
	}
	return mirrorPods(ctx, clientset, cfg, out)
}
