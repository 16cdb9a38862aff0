package k8s

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"
)

func TestKeys_MatchClientGosNamespaceNameKeys(t *testing.T) {
	for _, tc := range []struct {
		name string
		obj  *corev1.Pod
		want Key
	}{
		{"namespaced", pod("shop", "web-1", "1"), Key{Namespace: "shop", Name: "web-1"}},
		{"cluster-scoped", pod("", "node-1", "1"), Key{Name: "node-1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, err := KeyOf(tc.obj)
			require.NoError(t, err)
			assert.Equal(t, tc.want, k)

			s, err := StringKeyOf(tc.obj)
			require.NoError(t, err)
			want, err := cache.MetaNamespaceKeyFunc(tc.obj)
			require.NoError(t, err)
			assert.Equal(t, want, s)
			assert.Equal(t, want, k.String())

			back, err := ParseKey(s)
			require.NoError(t, err)
			assert.Equal(t, k, back)
		})
	}
}

func TestParseKey_RejectsWhatClientGoRejects(t *testing.T) {
	for _, s := range []string{"", "a/b/c", "/b", "a/"} {
		_, err := ParseKey(s)
		assert.Error(t, err, "%q", s)
	}
}

func TestIndexByNamespace_IndexesUnderTheNamespace(t *testing.T) {
	u := &unstructured.Unstructured{}
	u.SetNamespace("team-a")
	u.SetName("x")
	vals, err := IndexByNamespace(u)
	require.NoError(t, err)
	assert.Equal(t, []string{"team-a"}, vals)

	vals, err = IndexByNamespace(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}})
	require.NoError(t, err)
	assert.Equal(t, []string{""}, vals)
	assert.Equal(t, cache.NamespaceIndex, NamespaceIndex)
}

func TestResourceVersionOf_ReturnsTheObjectsVersion(t *testing.T) {
	assert.Equal(t, "17", ResourceVersionOf(pod("a", "p", "17")))
}
