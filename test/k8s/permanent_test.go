package k8s

import (
	"context"
	"testing"
	"time"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/adapters/k8s"
	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// refusedInformer is an informer started by startRefused, which is not
// expected to sync.
type refusedInformer[T k8s.Object] struct {
	*mirror.Informer[k8s.Key, T]
	reg *mirror.Registration
	log *errorLog
}

// startRefused runs an informer of lw, with one handler, until the test
// ends, without waiting for it to sync. Its pauses are short, as
// startInformer's are.
func startRefused[T k8s.Object](t *testing.T, lw source.ListWatcher[T]) refusedInformer[T] {
	t.Helper()
	log := &errorLog{}
	inf := mirror.NewInformer(lw, mirror.InformerOptions[k8s.Key, T]{
		KeyFunc: k8s.KeyOf[T],
		Name:    t.Name(),
		ListWatch: mirror.ListWatchOptions{
			InitialBackoff: 20 * time.Millisecond,
			MaxBackoff:     500 * time.Millisecond,
		},
		ErrorHandler: log.add,
	})
	reg, err := inf.AddEventHandler(newRecorder[T](), mirror.HandlerOptions{})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		assert.NoError(t, <-done)
	})
	return refusedInformer[T]{Informer: inf, reg: reg, log: log}
}

// requireSyncRefused waits for inf and its handler to sync, and requires
// that the wait ends with an error wrapping mirror.ErrPermanent and
// carrying a status that is refused says it should, long before the
// deadline, which is only there so that a broken build fails rather than
// hangs.
func requireSyncRefused[T k8s.Object](t *testing.T, inf refusedInformer[T], refused func(error) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), convergeTimeout)
	defer cancel()
	for _, s := range []mirror.SyncWaiter{inf, inf.reg} {
		err := mirror.WaitForCacheSync(ctx, s)
		require.ErrorIs(t, err, mirror.ErrPermanent, "errors reported: %v", inf.log.all())
		assert.True(t, refused(err), "the server's status: %v", err)
		assert.NoError(t, ctx.Err(), "the wait ended before its deadline")
	}
	assert.False(t, inf.HasSynced())
}

func TestInformer_SourceThatRefusesForGoodEndsTheWaitForSyncWithErrPermanent(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t)
	createWidgetCRD(t, c)
	nobody := c.clientWithToken(t, nobodyToken)
	stranger := c.clientWithToken(t, "not-a-token-the-server-knows")
	// A custom resource whose definition is not installed.
	gadgets := schema.GroupVersionResource{Group: widgets.Group, Version: "v1", Resource: "gadgets"}
	for _, streaming := range []struct {
		name string
		off  bool
	}{{"StreamingList", false}, {"List", true}} {
		opts := k8s.Options{NoStreamingList: streaming.off}
		t.Run(streaming.name, func(t *testing.T) {
			t.Parallel()
			t.Run("403 a user without RBAC permission", func(t *testing.T) {
				t.Parallel()
				requireSyncRefused(t, startRefused(t, configMaps.lw(nobody, opts)), apierrors.IsForbidden)
			})
			t.Run("401 a token the server does not know", func(t *testing.T) {
				t.Parallel()
				requireSyncRefused(t, startRefused(t, pods.lw(stranger, opts)), apierrors.IsUnauthorized)
			})
			t.Run("404 a custom resource that is not installed", func(t *testing.T) {
				t.Parallel()
				requireSyncRefused(t, startRefused(t, k8s.NewDynamic(c.dynamic.Resource(gadgets), opts)), apierrors.IsNotFound)
			})
		})
	}
}

func TestInformer_RefusedInformerSyncsOnceThePermissionIsGranted(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t)
	s := c.scope(t)
	configMaps.populate(t, c.client, s, 3)
	cms := c.clientWithToken(t, nobodyToken).CoreV1().ConfigMaps(s.ns)
	inf := startRefused(t, k8s.New[*corev1.ConfigMap](cms.List, cms.Watch, s.options()))
	requireSyncRefused(t, inf, apierrors.IsForbidden)

	ctx := context.Background()
	_, err := c.client.RbacV1().Roles(s.ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "read-configmaps"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"list", "watch"}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = c.client.RbacV1().RoleBindings(s.ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "read-configmaps"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "read-configmaps"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: nobodyUser}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	// The Reflector kept trying: the informer syncs once allowed, and
	// waiting for it succeeds from then on.
	require.Eventually(t, inf.HasSynced, convergeTimeout, 20*time.Millisecond,
		"not synced after the permission was granted")
	require.NoError(t, mirror.WaitForCacheSync(ctx, inf))
	assert.Equal(t, configMaps.serverState(t, c.client, s.selector), versionsByKey(inf.All()))
}
