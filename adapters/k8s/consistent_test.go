package k8s

import (
	"context"
	"errors"
	"testing"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestCurrentVersion_IsAConsistentListOfOneObject(t *testing.T) {
	var got []metav1.ListOptions
	list := func(_ context.Context, o metav1.ListOptions) (*corev1.PodList, error) {
		got = append(got, o)
		return &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "1234"}}, nil
	}
	lw := New[*corev1.Pod](list, nil, Options{LabelSelector: "app=web"})
	v, err := lw.CurrentVersion(t.Context())
	require.NoError(t, err)
	assert.Equal(t, "1234", v)
	require.Len(t, got, 1)
	assert.Equal(t, metav1.ListOptions{LabelSelector: "app=web", Limit: 1}, got[0],
		"no resource version: a quorum read, not the watch cache's possibly stale one")
}

func TestCurrentVersion_ClassifiesErrors(t *testing.T) {
	list := func(context.Context, metav1.ListOptions) (*corev1.PodList, error) {
		return nil, apierrors.NewServiceUnavailable("down")
	}
	lw := New[*corev1.Pod](list, nil, Options{})
	_, err := lw.CurrentVersion(t.Context())
	require.ErrorIs(t, err, source.ErrUnavailable)

	forbidden := func(context.Context, metav1.ListOptions) (*corev1.PodList, error) {
		return nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New("no"))
	}
	_, err = New[*corev1.Pod](forbidden, nil, Options{}).CurrentVersion(t.Context())
	require.ErrorIs(t, err, mirror.ErrPermanent)
}

func TestCompareVersions_OrdersResourceVersionsOfOneResource(t *testing.T) {
	lw := New[*corev1.Pod, *corev1.PodList](nil, nil, Options{})
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"9", "10", -1},
		{"10", "9", 1},
		{"123456789012345678901234567890", "123456789012345678901234567891", -1},
		{"77", "77", 0},
	} {
		c, err := lw.CompareVersions(tc.a, tc.b)
		require.NoError(t, err)
		assert.Equal(t, tc.want, c, "%s vs %s", tc.a, tc.b)
	}
	for _, bad := range []string{"", "0", "007", "abc", "-1"} {
		_, err := lw.CompareVersions(bad, "1")
		require.ErrorIs(t, err, source.ErrInvalidVersion, "%q", bad)
	}
}

func TestCompactListWatcher_PassesOnTheVersionOrderAndTheCurrentVersion(t *testing.T) {
	list := func(context.Context, metav1.ListOptions) (*corev1.PodList, error) {
		return &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "42"}}, nil
	}
	clw := CompactListWatcher(New[*corev1.Pod](list, nil, Options{}), func() *corev1.Pod { return new(corev1.Pod) }, nil)

	cv, ok := clw.(source.CurrentVersioner)
	require.True(t, ok, "a compact informer must serve consistent reads as a plain one does")
	v, err := cv.CurrentVersion(t.Context())
	require.NoError(t, err)
	assert.Equal(t, "42", v)

	vc, ok := clw.(source.VersionComparer)
	require.True(t, ok)
	c, err := vc.CompareVersions("9", "10")
	require.NoError(t, err)
	assert.Equal(t, -1, c)
	_, err = vc.CompareVersions("abc", "1")
	require.ErrorIs(t, err, source.ErrInvalidVersion)
}

func TestCompactListWatcher_OverASourceWithoutACurrentVersionSaysUnsupported(t *testing.T) {
	clw := CompactListWatcher[*corev1.Pod](plainLW{}, func() *corev1.Pod { return new(corev1.Pod) }, nil)
	_, err := clw.(source.CurrentVersioner).CurrentVersion(t.Context())
	require.ErrorIs(t, err, errors.ErrUnsupported)
}

// plainLW is a ListWatcher with no optional capability.
type plainLW struct{}

func (plainLW) List(context.Context, source.ListOptions) (source.ListResult[*corev1.Pod], error) {
	return source.ListResult[*corev1.Pod]{}, nil
}

func (plainLW) Watch(context.Context, source.WatchOptions) (source.Watcher[*corev1.Pod], error) {
	return nil, errors.ErrUnsupported
}
