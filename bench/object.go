package bench

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// Obj is the object every benchmark moves, on both sides: a namespaced,
// named, versioned value, about the size of a small etcd entry's metadata.
// It implements metav1.Object (the fields it lacks read as zero and are not
// stored) and runtime.Object, which is what client-go's key function,
// reflector and informer need.
type Obj struct {
	Namespace       string
	Name            string
	ResourceVersion string
	Value           int64
}

// Key is mirror's key for an Obj: a comparable struct, so computing it
// builds no string.
type Key struct{ Namespace, Name string }

// KeyOf is mirror's key function for Obj.
func KeyOf(o *Obj) (Key, error) { return Key{o.Namespace, o.Name}, nil }

// SourceKey is the string a memsource.Source files an Obj under; it is
// the same "namespace/name" client-go uses.
func SourceKey(o *Obj) (string, error) { return o.Namespace + "/" + o.Name, nil }

var (
	_ metav1.Object  = (*Obj)(nil)
	_ runtime.Object = (*Obj)(nil)
)

// GetObjectKind implements runtime.Object; an Obj carries no type
// information.
func (o *Obj) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject implements runtime.Object.
func (o *Obj) DeepCopyObject() runtime.Object { c := *o; return &c }

// GetNamespace implements metav1.Object.
func (o *Obj) GetNamespace() string { return o.Namespace }

// SetNamespace implements metav1.Object.
func (o *Obj) SetNamespace(ns string) { o.Namespace = ns }

// GetName implements metav1.Object.
func (o *Obj) GetName() string { return o.Name }

// SetName implements metav1.Object.
func (o *Obj) SetName(name string) { o.Name = name }

// GetResourceVersion implements metav1.Object.
func (o *Obj) GetResourceVersion() string { return o.ResourceVersion }

// SetResourceVersion implements metav1.Object.
func (o *Obj) SetResourceVersion(v string) { o.ResourceVersion = v }

// The remaining metav1.Object methods: Obj does not store these fields.

// GetGenerateName implements metav1.Object; it is always empty.
func (o *Obj) GetGenerateName() string { return "" }

// SetGenerateName implements metav1.Object; it does nothing.
func (o *Obj) SetGenerateName(string) {}

// GetUID implements metav1.Object; it is always empty.
func (o *Obj) GetUID() types.UID { return "" }

// SetUID implements metav1.Object; it does nothing.
func (o *Obj) SetUID(types.UID) {}

// GetGeneration implements metav1.Object; it is always 0.
func (o *Obj) GetGeneration() int64 { return 0 }

// SetGeneration implements metav1.Object; it does nothing.
func (o *Obj) SetGeneration(int64) {}

// GetSelfLink implements metav1.Object; it is always empty.
func (o *Obj) GetSelfLink() string { return "" }

// SetSelfLink implements metav1.Object; it does nothing.
func (o *Obj) SetSelfLink(string) {}

// GetCreationTimestamp implements metav1.Object; it is always zero.
func (o *Obj) GetCreationTimestamp() metav1.Time { return metav1.Time{} }

// SetCreationTimestamp implements metav1.Object; it does nothing.
func (o *Obj) SetCreationTimestamp(metav1.Time) {}

// GetDeletionTimestamp implements metav1.Object; it is always nil.
func (o *Obj) GetDeletionTimestamp() *metav1.Time { return nil }

// SetDeletionTimestamp implements metav1.Object; it does nothing.
func (o *Obj) SetDeletionTimestamp(*metav1.Time) {}

// GetDeletionGracePeriodSeconds implements metav1.Object; it is always nil.
func (o *Obj) GetDeletionGracePeriodSeconds() *int64 { return nil }

// SetDeletionGracePeriodSeconds implements metav1.Object; it does nothing.
func (o *Obj) SetDeletionGracePeriodSeconds(*int64) {}

// GetLabels implements metav1.Object; it is always nil.
func (o *Obj) GetLabels() map[string]string { return nil }

// SetLabels implements metav1.Object; it does nothing.
func (o *Obj) SetLabels(map[string]string) {}

// GetAnnotations implements metav1.Object; it is always nil.
func (o *Obj) GetAnnotations() map[string]string { return nil }

// SetAnnotations implements metav1.Object; it does nothing.
func (o *Obj) SetAnnotations(map[string]string) {}

// GetFinalizers implements metav1.Object; it is always nil.
func (o *Obj) GetFinalizers() []string { return nil }

// SetFinalizers implements metav1.Object; it does nothing.
func (o *Obj) SetFinalizers([]string) {}

// GetOwnerReferences implements metav1.Object; it is always nil.
func (o *Obj) GetOwnerReferences() []metav1.OwnerReference { return nil }

// SetOwnerReferences implements metav1.Object; it does nothing.
func (o *Obj) SetOwnerReferences([]metav1.OwnerReference) {}

// GetManagedFields implements metav1.Object; it is always nil.
func (o *Obj) GetManagedFields() []metav1.ManagedFieldsEntry { return nil }

// SetManagedFields implements metav1.Object; it does nothing.
func (o *Obj) SetManagedFields([]metav1.ManagedFieldsEntry) {}

// ObjList is a page of Objs as client-go's reflector expects a list: a
// runtime.Object with list metadata and an Items field.
type ObjList struct {
	metav1.ListMeta
	Items []*Obj
}

// GetObjectKind implements runtime.Object; an ObjList carries no type
// information.
func (l *ObjList) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject implements runtime.Object. The items are shared, not
// copied: nothing in the benchmarks modifies them.
func (l *ObjList) DeepCopyObject() runtime.Object {
	c := *l
	c.Items = append([]*Obj(nil), l.Items...)
	return &c
}
