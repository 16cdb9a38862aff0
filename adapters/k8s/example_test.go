package k8s_test

import (
	"context"
	"fmt"
	"log"
	"slices"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/adapters/k8s"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
)

// This example keeps a typed cache of every Pod, indexed by namespace. A
// fake clientset stands in for kubernetes.NewForConfig(config) here.
func Example() {
	var clientset kubernetes.Interface = fake.NewClientset(
		pod("shop", "web-1"), pod("shop", "web-2"), pod("kube-system", "dns"))

	pods := clientset.CoreV1().Pods(metav1.NamespaceAll)
	// Keyed by namespace and name, indexed by namespace.
	inf := k8s.NewInformer(k8s.New[*corev1.Pod](pods.List, pods.Watch, k8s.Options{}),
		k8s.InformerOptions[*corev1.Pod]{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- inf.Run(ctx) }()
	defer func() {
		cancel()
		<-done // Run returns once nothing it started runs
	}()
	if err := mirror.WaitForCacheSync(ctx, inf); err != nil {
		log.Fatal(err)
	}

	// No type assertion: the cache holds *corev1.Pod.
	shop, err := inf.ByIndex(k8s.NamespaceIndex, "shop")
	if err != nil {
		log.Fatal(err)
	}
	var names []string
	for _, p := range shop {
		names = append(names, p.Name)
	}
	slices.Sort(names)
	fmt.Println(names)
	if p, ok := inf.GetByKey(k8s.Key{Namespace: "kube-system", Name: "dns"}); ok {
		fmt.Println(p.Spec.Containers[0].Image)
	}
	// Output:
	// [web-1 web-2]
	// coredns
}

func pod(ns, name string) *corev1.Pod {
	image := "nginx"
	if ns == "kube-system" {
		image = "coredns"
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: image}}},
	}
}
