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
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "pod-informer:", err)
		os.Exit(1)
	}
}

type config struct {
	kubeconfig  string
	namespace   string
	selector    string
	metricsAddr string
}

func parseFlags(args []string, out io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("pod-informer", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or in-cluster)")
	fs.StringVar(&c.namespace, "namespace", "", "namespace to mirror (default: all)")
	fs.StringVar(&c.selector, "selector", "", `label selector, such as "app=web" (default: every Pod)`)
	fs.StringVar(&c.metricsAddr, "metrics-addr", "", `address to serve /metrics on, such as ":9090" (default: none)`)
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return c, nil
}

func run(ctx context.Context, args []string, out io.Writer) error {
	cfg, err := parseFlags(args, out)
	if errors.Is(err, flag.ErrHelp) {
		return nil // the usage is printed
	}
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
