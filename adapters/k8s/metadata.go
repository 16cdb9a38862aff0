package k8s

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"
)

// NewMetadata returns a ListWatcher of the metadata alone of the objects
// of one resource, in namespace (all of them if empty), through a
// metadata client (metadata.NewForConfig): names, labels, annotations,
// owners, finalizers, UID and resource version, without spec or status.
// A cached metav1.PartialObjectMetadata costs a fraction of the full
// object, and NewInformer keys, versions and identifies it (by UID) as it
// does the full object, so a metadata-only informer sees the same
// additions, updates and deletions as a typed one.
func NewMetadata(client metadata.Interface, gvr schema.GroupVersionResource, namespace string, opts Options) *ListWatcher[*metav1.PartialObjectMetadata] {
	r := client.Resource(gvr).Namespace(namespace)
	lw := New[*metav1.PartialObjectMetadata](r.List, r.Watch, opts)
	lw.resource = gvrName(gvr)
	if namespace != "" {
		lw.resource += " in " + namespace
	}
	return lw
}
