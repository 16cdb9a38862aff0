package k8s

import (
	"maps"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/source"
)

// InformerOptions configures an informer of Kubernetes objects: it is
// mirror.InformerOptions for objects of type T keyed by Key. NewInformer
// fills in what it leaves unset.
type InformerOptions[T Object] = mirror.InformerOptions[Key, T]

// NewInformer returns a mirror.Informer of the objects lw lists and
// watches, normally a ListWatcher of this package, wired as client-go's
// informers are:
//
//   - KeyFunc is KeyOf: the cache is keyed by namespace and name.
//   - Indexers holds NamespaceIndex (IndexByNamespace), for
//     ByIndex(NamespaceIndex, ns), besides the caller's indexes.
//   - ResourceVersion is ResourceVersionOf: a relist that finds an object
//     unchanged offers it only to handlers due for a resync, instead of
//     reporting an OnUpdate for every object.
//   - SameObject is SameObject, which compares UIDs: an object deleted and
//     created again under its name while the watch was down reaches
//     handlers as OnDelete(old, true) then OnAdd(new), never as an
//     OnUpdate from one to the other.
//   - Name, if lw is a *ListWatcher, names its resource as its client
//     does ("pods", "apps/v1/deployments in shop"; the object type for a
//     dynamic client's) and its selectors ("pods where app=web"), so that
//     logs and errors say which informer they are of; " of held shards"
//     follows the name of a ShardedListWatcher's.
//
// A field of opts the caller set is kept as it is, never replaced, and so
// is an index of the caller's named NamespaceIndex; opts.Indexers itself
// is not modified. Every other field of opts (handlers' resync period,
// queue, transform, error handler, Reflector options) is passed on
// unchanged. Run the informer with its Run method.
func NewInformer[T Object](lw source.ListWatcher[T], opts InformerOptions[T]) *mirror.Informer[Key, T] {
	if opts.KeyFunc == nil {
		opts.KeyFunc = KeyOf[T]
	}
	if _, ok := opts.Indexers[NamespaceIndex]; !ok {
		indexers := maps.Clone(opts.Indexers)
		if indexers == nil {
			indexers = make(mirror.Indexers[T], 1)
		}
		indexers[NamespaceIndex] = IndexByNamespace[T]
		opts.Indexers = indexers
	}
	if opts.ResourceVersion == nil {
		opts.ResourceVersion = ResourceVersionOf[T]
	}
	if opts.SameObject == nil {
		opts.SameObject = SameObject[T]
	}
	if opts.Name == "" {
		switch klw := lw.(type) {
		case *ListWatcher[T]:
			opts.Name = klw.name()
		case *ShardedListWatcher[T]:
			opts.Name = klw.lw.name() + " of held shards"
		}
	}
	return mirror.NewInformer(lw, opts)
}

// SameObject reports whether cached and incoming, two states of one
// namespace and name, are the same object: whether they have the same UID.
// An object deleted and then created again under its name has a new one.
// It can serve as mirror.InformerOptions.SameObject.
func SameObject[T Object](cached, incoming T) bool {
	return cached.GetUID() == incoming.GetUID()
}
