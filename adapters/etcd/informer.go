package etcd

import (
	"cmp"
	"fmt"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/source"
)

// InformerOptions configures an informer of etcd keys: it is
// mirror.InformerOptions for Objects keyed by their etcd key. NewInformer
// fills in what it leaves unset.
type InformerOptions[V any] = mirror.InformerOptions[string, Object[V]]

// NewInformer returns a mirror.Informer of the keys lw lists and watches,
// normally a ListWatcher of this package, wired as etcd needs:
//
//   - KeyFunc is KeyOf: the cache is keyed by the full etcd key.
//   - ResourceVersion is ResourceVersionOf, a key's ModRevision: a relist
//     that finds a key unchanged since the mirror last saw it offers it only
//     to handlers due for a resync, instead of reporting an OnUpdate for
//     every key of the prefix.
//   - SameObject is SameObject, a key's CreateRevision: a key deleted and
//     created again while the watch was down (history compacted meanwhile)
//     reaches handlers as OnDelete(old, true) then OnAdd(new), never as an
//     OnUpdate from one to the other.
//   - Name, if lw is a *ListWatcher, is its prefix ("etcd" for the whole
//     key space), so that logs and errors say which informer they are of.
//   - With Checkpoint.Path set (see mirror.CheckpointOptions), Checkpoint.Codec
//     is a Codec with its default Values: an Object's metadata in a compact
//     binary form, and its value as it is for KV, in JSON for any other V
//     (give a Codec with Values of your own for a V that JSON does not
//     keep whole). Checkpoint.Identity, if lw is a *ListWatcher, names
//     lw's prefix, after the informer's Name if the caller set one, so
//     that a checkpoint of another prefix is not loaded; name the cluster
//     in it yourself if one path may serve mirrors of several clusters.
//
// A field of opts the caller set is kept as it is, never replaced: to
// report a re-created key as an update, for instance, set SameObject to a
// function that always returns true. Every other field of opts (indexes,
// handlers' resync period, queue, error handler, Reflector options)
// is passed on unchanged. Run the informer with its Run method.
func NewInformer[V any](lw source.ListWatcher[Object[V]], opts InformerOptions[V]) *mirror.Informer[string, Object[V]] {
	if opts.KeyFunc == nil {
		opts.KeyFunc = KeyOf[V]
	}
	if opts.ResourceVersion == nil {
		opts.ResourceVersion = ResourceVersionOf[V]
	}
	if opts.SameObject == nil {
		opts.SameObject = SameObject[V]
	}
	elw, _ := lw.(*ListWatcher[V])
	if cp := &opts.Checkpoint; cp.Path != "" {
		if cp.Codec == nil {
			cp.Codec = Codec[V]{Values: defaultValues[V]()}
		}
		if elw != nil && cp.Identity == "" {
			cp.Identity = fmt.Sprintf("etcd prefix %q", elw.prefix)
			if opts.Name != "" {
				cp.Identity = opts.Name + ": " + cp.Identity
			}
		}
	}
	if elw != nil && opts.Name == "" {
		opts.Name = cmp.Or(elw.prefix, "etcd")
	}
	return mirror.NewInformer(lw, opts)
}

// ResourceVersionOf returns o's ModRevision in decimal, the resource version
// the ListWatcher gives the event that made o. It can serve as
// mirror.InformerOptions.ResourceVersion.
func ResourceVersionOf[V any](o Object[V]) string {
	return formatRev(o.ModRevision)
}

// SameObject reports whether cached and incoming, two states of one key,
// belong to the same incarnation of the key: whether they have the same
// CreateRevision. A key deleted and then created again has a new one. It
// can serve as mirror.InformerOptions.SameObject.
func SameObject[V any](cached, incoming Object[V]) bool {
	return cached.CreateRevision == incoming.CreateRevision
}
