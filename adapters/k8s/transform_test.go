package k8s

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

var managed = []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply}}

func TestStripManagedFields_DropsThemFromEveryKindOfObject(t *testing.T) {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", ManagedFields: managed, Labels: map[string]string{"a": "b"}}}
	got, err := StripManagedFields(p)
	require.NoError(t, err)
	assert.Nil(t, got.ManagedFields)
	assert.Equal(t, "b", got.Labels["a"], "the rest stays")

	m := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "m", ManagedFields: managed}}
	gm, err := StripManagedFields(m)
	require.NoError(t, err)
	assert.Nil(t, gm.ManagedFields)

	u := &unstructured.Unstructured{}
	u.SetName("u")
	u.SetManagedFields(managed)
	require.NotEmpty(t, u.GetManagedFields())
	gu, err := StripManagedFields(u)
	require.NoError(t, err)
	_, found, _ := unstructured.NestedFieldNoCopy(gu.Object, "metadata", "managedFields")
	assert.False(t, found)
	assert.Equal(t, "u", gu.GetName())
}

func TestKeepFields_KeepsMetadataAndTheChosenFields(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1", "kind": "Widget",
		"spec":   map[string]any{"replicas": int64(3), "template": map[string]any{"big": "x"}},
		"status": map[string]any{"ready": true, "conditions": []any{"c"}},
	}}
	u.SetName("w")
	u.SetManagedFields(managed)
	got, err := KeepFields([]string{"spec", "replicas"}, []string{"status", "ready"}, []string{"missing", "path"}, nil)(u)
	require.NoError(t, err)
	assert.Equal(t, map[string]any{
		"apiVersion": "example.com/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "w"},
		"spec":     map[string]any{"replicas": int64(3)},
		"status":   map[string]any{"ready": true},
	}, got.Object)
}
