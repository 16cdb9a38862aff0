package k8s

import (
	"context"
	"testing"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
)

func TestList_AsksForTheVersionLimitAndContinueTheCallerMeans(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts source.ListOptions
		want metav1.ListOptions
	}{
		{"newest, consistent", source.ListOptions{Limit: 500},
			metav1.ListOptions{Limit: 500}},
		{"any", source.ListOptions{ResourceVersion: "0", Limit: 500},
			metav1.ListOptions{ResourceVersion: "0", Limit: 500}},
		{"not older than", source.ListOptions{ResourceVersion: "42", Limit: 500},
			metav1.ListOptions{ResourceVersion: "42", ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, Limit: 500}},
		{"not older than, one page", source.ListOptions{ResourceVersion: "42"},
			metav1.ListOptions{ResourceVersion: "42", ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan}},
		{"next page: the token fixes the version", source.ListOptions{ResourceVersion: "42", Limit: 500, Continue: "tok"},
			metav1.ListOptions{Continue: "tok", Limit: 500}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakePods{lists: []fakeList{{list: podList("50", "")}}}
			_, err := f.lw(Options{}).List(context.Background(), tc.opts)
			require.NoError(t, err)
			assert.Equal(t, []metav1.ListOptions{tc.want}, f.listOpts)
		})
	}
}

func TestList_PassesSelectorsOnEveryPage(t *testing.T) {
	f := &fakePods{lists: []fakeList{{list: podList("50", "tok")}, {list: podList("50", "")}}}
	lw := f.lw(Options{LabelSelector: "app=web", FieldSelector: "spec.nodeName=n1"})
	_, err := lw.List(context.Background(), source.ListOptions{Limit: 1})
	require.NoError(t, err)
	_, err = lw.List(context.Background(), source.ListOptions{Limit: 1, Continue: "tok"})
	require.NoError(t, err)
	for _, o := range f.listOpts {
		assert.Equal(t, "app=web", o.LabelSelector)
		assert.Equal(t, "spec.nodeName=n1", o.FieldSelector)
	}
}

func TestList_ReturnsTypedItemsWithTheListsVersionAndContinue(t *testing.T) {
	list := podList("50", "next", pod("a", "p1", "10"), pod("b", "p2", "20"))
	f := &fakePods{lists: []fakeList{{list: list}}}
	res, err := f.lw(Options{}).List(context.Background(), source.ListOptions{Limit: 2})
	require.NoError(t, err)
	assert.Equal(t, "50", res.ResourceVersion)
	assert.Equal(t, "next", res.Continue)
	assert.Empty(t, res.Skipped)
	require.Len(t, res.Items, 2)
	for i, p := range res.Items {
		assert.Equal(t, &list.Items[i], p)
		assert.NotSame(t, &list.Items[i], p, "item %d has memory of its own, not the list's array", i)
	}
}

func TestList_ItemOfAnotherTypeIsSkippedWithItsKeyAndTheRestKept(t *testing.T) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "cm", ResourceVersion: "11"}}
	mixed := &metav1.List{
		ListMeta: metav1.ListMeta{ResourceVersion: "50"},
		Items:    []runtime.RawExtension{{Object: pod("a", "p1", "10")}, {Object: cm}, {Object: pod("a", "p2", "12")}},
	}
	lw := FromListerWatcher[*corev1.Pod](&cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) { return mixed, nil },
	}, Options{})
	res, err := lw.List(context.Background(), source.ListOptions{})
	require.NoError(t, err)
	require.Len(t, res.Items, 2)
	assert.Equal(t, "p1", res.Items[0].Name)
	assert.Equal(t, "p2", res.Items[1].Name)
	require.Len(t, res.Skipped, 1)
	var oe *mirror.ObjectError
	require.ErrorAs(t, res.Skipped[0], &oe)
	assert.Equal(t, "a/cm", oe.Key)
	assert.Equal(t, "11", oe.ResourceVersion)
}

func TestList_ErrorsKeepTheStatusAndTheirKind(t *testing.T) {
	f := &fakePods{lists: []fakeList{{err: apierrors.NewResourceExpired("too old")}}}
	_, err := f.lw(Options{}).List(context.Background(), source.ListOptions{ResourceVersion: "7"})
	require.ErrorIs(t, err, source.ErrExpired)
	assert.True(t, apierrors.IsResourceExpired(err))
	assert.Contains(t, err.Error(), `*v1.Pod at resource version "7"`)
}

func TestList_NilListWithoutErrorIsAnError(t *testing.T) {
	f := &fakePods{lists: []fakeList{{}}}
	_, err := f.lw(Options{}).List(context.Background(), source.ListOptions{})
	require.Error(t, err)
}
