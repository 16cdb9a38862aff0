package k8s_test

import (
	"context"
	"fmt"
	"log"
	"slices"

	"github.com/listwatch/mirror/adapters/k8s"
	"github.com/listwatch/mirror/source"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
)

// This example shares one informer of the Pods of a namespace between two
// consumers, lists them by label selector from the label index, and stops
// the informer when both have released it. A fake clientset stands in for
// kubernetes.NewForConfig(config) here.
func ExampleFactory() {
	var clientset kubernetes.Interface = fake.NewClientset(
		labelledPod("shop", "web-1", "web"), labelledPod("shop", "web-2", "web"), labelledPod("shop", "db-1", "db"))
	newLW := func(ns string, o k8s.Options) source.ListWatcher[*corev1.Pod] {
		pods := clientset.CoreV1().Pods(ns)
		return k8s.New[*corev1.Pod](pods.List, pods.Watch, o)
	}
	f := k8s.NewFactory(k8s.FactoryOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	defer f.Shutdown()
	defer cancel()

	req := k8s.Request[*corev1.Pod]{
		Resource:           k8s.Resource{GVR: corev1.SchemeGroupVersion.WithResource("pods"), Namespace: "shop"},
		StripManagedFields: true,
	}
	a, err := k8s.Typed(f, req, newLW) // one controller
	if err != nil {
		log.Fatal(err)
	}
	b, err := k8s.Typed(f, req, newLW) // another, in the same binary
	if err != nil {
		log.Fatal(err)
	}
	f.Start(ctx)
	if err := f.WaitForCacheSync(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("informers:", f.Len(), "shared:", a.Informer() == b.Informer())

	var names []string
	for _, p := range a.Lister().Namespace("shop").List(labels.SelectorFromSet(labels.Set{"app": "web"})) {
		names = append(names, p.Name)
	}
	slices.Sort(names)
	fmt.Println(names)

	a.Release()
	fmt.Println("after one release:", f.Len())
	b.Release() // the last: the informer stops, and its cache goes
	fmt.Println("after both:", f.Len())
	// Output:
	// informers: 1 shared: true
	// [web-1 web-2]
	// after one release: 1
	// after both: 0
}

func labelledPod(ns, name, app string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": app}}}
}

// This example keeps Pods without their managedFields, which no
// controller reads and which are a fifth of a typical Pod's memory.
func ExampleStripManagedFields() {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-1",
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}}}
	opts := k8s.InformerOptions[*corev1.Pod]{Transform: k8s.StripManagedFields[*corev1.Pod]}
	p, _ = opts.Transform(p)
	fmt.Println(p.Name, len(p.ManagedFields))
	// Output:
	// web-1 0
}
