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
	inf := mirror.NewInformer(k8s.New[*corev1.Pod](pods.List, pods.Watch, k8s.Options{}),
		mirror.InformerOptions[k8s.Key, *corev1.Pod]{
			KeyFunc:  k8s.KeyOf[*corev1.Pod],
			Indexers: mirror.Indexers[*corev1.Pod]{k8s.NamespaceIndex: k8s.IndexByNamespace[*corev1.Pod]},
		})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go inf.Run(ctx)
	if err := mirror.WaitForCacheSync(ctx, inf); err != nil {
		log.Fatal(err)
	}

	// No type assertion: the cache holds *corev1.Pod.
	shop, _ := inf.ByIndex(k8s.NamespaceIndex, "shop")
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
