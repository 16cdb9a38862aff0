package k8s

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/adapters/k8s"
	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
)

var podsResource = corev1.SchemeGroupVersion.WithResource("pods")

// typedPods is the constructor of typed Pod informers for a factory.
func typedPods(cs kubernetes.Interface) func(string, k8s.Options) source.ListWatcher[*corev1.Pod] {
	return func(ns string, o k8s.Options) source.ListWatcher[*corev1.Pod] {
		p := cs.CoreV1().Pods(ns)
		return k8s.New[*corev1.Pod](p.List, p.Watch, o)
	}
}

func newTestFactory(t *testing.T, c *cluster, opts k8s.FactoryOptions) *k8s.Factory {
	t.Helper()
	md, err := metadata.NewForConfig(c.config)
	require.NoError(t, err)
	opts.Dynamic, opts.Metadata = c.dynamic, md
	return k8s.NewFactory(opts)
}

// Not parallel: it counts goroutines.
func TestFactory_ConsumersShareInformersAndTheLastReleaseStopsThem(t *testing.T) {
	c := sharedCluster(t)
	s := c.scope(t)
	for i := range 4 {
		l := map[string]string{"mirror-test": s.ns, "app": []string{"web", "db"}[i%2]}
		pods.create(t, c.client, s.ns, fmt.Sprintf("p%d", i), l)
	}
	// Warm the clients' connections, so that what remains afterwards is
	// only what the informers started.
	server := pods.serverState(t, c.client, s.selector)
	md, err := metadata.NewForConfig(c.config)
	require.NoError(t, err)
	_, err = md.Resource(podsResource).Namespace(s.ns).List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	before := goleak.IgnoreCurrent()

	var errs factoryErrors
	f := k8s.NewFactory(k8s.FactoryOptions{Metadata: md, ErrorHandler: errs.add})
	f.Start(context.Background()) // only the releases stop the informers
	req := k8s.Request[*corev1.Pod]{Resource: k8s.Resource{GVR: podsResource, Namespace: s.ns}, StripManagedFields: true}
	consumers := make([]*k8s.Handle[*corev1.Pod], 3)
	for i := range consumers {
		consumers[i], err = k8s.Typed(f, req, typedPods(c.client))
		require.NoError(t, err)
	}
	meta, err := k8s.Metadata(f, k8s.Request[*metav1.PartialObjectMetadata]{Resource: req.Resource})
	require.NoError(t, err)
	assert.Equal(t, 2, f.Len(), "one typed informer for three consumers, one metadata-only")
	for _, h := range consumers[1:] {
		assert.Same(t, consumers[0].Informer(), h.Informer())
	}
	ctx, cancel := context.WithTimeout(context.Background(), convergeTimeout)
	defer cancel()
	require.NoError(t, f.WaitForCacheSync(ctx))

	// Stripped objects: the server keeps managedFields, the cache not.
	raw, err := c.client.CoreV1().Pods(s.ns).Get(ctx, "p0", metav1.GetOptions{})
	require.NoError(t, err)
	require.NotEmpty(t, raw.ManagedFields)
	inf := consumers[0].Informer()
	assert.Equal(t, server, versions(inf.List()))
	for _, p := range inf.List() {
		assert.Empty(t, p.ManagedFields, p.Name)
		assert.NotEmpty(t, p.Spec.Containers, "the rest stays")
	}
	// Metadata-only: the same keys, versions and UIDs, without the spec.
	assert.Equal(t, server, versions(meta.Informer().List()))
	for _, m := range meta.Informer().List() {
		p, ok := inf.GetByKey(k8s.Key{Namespace: m.Namespace, Name: m.Name})
		require.True(t, ok)
		assert.Equal(t, p.UID, m.UID)
		assert.NotEmpty(t, m.ManagedFields, "not stripped unless asked")
	}
	// Selectors from the label index.
	web := labels.SelectorFromSet(labels.Set{"app": "web"})
	assert.Len(t, consumers[1].Lister().Namespace(s.ns).List(web), 2)
	assert.Len(t, meta.Lister().List(web), 2)

	// Changes reach every consumer's handler; a released consumer's
	// handler hears no more.
	recs := make([]*recorder[*corev1.Pod], len(consumers))
	for i, h := range consumers {
		recs[i] = newRecorder[*corev1.Pod]()
		_, err := h.AddEventHandler(recs[i], mirror.HandlerOptions{})
		require.NoError(t, err)
	}
	consumers[2].Release()
	pods.delete(t, c.client, k8s.Key{Namespace: s.ns, Name: "p3"})
	gone := map[k8s.Key]int{{Namespace: s.ns, Name: "p3"}: 1}
	for _, r := range recs[:2] {
		require.Eventually(t, func() bool { return len(r.deleteCalls()) == 1 }, convergeTimeout, 10*time.Millisecond)
		assert.Equal(t, gone, deleteCounts(r.deleteCalls()))
	}
	assert.Empty(t, recs[2].deleteCalls(), "released before the delete")
	assert.Equal(t, 2, f.Len())

	// The last releases stop the informers: their watches end and their
	// goroutines return.
	for _, h := range consumers {
		h.Release()
	}
	meta.Release()
	assert.Equal(t, 0, f.Len())
	assert.Nil(t, consumers[0].Informer())
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NoError(c, goleak.Find(before))
	}, convergeTimeout, 50*time.Millisecond)

	// Asked for again, a new informer lists again.
	again, err := k8s.Typed(f, req, typedPods(c.client))
	require.NoError(t, err)
	require.NotSame(t, inf, again.Informer())
	require.NoError(t, again.WaitForSync(ctx))
	delete(server, k8s.Key{Namespace: s.ns, Name: "p3"})
	assert.Equal(t, server, versions(again.Informer().List()))
	again.Release()
	f.Shutdown()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NoError(c, goleak.Find(before))
	}, convergeTimeout, 50*time.Millisecond)
	assert.Empty(t, errs.all())
}

// sprockets is the custom resource that TestFactory_CustomResourceDeleted...
// deletes and creates again; no other test uses it (permanent_test.go
// relies on gadgets of the same group never being installed).
var sprockets = schema.GroupVersionResource{Group: "mirror.example.com", Version: "v1", Resource: "sprockets"}

func sprocketCRD() *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: sprockets.Resource + "." + sprockets.Group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: sprockets.Group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: sprockets.Resource, Singular: "sprocket", Kind: "Sprocket", ListKind: "SprocketList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: sprockets.Version, Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: new(true),
				}},
			}},
		},
	}
}

func sprocket(ns, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": sprockets.GroupVersion().String(), "kind": "Sprocket", "spec": map[string]any{"n": int64(1)},
	}}
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

func TestFactory_CustomResourceDeletedAndCreatedAgainWhileInformed(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t)
	ns := c.namespace(t)
	crds, err := apiextensions.NewForConfig(c.config)
	require.NoError(t, err)
	ctx := context.Background()
	define := func() {
		t.Helper()
		_, err := crds.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, sprocketCRD(), metav1.CreateOptions{})
		require.NoError(t, err)
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			_, err := c.dynamic.Resource(sprockets).Namespace(ns).Create(ctx, sprocket(ns, "probe"), metav1.CreateOptions{})
			assert.True(ct, err == nil || apierrors.IsAlreadyExists(err), "the server serves %v: %v", sprockets, err)
		}, convergeTimeout, 50*time.Millisecond)
	}
	define()
	_, err = c.dynamic.Resource(sprockets).Namespace(ns).Create(ctx, sprocket(ns, "g1"), metav1.CreateOptions{})
	require.NoError(t, err)

	var errs factoryErrors
	f := newTestFactory(t, c, k8s.FactoryOptions{
		GoneRetry:    200 * time.Millisecond,
		ListWatch:    mirror.ListWatchOptions{InitialBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond},
		ErrorHandler: errs.add,
	})
	f.Start(ctx)
	defer f.Shutdown()
	h, err := k8s.Dynamic(f, k8s.Request[*unstructured.Unstructured]{Resource: k8s.Resource{GVR: sprockets, Namespace: ns}})
	require.NoError(t, err)
	defer h.Release()
	wctx, cancel := context.WithTimeout(ctx, convergeTimeout)
	defer cancel()
	require.NoError(t, h.WaitForSync(wctx))
	require.Equal(t, []string{"g1", "probe"}, cachedNames(h.Informer()))

	// The definition goes, and its objects with it.
	require.NoError(t, crds.ApiextensionsV1().CustomResourceDefinitions().Delete(ctx, sprocketCRD().Name, metav1.DeleteOptions{}))
	require.Eventually(t, func() bool {
		_, err := crds.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, sprocketCRD().Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}, convergeTimeout, 50*time.Millisecond)
	require.Eventually(t, h.Gone, convergeTimeout, 10*time.Millisecond)
	assert.Empty(t, cachedNames(h.Informer()), "the deletions came first")
	require.Eventually(t, func() bool { return errs.count(k8s.ErrResourceGone) == 1 }, convergeTimeout, 10*time.Millisecond)

	// The definition comes back: so does the informer, by itself.
	define()
	_, err = c.dynamic.Resource(sprockets).Namespace(ns).Create(ctx, sprocket(ns, "g2"), metav1.CreateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return !h.Gone() && fmt.Sprint(cachedNames(h.Informer())) == "[g2 probe]"
	}, convergeTimeout, 10*time.Millisecond)

	// The informer asked every GoneRetry meanwhile, and reported one line,
	// not one per retry.
	assert.Equal(t, 1, errs.count(k8s.ErrResourceGone), "%v", errs.all())
	for _, err := range errs.all() {
		assert.False(t, apierrors.IsNotFound(err) && !errors.Is(err, k8s.ErrResourceGone), "a retry reported: %v", err)
	}

	h.Release()
	assert.Equal(t, 0, f.Len())
	require.NoError(t, crds.ApiextensionsV1().CustomResourceDefinitions().Delete(ctx, sprocketCRD().Name, metav1.DeleteOptions{}))
}

// factoryErrors records a factory's reports.
type factoryErrors struct {
	mu   sync.Mutex
	errs []error
}

func (l *factoryErrors) add(_ k8s.Resource, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, err)
}

func (l *factoryErrors) all() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.errs...)
}

func (l *factoryErrors) count(target error) int {
	n := 0
	for _, err := range l.all() {
		if errors.Is(err, target) {
			n++
		}
	}
	return n
}

func versions[T k8s.Object](objs []T) map[k8s.Key]string {
	out := make(map[k8s.Key]string, len(objs))
	for _, o := range objs {
		out[k8s.Key{Namespace: o.GetNamespace(), Name: o.GetName()}] = o.GetResourceVersion()
	}
	return out
}

func cachedNames[T k8s.Object](inf *mirror.Informer[k8s.Key, T]) []string {
	var out []string
	for _, o := range inf.List() {
		out = append(out, o.GetName())
	}
	slices.Sort(out)
	return out
}
