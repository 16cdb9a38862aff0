package nats

import (
	"fmt"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/source"
)

// InformerOptions configures an informer of a bucket's keys: it is
// mirror.InformerOptions for Objects keyed by their key. NewInformer fills
// in what it leaves unset.
type InformerOptions[V any] = mirror.InformerOptions[string, Object[V]]

// NewInformer returns a mirror.Informer of the keys lw lists and watches,
// normally a ListWatcher of this package, wired as a bucket needs:
//
//   - KeyFunc is KeyOf: the cache is keyed by the bucket's keys.
//   - ResourceVersion is ResourceVersionOf, a key's Revision: a relist that
//     finds a key unchanged since the mirror last saw it offers it only to
//     handlers due for a resync, instead of reporting an OnUpdate for every
//     key of the bucket.
//   - SameObject is left unset: NATS records no creation revision, so a
//     key's states are all taken for one object. A key deleted and created
//     again reaches handlers as OnDelete then OnAdd when the watch delivers
//     both, and as OnUpdate when a relist comes first (see the package
//     documentation).
//   - Name, if lw is a *ListWatcher, is its bucket's name, so that logs
//     and errors say which informer they are of.
//   - With Checkpoint.Path set (see mirror.CheckpointOptions),
//     Checkpoint.Codec is a Codec with its default Values: an Object's
//     revision and time in a compact binary form, and its value as it is
//     for KV, in JSON for any other V. Checkpoint.Identity, if lw is a
//     *ListWatcher, names lw's bucket, after the informer's Name if the
//     caller set one, so that a checkpoint of another bucket is not
//     loaded; name the server in it yourself if one path may serve
//     mirrors of several servers.
//
// A field of opts the caller set is kept as it is, never replaced. Every
// other field of opts (indexes, handlers' resync period, queue, error
// handler, Reflector options) is passed on unchanged. Run the informer with
// its Run method.
func NewInformer[V any](lw source.ListWatcher[Object[V]], opts InformerOptions[V]) *mirror.Informer[string, Object[V]] {
	if opts.KeyFunc == nil {
		opts.KeyFunc = KeyOf[V]
	}
	if opts.ResourceVersion == nil {
		opts.ResourceVersion = ResourceVersionOf[V]
	}
	if cp := &opts.Checkpoint; cp.Path != "" {
		if cp.Codec == nil {
			cp.Codec = Codec[V]{Values: defaultValues[V]()}
		}
		if nlw, ok := lw.(*ListWatcher[V]); ok && cp.Identity == "" {
			cp.Identity = fmt.Sprintf("nats bucket %q", nlw.bucket)
			if opts.Name != "" {
				cp.Identity = opts.Name + ": " + cp.Identity
			}
		}
	}
	if nlw, ok := lw.(*ListWatcher[V]); ok && opts.Name == "" {
		opts.Name = nlw.bucket
	}
	return mirror.NewInformer(lw, opts)
}

// ResourceVersionOf returns o's Revision in decimal, the resource version
// the ListWatcher gives the event that made o. It can serve as
// mirror.InformerOptions.ResourceVersion.
func ResourceVersionOf[V any](o Object[V]) string {
	return formatRev(o.Revision)
}
