package k8s

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/listwatch/mirror/adapters/k8s"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"
)

// widgets is the custom resource of the dynamic client's tests.
var widgets = schema.GroupVersionResource{Group: "mirror.example.com", Version: "v1", Resource: "widgets"}

// createWidgetCRD defines the widgets resource, if it is not yet, and waits
// until the server serves it.
func createWidgetCRD(t *testing.T, c *cluster) {
	t.Helper()
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: widgets.Resource + "." + widgets.Group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: widgets.Group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: widgets.Resource, Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: widgets.Version, Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"size": {Type: "integer"}}},
					},
				}},
			}},
		},
	}
	client, err := apiextensions.NewForConfig(c.config)
	require.NoError(t, err)
	_, err = client.ApiextensionsV1().CustomResourceDefinitions().Create(context.Background(), crd, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		_, err := c.dynamic.Resource(widgets).List(context.Background(), metav1.ListOptions{Limit: 1})
		assert.NoError(ct, err, "the server serves %v", widgets)
	}, convergeTimeout, 50*time.Millisecond)
}

func widget(ns, name string, size int64, labels map[string]string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": widgets.GroupVersion().String(),
		"kind":       "Widget",
		"spec":       map[string]any{"size": size},
	}}
	u.SetNamespace(ns)
	u.SetName(name)
	u.SetLabels(labels)
	return u
}

func TestDynamic_CustomResourceInformerFollowsCreatesUpdatesAndDeletes(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t)
	createWidgetCRD(t, c)
	ns1, ns2 := c.namespace(t), c.namespace(t)
	labels := map[string]string{"mirror-test": ns1}
	selector := "mirror-test=" + ns1
	ctx := context.Background()
	create := func(ns, name string, size int64) {
		t.Helper()
		_, err := c.dynamic.Resource(widgets).Namespace(ns).Create(ctx, widget(ns, name, size, labels), metav1.CreateOptions{})
		require.NoError(t, err)
	}
	serverState := func() map[k8s.Key]string {
		t.Helper()
		list, err := c.dynamic.Resource(widgets).List(ctx, metav1.ListOptions{LabelSelector: selector})
		require.NoError(t, err)
		return versionsOf(t, list)
	}
	for i := range 4 {
		create(ns1, fmt.Sprintf("w%d", i), int64(i))
	}
	create(ns2, "x", 7)

	// One informer streams its list, the adapter's default; the other
	// lists in pages of two, through etcd's continue tokens.
	streamed := startInformer(t, k8s.NewDynamic(c.dynamic.Resource(widgets), k8s.Options{LabelSelector: selector}), informerOptions{})
	paged := startInformer(t, k8s.NewDynamic(c.dynamic.Resource(widgets), k8s.Options{LabelSelector: selector, NoStreamingList: true}),
		informerOptions{pageSize: 2})
	infs := []*informer[*unstructured.Unstructured]{streamed, paged}
	for _, inf := range infs {
		requireConverged(t, inf, serverState())
		requireIndexed(t, inf.Informer, ns1, "w0", "w1", "w2", "w3")
	}

	w1 := c.dynamic.Resource(widgets).Namespace(ns1)
	got, err := w1.Get(ctx, "w1", metav1.GetOptions{})
	require.NoError(t, err)
	require.NoError(t, unstructured.SetNestedField(got.Object, int64(100), "spec", "size"))
	_, err = w1.Update(ctx, got, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.NoError(t, w1.Delete(ctx, "w2", metav1.DeleteOptions{}))
	create(ns2, "y", 8)
	for _, inf := range infs {
		requireConverged(t, inf, serverState())
		requireIndexed(t, inf.Informer, ns2, "x", "y")

		cached, ok := inf.GetByKey(k8s.Key{Namespace: ns1, Name: "w1"})
		require.True(t, ok)
		size, _, err := unstructured.NestedInt64(cached.Object, "spec", "size")
		require.NoError(t, err)
		assert.Equal(t, int64(100), size)
		assert.Equal(t, "Widget", cached.GetKind())
		for i, h := range inf.handlers {
			assert.Equal(t, map[k8s.Key]int{{Namespace: ns1, Name: "w2"}: 1}, deleteCounts(h.deleteCalls()), "handler %d", i)
		}
		assert.Empty(t, inf.log.all())
	}
}

func TestMetadata_PartialObjectMetadataInformerFollowsCreatesUpdatesAndDeletes(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t)
	s := c.scope(t)
	configMaps.populate(t, c.client, s, 3)
	client, err := metadata.NewForConfig(c.config)
	require.NoError(t, err)
	r := client.Resource(corev1.SchemeGroupVersion.WithResource("configmaps"))
	inf := startInformer(t, k8s.New[*metav1.PartialObjectMetadata](r.List, r.Watch, s.options()), informerOptions{})
	requireConverged(t, inf, configMaps.serverState(t, c.client, s.selector))

	configMaps.annotate(t, c.client, k8s.Key{Namespace: s.ns, Name: "o0"}, "1")
	configMaps.delete(t, c.client, k8s.Key{Namespace: s.ns, Name: "o1"})
	requireConverged(t, inf, configMaps.serverState(t, c.client, s.selector))
	o0, ok := inf.GetByKey(k8s.Key{Namespace: s.ns, Name: "o0"})
	require.True(t, ok)
	assert.Equal(t, "1", o0.Annotations["n"])
	assert.Equal(t, map[k8s.Key]int{{Namespace: s.ns, Name: "o1"}: 1}, deleteCounts(inf.handlers[0].deleteCalls()))
	assert.Empty(t, inf.log.all())
}
