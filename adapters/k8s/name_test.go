package k8s

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/listwatch/mirror"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
)

func TestListWatcher_NameSaysResourceNamespaceAndSelectors(t *testing.T) {
	deployments := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	fp := &fakePods{}
	for _, tc := range []struct {
		name string
		lw   interface{ name() string }
		want string
	}{
		{"typed core", fp.lw(Options{}), "pods"},
		{"typed core, selectors", fp.lw(Options{LabelSelector: "app=web", FieldSelector: "spec.nodeName=n1"}),
			"pods where app=web,spec.nodeName=n1"},
		{"typed group", New[*appsv1.Deployment]((&fakeList2[*appsv1.DeploymentList]{}).List, fp.Watch, Options{}),
			"apps/v1/deployments"},
		{"typed, kind ending in s", New[*networkingv1.Ingress]((&fakeList2[*networkingv1.IngressList]{}).List, fp.Watch, Options{}),
			"networking/v1/ingresses"},
		{"metadata, namespace", NewMetadata(metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme()), deployments, "shop", Options{}),
			"apps/v1/deployments in shop"},
		{"metadata, core, all namespaces", NewMetadata(metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme()), podsGVR, "", Options{}),
			"pods"},
		{"dynamic: the object type", NewDynamic(dynamicfake.NewSimpleDynamicClient(runtime.NewScheme()).Resource(deployments), Options{LabelSelector: "app=web"}),
			"*unstructured.Unstructured where app=web"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, tc.lw.name())
		})
	}
}

// fakeList2 is a List function of any list type that no test calls.
type fakeList2[L runtime.Object] struct{}

func (*fakeList2[L]) List(context.Context, metav1.ListOptions) (L, error) {
	var zero L
	return zero, apierrors.NewServiceUnavailable("unused")
}

// An informer from NewInformer is named after its resource, unless the
// caller names it: its errors say which informer they come from.
func TestNewInformer_NamesInformerAfterItsResourceUnlessNamed(t *testing.T) {
	for _, tc := range []struct {
		name, given, want string
	}{
		{name: "unnamed", want: `reflector "pods where app=web"`},
		{name: "named by the caller", given: "mine", want: `reflector "mine"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				forbidden := apierrors.NewForbidden(podsGVR.GroupResource(), "", nil)
				fp := &fakePods{lists: []fakeList{{err: forbidden}, {err: forbidden}}}
				ctx, cancel := context.WithCancel(t.Context())
				errs := make(chan error, 2)
				inf := NewInformer(fp.lw(Options{LabelSelector: "app=web", NoStreamingList: true}), InformerOptions[*corev1.Pod]{
					Name:         tc.given,
					ErrorHandler: func(err error) { errs <- err; cancel() },
				})
				require.NoError(t, inf.Run(ctx))
				err := <-errs
				assert.ErrorContains(t, err, tc.want)
				assert.ErrorIs(t, err, mirror.ErrPermanent)
			})
		})
	}
}
