package k8s

import (
	"fmt"
	"strings"
)

// Key identifies an object among the objects of one resource: its
// namespace, empty for a cluster-scoped object, and its name. It is
// comparable, so an informer keyed by it builds no string per object.
type Key struct {
	// Namespace is the object's namespace; empty for a cluster-scoped
	// object.
	Namespace string
	// Name is the object's name.
	Name string
}

// String returns the key as client-go writes it: "namespace/name", or
// "name" for a cluster-scoped object.
func (k Key) String() string {
	if k.Namespace == "" {
		return k.Name
	}
	return k.Namespace + "/" + k.Name
}

// ParseKey reads a key in the form Key.String writes, as client-go's
// cache.SplitMetaNamespaceKey does. It fails on a string with more than
// one slash or an empty part.
func ParseKey(s string) (Key, error) {
	ns, name, found := strings.Cut(s, "/")
	if !found {
		ns, name = "", s
	}
	if name == "" || found && ns == "" || strings.Contains(name, "/") {
		return Key{}, fmt.Errorf("k8s: invalid key %q: want \"namespace/name\" or \"name\"", s)
	}
	return Key{Namespace: ns, Name: name}, nil
}

// KeyOf returns obj's Key. It never fails; its signature lets it serve as
// a mirror.KeyFunc[Key, T].
func KeyOf[T Object](obj T) (Key, error) {
	return Key{Namespace: obj.GetNamespace(), Name: obj.GetName()}, nil
}

// StringKeyOf returns obj's key in the "namespace/name" form of client-go's
// cache.MetaNamespaceKeyFunc. It never fails; its signature lets it serve
// as a mirror.KeyFunc[string, T]. KeyOf costs less.
func StringKeyOf[T Object](obj T) (string, error) {
	k, _ := KeyOf(obj)
	return k.String(), nil
}

// NamespaceIndex is the conventional name of the index IndexByNamespace
// computes, the same as client-go's cache.NamespaceIndex.
const NamespaceIndex = "namespace"

// IndexByNamespace indexes an object under its namespace ("" for a
// cluster-scoped object). It never fails; its signature lets it serve as a
// mirror.IndexFunc[T]:
//
//	Indexers: mirror.Indexers[*corev1.Pod]{k8s.NamespaceIndex: k8s.IndexByNamespace[*corev1.Pod]}
func IndexByNamespace[T Object](obj T) ([]string, error) {
	return []string{obj.GetNamespace()}, nil
}

// ResourceVersionOf returns obj's resource version. It can serve as
// mirror.InformerOptions.ResourceVersion, so that a relist offers objects
// that did not change only to handlers due for a resync, as client-go's
// informers do.
func ResourceVersionOf[T Object](obj T) string {
	return obj.GetResourceVersion()
}
