package k8s

import (
	"context"
	"errors"
	"fmt"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/source"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// A ListWatcher of NewForConfig reads the protobuf wire itself, so it can
// hand each object on as the bytes it came in, undecoded: that makes it
// an EncodedListWatcher, whose encodings CompactListWatcher keeps as they
// are. The bytes are the object's own message, as T's Unmarshal takes
// it: a list page's items are such messages already; a watch event's
// object is wrapped ("k8s\x00" and a runtime.Unknown), and unwrapped in
// place. Dropping managedFields writes the shorter message over the
// longer, in place too.

// ErrNotEncoded is wrapped by the errors of ListEncoded and WatchEncoded
// (and by the end of a watch of WatchEncoded) when the objects cannot be
// had as their protobuf encodings: the ListWatcher does not read the wire
// itself (New, NewDynamic, FromListerWatcher), asks for JSON
// (rest.Config.ContentType "application/json"), or the server answered
// with JSON (a custom resource). The caller should List and Watch decoded
// objects instead, as CompactListWatcher then does.
var ErrNotEncoded = errors.New("k8s: the objects are not at hand as protobuf encodings")

var _ EncodedListWatcher = (*ListWatcher[*metav1.PartialObjectMetadata])(nil)

// ListEncoded is List with each item as its protobuf encoding: the bytes
// of its message, which T's Unmarshal decodes, without the envelope the
// server wraps a whole object in; with Options.StripManagedFields,
// without managedFields. The items share the memory of the page they came
// in, which is the caller's. It makes a ListWatcher of NewForConfig an
// EncodedListWatcher, whose encodings CompactListWatcher keeps as they
// arrived.
//
// It fails with an error wrapping ErrNotEncoded if lw cannot hand out
// encodings (see ErrNotEncoded), and classifies other errors as List
// does. An item is not decoded, nor checked beyond what dropping its
// managedFields reads: one that cannot be read that far is reported in
// Skipped as an *mirror.ObjectError naming its place in the page and its
// size, and the others are kept.
func (lw *ListWatcher[T]) ListEncoded(ctx context.Context, opts source.ListOptions) (source.ListResult[[]byte], error) {
	var res source.ListResult[[]byte]
	o := lw.listRequest(opts)
	if err := lw.notEncoded(); err != nil {
		return res, fmt.Errorf("k8s: list %s: %w", lw.what, err)
	}
	p, err := lw.wire.listRaw(ctx, o, true)
	if errors.Is(err, ErrNotEncoded) {
		return res, fmt.Errorf("k8s: list %s: %w", lw.what, err)
	}
	if err != nil {
		return res, wrapError(ctx, err, "k8s: list %s%s", lw.what, describe(o))
	}
	res.ResourceVersion, res.Continue = p.meta.ResourceVersion, p.meta.Continue
	res.Items, res.Skipped = lw.stripItems(p.items, 0, res.ResourceVersion)
	return res, nil
}

// listEncodedChunks is ListEncoded with the page's items handed to each a
// chunk at a time, as they are read, in memory reused once each returns:
// the page is never held whole, though a list served whole (an informer's
// first, from the server's cache) is one page as large as the list. The
// result has the page's versions and its skipped items, and no Items.
func (lw *ListWatcher[T]) listEncodedChunks(ctx context.Context, opts source.ListOptions, each func(items [][]byte)) (source.ListResult[[]byte], error) {
	var res source.ListResult[[]byte]
	o := lw.listRequest(opts)
	if err := lw.notEncoded(); err != nil {
		return res, fmt.Errorf("k8s: list %s: %w", lw.what, err)
	}
	meta, err := lw.wire.listChunks(ctx, o, func(items [][]byte, first int, rv string) {
		kept, skipped := lw.stripItems(items, first, rv)
		res.Skipped = append(res.Skipped, skipped...)
		each(kept)
	})
	if errors.Is(err, ErrNotEncoded) {
		return res, fmt.Errorf("k8s: list %s: %w", lw.what, err)
	}
	if err != nil {
		return res, wrapError(ctx, err, "k8s: list %s%s", lw.what, describe(o))
	}
	res.ResourceVersion, res.Continue = meta.ResourceVersion, meta.Continue
	return res, nil
}

// stripItems drops managedFields from items in place, if lw's options
// say so, and returns the items it could, and the errors of those it
// could not, each naming its place in the page (first is items[0]'s).
func (lw *ListWatcher[T]) stripItems(items [][]byte, first int, rv string) ([][]byte, []error) {
	if !lw.opts.StripManagedFields {
		return items, nil
	}
	errs := make([]error, len(items))
	lw.wire.parallel(len(items), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			n := len(items[i])
			if items[i], errs[i] = stripInPlace(items[i]); errs[i] != nil {
				errs[i] = fmt.Errorf("k8s: item %d of a list of %s, %d bytes: %w", first+i, lw.wire.resource, n, errs[i])
			}
		}
	})
	kept := items[:0]
	var skipped []error
	for i, item := range items {
		if errs[i] != nil {
			skipped = append(skipped, &mirror.ObjectError{ResourceVersion: rv, Err: errs[i]})
			continue
		}
		kept = append(kept, item)
	}
	return kept, skipped
}

// WatchEncoded is Watch with each event's object as its protobuf
// encoding, as ListEncoded hands out an item's. An event's encoding is
// valid until the next call of the Watcher's Next: the memory it is in is
// reused for the events that follow. Bookmarks and errors are as Watch's.
//
// It fails with an error wrapping ErrNotEncoded if lw cannot hand out
// encodings (see ErrNotEncoded). A server that answers the watch with
// JSON is found out as its first event is read: the Watcher's Next then
// fails with an error wrapping ErrNotEncoded, before any event, and every
// later ListEncoded and WatchEncoded fails at once. An event whose object
// cannot be read (no metadata, or managedFields that cannot be dropped)
// becomes a source.Error event with an *mirror.ObjectError naming its
// size, and the stream goes on.
func (lw *ListWatcher[T]) WatchEncoded(ctx context.Context, opts source.WatchOptions) (source.Watcher[[]byte], error) {
	if err := lw.notEncoded(); err != nil {
		return nil, fmt.Errorf("k8s: watch %s: %w", lw.what, err)
	}
	w, err := lw.startWatch(ctx, opts, true)
	if err != nil {
		return nil, err
	}
	return &encodedWatcher[T]{w: w}, nil
}

// encodes reports whether lw can hand out its objects as their encodings,
// as far as it knows before asking the server. CompactListWatcher asks
// it, so as not to call ListEncoded on a ListWatcher that cannot.
func (lw *ListWatcher[T]) encodes() bool { return lw.notEncoded() == nil }

// notEncoded returns why lw cannot hand out its objects as their
// encodings, an error wrapping ErrNotEncoded, or nil if it can.
func (lw *ListWatcher[T]) notEncoded() error {
	switch {
	case lw.wire == nil:
		return fmt.Errorf("its client decodes the objects: %w", ErrNotEncoded)
	case !lw.wire.proto:
		return fmt.Errorf("it asks for JSON: %w", ErrNotEncoded)
	case lw.wire.servesJSON.Load():
		return fmt.Errorf("the server answers with JSON: %w", ErrNotEncoded)
	}
	return nil
}

// encodedWatcher is a watcher handing on encodings (WatchEncoded).
type encodedWatcher[T Object] struct {
	w *watcher[T]
}

func (e *encodedWatcher[T]) Next(ctx context.Context) (source.Event[[]byte], error) {
	if e.w.err != nil {
		return source.Event[[]byte]{}, e.w.err
	}
	return nextWire(e.w, ctx, encodingOf)
}

func (e *encodedWatcher[T]) Stop() { e.w.Stop() }

// encodedObject is an object's encoding as a watch event carries it
// between the goroutine that reads it and Next, and its resource version.
type encodedObject struct {
	msg []byte
	rv  string
}

// GetObjectKind makes *encodedObject a runtime.Object: it has no kind.
func (*encodedObject) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject makes *encodedObject a runtime.Object.
func (e *encodedObject) DeepCopyObject() runtime.Object {
	return &encodedObject{msg: append([]byte(nil), e.msg...), rv: e.rv}
}

// encodingOf returns the encoding and resource version of an event's
// object, which an encoded wireWatch made an *encodedObject.
func encodingOf(o runtime.Object) ([]byte, string, error) {
	e, ok := o.(*encodedObject)
	if !ok || e == nil {
		return nil, "", &mirror.ObjectError{Err: fmt.Errorf("k8s: got a %T, want an encoding", o)}
	}
	return e.msg, e.rv, nil
}

// encodedObject returns a watch event's object message msg as an
// *encodedObject: without managedFields if c strips them (msg is
// overwritten), with its resource version read from its metadata.
func (c *wireClient[T]) encodedObject(msg []byte) (runtime.Object, error) {
	n := len(msg)
	if c.strip {
		var err error
		if msg, err = stripInPlace(msg); err != nil {
			return nil, fmt.Errorf("an object of %d bytes: %w", n, err)
		}
	}
	rv, err := encodedVersion(msg)
	if err != nil {
		return nil, fmt.Errorf("an object of %d bytes: %w", n, err)
	}
	return &encodedObject{msg: msg, rv: rv}, nil
}

// stripInPlace returns msg without its managedFields, written over msg
// itself: withoutManagedFields writes each kept part at or before where
// it read it (the metadata's new length takes no more bytes than the
// old), so what it has yet to read is never overwritten, and it writes
// no byte past len(msg).
func stripInPlace(msg []byte) ([]byte, error) {
	out, _, err := withoutManagedFields(msg, msg[:0:len(msg)])
	return out, err
}

// encodedVersion returns the resource version in the metadata of a
// top-level object's message msg.
func encodedVersion(msg []byte) (string, error) {
	for i := 0; i < len(msg); {
		f, err := nextField(msg, i)
		if err != nil {
			return "", err
		}
		if f.num == 1 && f.wire == 2 {
			rv := ""
			err := eachField(f.data, func(mf protoField) error {
				if mf.num == 6 && mf.wire == 2 {
					rv = string(mf.data)
				}
				return nil
			})
			return rv, err
		}
		i = f.end
	}
	return "", fmt.Errorf("%w: no object metadata", errProto)
}
