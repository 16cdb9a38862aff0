package k8s

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unique"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/source"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
)

// A decoded Kubernetes object costs about twice its JSON in memory, in
// every informer: client-go's, controller-runtime's and ours hold the
// same objects. A compact cache holds each object as its protobuf
// encoding instead, with the few fields that keys, versions, identities
// and label selectors need beside it, and decodes a fresh object on every
// read. Objects made from one template repeat most of their encoding,
// and the compact cache holds what they repeat once (see
// compact_encoding.go). It trades CPU per read for memory; and since
// every read gets an object of its own, a caller may modify what it
// reads, which a shared cache forbids.

// ProtoObject is an Object with the generated protobuf methods of the
// Kubernetes API types (*corev1.Pod, *metav1.PartialObjectMetadata, and
// every type of k8s.io/api).
type ProtoObject interface {
	Object
	// Marshal returns the object's protobuf encoding.
	Marshal() ([]byte, error)
	// Unmarshal sets the object from its protobuf encoding. It must not
	// keep data, whose memory the caller reuses; generated code copies
	// what it decodes.
	Unmarshal(data []byte) error
}

// Compact is an object of type T held as its protobuf encoding, with its
// key, resource version, UID and labels beside it. It is immutable and
// safe for concurrent use.
//
// The encoding is held in pieces: the object's own bytes, and runs of
// bytes it shares with other objects, such as the containers, volumes,
// labels, owner references and managedFields that the Pods of one
// ReplicaSet all have. A shared run is held once for the whole process,
// and goes when no object holds it any more; the more objects repeat,
// the less each costs, and managedFields, which are mostly the same
// across the objects of one template, cost little. The trade-off is CPU:
// every read decodes, so a Get costs a decode and a List of n objects n
// decodes, where a default cache shares one object with every reader.
// A shared run is decoded once, the first time a read meets it, and held
// decoded as long as the run; Shared hands out that one decoded value,
// so that it costs about the decode of the object's own bytes, and
// Object a deep copy of what Shared returns. And a CompactListWatcher
// encodes every object it lists or watches again, unless its source
// hands out the encodings as they arrived (EncodedListWatcher), in which
// case it decodes none. The cache suits large caches read by key at a
// modest rate, not controllers that read whole namespaces on every
// reconcile.
type Compact[T ProtoObject] struct {
	key Key
	// rv, uid and labels share the encoding's memory.
	rv     string
	uid    types.UID
	labels protoLabels
	enc    encoding
	newT   func() T
}

// Key returns the object's namespace and name.
func (c *Compact[T]) Key() Key { return c.key }

// ResourceVersion returns the object's resource version.
func (c *Compact[T]) ResourceVersion() string { return c.rv }

// UID returns the object's UID.
func (c *Compact[T]) UID() types.UID { return c.uid }

// Labels returns the object's labels, for a labels.Selector's Matches.
func (c *Compact[T]) Labels() labels.Labels { return c.labels }

// Len returns the length of the object's encoding.
func (c *Compact[T]) Len() int { return c.enc.len() }

// Object decodes the object and returns it. Each call returns a new
// object, which the caller owns and may modify. It fails only if the
// encoding cannot be decoded, which a Compact made by CompactListWatcher
// never has.
func (c *Compact[T]) Object() (T, error) {
	// The generated DeepCopy of Shared's object costs less than decoding
	// the whole encoding: it parses nothing, and keeps the strings, which
	// are immutable, where Unmarshal allocates each one.
	root := rootType[T]()
	if root == nil {
		return c.object(nil) // nothing is decoded apart: already new
	}
	shared, err := c.object(root)
	if err != nil {
		return shared, err
	}
	if obj, ok := shared.DeepCopyObject().(T); ok {
		return obj, nil
	}
	return c.object(nil)
}

// Shared decodes the object and returns it, as Object does, except that
// the parts the object shares with others (such as the containers,
// volumes, labels and owner references of a ReplicaSet's Pods) are
// decoded once and shared by every object Shared returns, as the objects
// of a default cache share everything. The caller must not modify the
// object, not even the parts of it that are its own: which are shared
// depends on what other objects hold. It is cheaper than Object, which
// decodes the whole encoding.
func (c *Compact[T]) Shared() (T, error) { return c.object(rootType[T]()) }

// rootType returns the struct type T points to, or nil if T is not a
// pointer to a struct.
func rootType[T any]() reflect.Type {
	t := reflect.TypeFor[T]()
	if t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return nil
	}
	return t.Elem()
}

// object decodes the object, sharing the decoded runs if root is set
// (see compact_decode.go).
func (c *Compact[T]) object(root reflect.Type) (T, error) {
	obj := c.newT()
	err := c.enc.decode(obj, root)
	if root != nil && errors.Is(err, errPath) {
		// The encoding holds a decoded run's path in a form the type
		// does not: decode all of it.
		obj = c.newT()
		err = c.enc.decode(obj, nil)
	}
	if err != nil {
		var zero T
		return zero, fmt.Errorf("k8s: decode %s: %w", c.key, err)
	}
	return obj, nil
}

// CompactListWatcher returns a ListWatcher of the objects lw lists and
// watches, each encoded as a Compact after transform, if set, has run on
// it (StripManagedFields, for one). newT returns a new empty T, such as
// func() *corev1.Pod { return new(corev1.Pod) }. An object that cannot
// be encoded, or that transform fails on, is reported as an
// *mirror.ObjectError and skipped.
//
// If lw is an EncodedListWatcher and transform is nil, each object's
// encoding is kept as it arrived: no object is decoded, and none encoded
// again. An encoding that is not protobuf, or that has no metadata, is
// reported as an *mirror.ObjectError and skipped; one that is protobuf
// but not a T is kept, and Compact.Object reports it.
func CompactListWatcher[T ProtoObject](lw source.ListWatcher[T], newT func() T, transform mirror.TransformFunc[T]) source.ListWatcher[*Compact[T]] {
	c := &compactLW[T]{lw: lw, newT: newT, transform: transform, chunks: newChunker()}
	if e, ok := lw.(EncodedListWatcher); ok && transform == nil {
		if m, ok := lw.(interface{ encodes() bool }); !ok || m.encodes() {
			c.encoded = e
			c.chunked, _ = lw.(chunkedLister)
		}
	}
	return c
}

// EncodedListWatcher is implemented by a source.ListWatcher that can also
// list and watch its objects as their protobuf encodings, each one
// object's as the server sent it (application/vnd.kubernetes.protobuf),
// without the envelope around it. It follows the contract of
// source.ListWatcher, but for the type of its items, and every encoding
// must be of the type the ListWatcher lists. An item's bytes may share
// memory with the page or event they came in, an event's only until the
// next call of Next; CompactListWatcher modifies none and keeps none,
// copying what it holds. A ListEncoded or WatchEncoded that fails with
// an error wrapping ErrNotEncoded makes CompactListWatcher list and watch
// decoded objects from then on.
type EncodedListWatcher interface {
	// ListEncoded is List with each item as its encoding.
	ListEncoded(ctx context.Context, opts source.ListOptions) (source.ListResult[[]byte], error)
	// WatchEncoded is Watch with each event's object as its encoding.
	WatchEncoded(ctx context.Context, opts source.WatchOptions) (source.Watcher[[]byte], error)
}

// chunkedLister is an EncodedListWatcher that can hand a page's
// encodings over a chunk at a time: a ListWatcher of NewForConfig.
type chunkedLister interface {
	listEncodedChunks(ctx context.Context, opts source.ListOptions, each func(items [][]byte)) (source.ListResult[[]byte], error)
}

type compactLW[T ProtoObject] struct {
	lw        source.ListWatcher[T]
	encoded   EncodedListWatcher // lw, if it is one and there is no transform
	chunked   chunkedLister      // encoded, if it is one
	newT      func() T
	transform mirror.TransformFunc[T]
	chunks    *chunker

	// notEncoded is set once encoded said ErrNotEncoded.
	notEncoded atomic.Bool
}

// compact makes the Compact of a decoded object.
func (c *compactLW[T]) compact(obj T) (_ *Compact[T], err error) {
	key := Key{Namespace: obj.GetNamespace(), Name: obj.GetName()}
	defer func() {
		if err != nil {
			err = &mirror.ObjectError{Key: key.String(), ResourceVersion: obj.GetResourceVersion(), Err: err}
		}
	}()
	if c.transform != nil {
		if obj, err = c.transform(obj); err != nil {
			return nil, err
		}
	}
	raw, buf, err := marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("k8s: encode: %w", err)
	}
	cobj, err := c.fromEncoding(raw, false)
	if buf != nil {
		bufs.Put(buf)
	}
	if err != nil {
		return nil, err
	}
	// Marshal writes the metadata where fromEncoding reads it; should a
	// type hold it elsewhere, its accessors have the last word.
	if cobj.key.Name != obj.GetName() || cobj.key.Namespace != obj.GetNamespace() {
		cobj.key = Key{Namespace: unique.Make(obj.GetNamespace()).Value(), Name: strings.Clone(obj.GetName())}
	}
	if cobj.rv != obj.GetResourceVersion() {
		cobj.rv = obj.GetResourceVersion()
	}
	if cobj.uid != obj.GetUID() {
		cobj.uid = obj.GetUID()
	}
	if cobj.labels.len() != len(obj.GetLabels()) {
		cobj.labels = encodeLabels(obj.GetLabels())
	}
	return cobj, nil
}

// sizedMarshaler is what the generated protobuf code of every type of
// k8s.io/api has besides Marshal: it encodes into a buffer of the caller.
type sizedMarshaler interface {
	Size() int
	MarshalToSizedBuffer(b []byte) (int, error)
}

// bufs holds buffers for encodings on their way: marshalled before they
// are cut, put together before they are decoded.
var bufs = sync.Pool{New: func() any { return new([]byte) }}

// marshal encodes obj, into a buffer of bufs if obj can, which
// the caller puts back once done with the encoding.
func marshal[T ProtoObject](obj T) (raw []byte, buf *[]byte, err error) {
	m, ok := any(obj).(sizedMarshaler)
	if !ok {
		raw, err = obj.Marshal()
		return raw, nil, err
	}
	size := m.Size()
	if size > maxPooled {
		raw, err = obj.Marshal()
		return raw, nil, err
	}
	buf = bufs.Get().(*[]byte)
	if cap(*buf) < size {
		*buf = make([]byte, size, max(size, 8<<10))
	}
	b := (*buf)[:size]
	n, err := m.MarshalToSizedBuffer(b)
	if err != nil {
		bufs.Put(buf)
		return nil, nil, err
	}
	return b[size-n:], buf, nil
}

// compactEncoded makes the Compact of an object's encoding as it arrived.
func (c *compactLW[T]) compactEncoded(raw []byte) (*Compact[T], error) {
	cobj, err := c.fromEncoding(raw, true)
	if err != nil {
		var zero T
		return nil, &mirror.ObjectError{Err: fmt.Errorf("k8s: %d bytes of %T: %w", len(raw), zero, err)}
	}
	return cobj, nil
}

var (
	errNotProtobuf = errors.New("not a protobuf encoding")
	errNoMetadata  = errors.New("no object metadata in the encoding")
)

// fromEncoding makes a Compact of the encoding raw, which it does not
// keep. Its key, version, UID and labels are read from the metadata in
// raw; if there is none, it fails if needMeta is set, and leaves them
// empty otherwise.
func (c *compactLW[T]) fromEncoding(raw []byte, needMeta bool) (*Compact[T], error) {
	spans, ok := metaSpans(raw)
	if !ok {
		if needMeta {
			return nil, errNoMetadata
		}
		spans = [5][2]int{}
	}
	enc, k, ok := c.chunks.encode(raw)
	if !ok {
		return nil, errNotProtobuf
	}
	defer k.release()
	segs := k.segs
	str := func(i int) string {
		s, found := enc.locate(segs, spans[i][0], spans[i][1])
		if !found {
			s = string(raw[spans[i][0]:spans[i][1]])
		}
		return s
	}
	span := func(i int) []byte { return raw[spans[i][0]:spans[i][1]] }
	return &Compact[T]{enc: enc, newT: c.newT,
		// The key is the store's map key, kept as long as the object
		// is cached, across updates: it must not hold on to one
		// version's encoding. Namespaces are few and interned.
		key: Key{Namespace: unique.Make(string(span(metaNamespace))).Value(), Name: string(span(metaName))},
		rv:  str(metaRV), uid: types.UID(str(metaUID)), labels: protoLabels(str(metaLabels)),
	}, nil
}

// PrefersStreamingList passes on lw's preference, if it has one.
func (c *compactLW[T]) PrefersStreamingList() bool {
	p, ok := c.lw.(source.StreamingListPreferrer)
	return ok && p.PrefersStreamingList()
}

func (c *compactLW[T]) List(ctx context.Context, opts source.ListOptions) (source.ListResult[*Compact[T]], error) {
	if c.chunked != nil && !c.notEncoded.Load() {
		out, err := c.listChunks(ctx, opts)
		if !errors.Is(err, ErrNotEncoded) {
			return out, err
		}
		c.notEncoded.Store(true)
	}
	if c.encoded != nil && !c.notEncoded.Load() {
		res, err := c.encoded.ListEncoded(ctx, opts)
		if !errors.Is(err, ErrNotEncoded) {
			return compactList(c, res, err, c.compactEncoded)
		}
		c.notEncoded.Store(true)
	}
	res, err := c.lw.List(ctx, opts)
	return compactList(c, res, err, c.compact)
}

// listChunks is List through c.chunked: the page's encodings are made
// Compacts a chunk at a time, as they are read, so that no more than a
// chunk of the page is held as it came.
func (c *compactLW[T]) listChunks(ctx context.Context, opts source.ListOptions) (source.ListResult[*Compact[T]], error) {
	var out source.ListResult[*Compact[T]]
	res, err := c.chunked.listEncodedChunks(ctx, opts, func(items [][]byte) {
		c.chunks.reserve(len(out.Items) + len(items))
		out.Items = slices.Grow(out.Items, len(items))
		for _, raw := range items {
			cobj, err := c.compactEncoded(raw)
			if err != nil {
				out.Skipped = append(out.Skipped, err)
				continue
			}
			out.Items = append(out.Items, cobj)
		}
	})
	out.ResourceVersion, out.Continue = res.ResourceVersion, res.Continue
	out.Skipped = append(res.Skipped, out.Skipped...)
	return out, err
}

// compactList makes a page of Compacts of a page of objects or
// encodings.
func compactList[T ProtoObject, In any](c *compactLW[T], res source.ListResult[In], err error, compact func(In) (*Compact[T], error)) (source.ListResult[*Compact[T]], error) {
	out := source.ListResult[*Compact[T]]{ResourceVersion: res.ResourceVersion, Continue: res.Continue, Skipped: res.Skipped}
	if err != nil {
		return out, err
	}
	c.chunks.reserve(len(res.Items))
	out.Items = make([]*Compact[T], 0, len(res.Items))
	var zero In
	for i, obj := range res.Items {
		res.Items[i] = zero // the decoded object goes once encoded
		cobj, err := compact(obj)
		if err != nil {
			out.Skipped = append(out.Skipped, err)
			continue
		}
		out.Items = append(out.Items, cobj)
	}
	return out, nil
}

func (c *compactLW[T]) Watch(ctx context.Context, opts source.WatchOptions) (source.Watcher[*Compact[T]], error) {
	if c.encoded != nil && !c.notEncoded.Load() {
		w, err := c.encoded.WatchEncoded(ctx, opts)
		if err == nil {
			return &compactWatcher[T, []byte]{w: w, compact: c.compactEncoded}, nil
		}
		if !errors.Is(err, ErrNotEncoded) {
			return nil, err
		}
		c.notEncoded.Store(true)
	}
	w, err := c.lw.Watch(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &compactWatcher[T, T]{w: w, compact: c.compact}, nil
}

type compactWatcher[T ProtoObject, In any] struct {
	w       source.Watcher[In]
	compact func(In) (*Compact[T], error)
}

func (w *compactWatcher[T, In]) Next(ctx context.Context) (source.Event[*Compact[T]], error) {
	ev, err := w.w.Next(ctx)
	// More too: the mirror takes no checkpoint inside a change.
	out := source.Event[*Compact[T]]{Type: ev.Type, ResourceVersion: ev.ResourceVersion,
		InitialEventsEnd: ev.InitialEventsEnd, KeyOnly: ev.KeyOnly, Err: ev.Err, More: ev.More}
	if err != nil || ev.Type == source.Bookmark || ev.Type == source.Error {
		return out, err
	}
	cobj, cerr := w.compact(ev.Object)
	if cerr != nil {
		// Reported, and the stream goes on, as for an object the
		// client could not decode.
		out.Type, out.Err = source.Error, cerr
		return out, nil
	}
	out.Object = cobj
	return out, nil
}

func (w *compactWatcher[T, In]) Stop() { w.w.Stop() }

// NewCompactInformer returns an informer of Compact objects, wired as
// NewInformer wires one of T: keyed by namespace and name, indexed by
// namespace (NamespaceIndex), versioned by resource version, identified
// by UID. For label selectors served from an index, add
// IndexCompactByLabels under LabelIndex to opts.Indexers. Fields of opts
// the caller set are kept, and so is an index of the caller's named
// NamespaceIndex. Read an object with GetByKey and then Compact.Object.
func NewCompactInformer[T ProtoObject](lw source.ListWatcher[*Compact[T]], opts mirror.InformerOptions[Key, *Compact[T]]) *mirror.Informer[Key, *Compact[T]] {
	if opts.KeyFunc == nil {
		opts.KeyFunc = func(c *Compact[T]) (Key, error) { return c.key, nil }
	}
	if _, ok := opts.Indexers[NamespaceIndex]; !ok {
		indexers := maps.Clone(opts.Indexers)
		if indexers == nil {
			indexers = make(mirror.Indexers[*Compact[T]], 1)
		}
		indexers[NamespaceIndex] = func(c *Compact[T]) ([]string, error) { return []string{c.key.Namespace}, nil }
		opts.Indexers = indexers
	}
	if opts.ResourceVersion == nil {
		opts.ResourceVersion = func(c *Compact[T]) string { return c.rv }
	}
	if opts.SameObject == nil {
		opts.SameObject = func(cached, incoming *Compact[T]) bool { return cached.uid == incoming.uid }
	}
	return mirror.NewInformer(lw, opts)
}

// IndexCompactByLabels indexes a Compact object under each of its labels,
// as "key=value", as IndexByLabels does a decoded one. It never fails.
func IndexCompactByLabels[T ProtoObject](c *Compact[T]) ([]string, error) {
	var vals []string
	c.labels.each(func(k, v string) bool {
		vals = append(vals, k+"="+v)
		return true
	})
	return vals, nil
}
