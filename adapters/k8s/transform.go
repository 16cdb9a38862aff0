package k8s

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/listwatch/mirror"
)

// StripManagedFields drops obj's managedFields, the server-side apply
// bookkeeping that no controller reads and that makes up a fifth to two
// fifths of a typical cached object, and returns obj. It serves as a
// mirror.TransformFunc for typed, unstructured and metadata-only objects
// alike (InformerOptions.Transform, or Request.StripManagedFields of a
// Factory). It never fails.
func StripManagedFields[T Object](obj T) (T, error) {
	obj.SetManagedFields(nil)
	return obj, nil
}

// KeepFields returns a transform of unstructured objects that keeps only
// apiVersion, kind, metadata (without managedFields) and the fields at
// paths, each a path of field names such as []string{"spec", "replicas"};
// a path the object lacks is skipped. It suits an informer of a custom
// resource read for a few fields: the rest is never held in memory.
func KeepFields(paths ...[]string) mirror.TransformFunc[*unstructured.Unstructured] {
	return func(obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
		kept := make(map[string]any, 3+len(paths))
		for _, f := range []string{"apiVersion", "kind", "metadata"} {
			if v, ok := obj.Object[f]; ok {
				kept[f] = v
			}
		}
		for _, p := range paths {
			if len(p) == 0 {
				continue
			}
			v, ok, err := unstructured.NestedFieldNoCopy(obj.Object, p...)
			if err != nil || !ok {
				continue
			}
			setField(kept, v, p)
		}
		obj.Object = kept
		obj.SetManagedFields(nil)
		return obj, nil
	}
}

// setField sets m's field at path p to v, making the maps on the way; the
// value is not copied: it moves from the object being trimmed.
func setField(m map[string]any, v any, p []string) {
	for _, f := range p[:len(p)-1] {
		next, ok := m[f].(map[string]any)
		if !ok {
			next = make(map[string]any)
			m[f] = next
		}
		m = next
	}
	m[p[len(p)-1]] = v
}
