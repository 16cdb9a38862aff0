package k8s

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"

	"github.com/listwatch/mirror"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
	sigsjson "sigs.k8s.io/json"
)

// Content types the adapter asks for.
const (
	contentProtobuf = "application/vnd.kubernetes.protobuf"
	contentJSON     = "application/json"
)

// protoUnmarshaler is what the generated protobuf code of Kubernetes' own
// types gives them.
type protoUnmarshaler interface {
	Unmarshal(data []byte) error
}

// NewForConfig returns a ListWatcher of the objects of resource gvr (such
// as {Version: "v1", Resource: "pods"}), as type T (such as *corev1.Pod),
// in namespace (empty: every namespace, and what a cluster-scoped
// resource needs), through a client of its own made from cfg, whose
// address, credentials, TLS and rate limits it keeps.
//
// Unlike New over a typed client, it decodes what the server sends
// itself:
//
//   - Protobuf by default, for the types that have it (Kubernetes' own,
//     those of k8s.io/api); the server answers a type it does not serve
//     as protobuf (a custom resource) with JSON, which the ListWatcher
//     decodes as well. A T without protobuf code is always asked for as
//     JSON. cfg.ContentType "application/json" asks for JSON alone.
//   - Decoding overlaps reading: the events of a watch (and so of a
//     streaming list) are decoded, a batch at a time, on up to
//     GOMAXPROCS goroutines (at most 4) while the next arrive, and handed
//     on in the order they came; the items of a list page likewise.
//   - With Options.StripManagedFields, managedFields are dropped from the
//     protobuf as an object is decoded, never held in memory.
//   - An informer lists by pages (PrefersStreamingList is false), and
//     once a page's continue token is read the next page is asked for,
//     so that the server encodes it while this one is decoded. Since
//     Kubernetes 1.34 a paged list, consistent or not, is served from
//     the watch cache's snapshots (KEP-4988), for a fraction of the
//     server's CPU that a streaming list costs it (the server copies
//     every object of a streaming list and compresses the stream event
//     by event); an older server reads a consistent paged list from
//     etcd. To stream lists instead, set the informer's
//     ListWatch.StreamingList.
//   - Over protobuf, the objects can also be had undecoded, each as the
//     bytes it came in (ListEncoded, WatchEncoded): CompactListWatcher
//     over this ListWatcher keeps them as they are, decoding none.
//
// An object that cannot be decoded is reported as an *mirror.ObjectError
// and skipped; a watch stream that cannot be read any further ends as
// client-go's does (see Watch). cfg is not modified.
func NewForConfig[T Object](cfg *rest.Config, gvr schema.GroupVersionResource, namespace string, opts Options) (*ListWatcher[T], error) {
	if gvr.Resource == "" || gvr.Version == "" {
		return nil, errors.New("k8s: NewForConfig needs the resource's version and name")
	}
	t := reflect.TypeFor[T]()
	if t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return nil, fmt.Errorf("k8s: NewForConfig needs a pointer to a struct, not %s", t)
	}
	c := &wireClient[T]{namespace: namespace, resource: gvr.Resource, strip: opts.StripManagedFields}
	c.proto = t.Implements(reflect.TypeFor[protoUnmarshaler]())
	if cfg.ContentType == contentJSON {
		c.proto = false
	}
	c.workers = min(max(runtime.GOMAXPROCS(0), 1), 4)
	rc, err := restClient(cfg, gvr.GroupVersion())
	if err != nil {
		return nil, fmt.Errorf("k8s: NewForConfig %s: %w", gvrName(gvr), err)
	}
	c.rc = rc
	lw := newListWatcher[T](nil, nil, opts)
	lw.wire = c
	lw.resource = gvrName(gvr)
	if namespace != "" {
		lw.resource += " in " + namespace
	}
	return lw, nil
}

// metaScheme knows metav1's types, for the errors the server sends.
var metaScheme = func() *kruntime.Scheme {
	s := kruntime.NewScheme()
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	return s
}()

// restClient returns a REST client of the group version gv from cfg.
func restClient(cfg *rest.Config, gv schema.GroupVersion) (*rest.RESTClient, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &gv
	c.APIPath = "/apis"
	if gv.Group == "" {
		c.APIPath = "/api"
	}
	c.NegotiatedSerializer = serializer.NewCodecFactory(metaScheme).WithoutConversion()
	c.ContentType = contentJSON
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	return rest.RESTClientFor(c)
}

// wireClient lists and watches objects of type T and decodes them itself.
type wireClient[T Object] struct {
	rc        *rest.RESTClient
	namespace string
	resource  string
	strip     bool
	// proto is whether to ask for protobuf.
	proto bool
	// servesJSON is set once the server answered a request for protobuf
	// with JSON: it does not serve the resource as protobuf.
	servesJSON atomic.Bool
	workers    int
	pages      pages // list pages read ahead, and their buffers
}

// accept is the Accept header of c's requests.
func (c *wireClient[T]) accept() string {
	if c.proto {
		return contentProtobuf + ", " + contentJSON
	}
	return contentJSON
}

func (c *wireClient[T]) request(o metav1.ListOptions) *rest.Request {
	return c.rc.Get().NamespaceIfScoped(c.namespace, c.namespace != "").Resource(c.resource).
		VersionedParams(&o, metav1.ParameterCodec).SetHeader("Accept", c.accept())
}

// decodeItems decodes a list's items, on up to c.workers goroutines;
// first is raw[0]'s place in the page (a page is decoded a chunk at a
// time), for the errors.
func (c *wireClient[T]) decodeItems(raw [][]byte, first int, proto bool, rv string) ([]T, []error) {
	objs := make([]T, len(raw))
	errs := make([]error, len(raw))
	c.parallel(len(raw), func(lo, hi int) {
		var scratch []byte
		for i := lo; i < hi; i++ {
			objs[i], scratch, errs[i] = c.decode(raw[i], proto, scratch)
		}
	})
	items := objs[:0]
	var skipped []error
	for i, obj := range objs {
		if errs[i] != nil {
			skipped = append(skipped, &mirror.ObjectError{ResourceVersion: rv,
				Err: fmt.Errorf("k8s: decode item %d of a list of %s: %w", first+i, c.resource, errs[i])})
			continue
		}
		items = append(items, obj)
	}
	clear(objs[len(items):])
	return items, skipped
}

// parallel calls fn with the ranges of [0, n) that each of up to
// c.workers goroutines takes, and returns once they are done.
func (c *wireClient[T]) parallel(n int, fn func(lo, hi int)) {
	workers := min(c.workers, max(n/64, 1))
	var wg sync.WaitGroup
	for w := range workers {
		lo, hi := w*n/workers, (w+1)*n/workers
		wg.Go(func() { fn(lo, hi) })
	}
	wg.Wait()
}

// decode decodes one object's message (protobuf) or JSON into a new T.
// A decoder that panics (T's own Unmarshal or UnmarshalJSON, on what the
// server sent) fails that object with a *mirror.PanicError: it runs on
// the adapter's goroutines, where a panic would end the process. The
// deferred call costs nothing next to a decode.
func (c *wireClient[T]) decode(b []byte, proto bool, scratch []byte) (obj T, _ []byte, err error) {
	defer func() {
		if v := recover(); v != nil {
			var zero T
			obj, err = zero, fmt.Errorf("k8s: decode: %w", &mirror.PanicError{Value: v, Stack: debug.Stack()})
		}
	}()
	obj = newObject[T]()
	if proto {
		if c.strip {
			if b, scratch, err = withoutManagedFields(b, scratch); err != nil {
				var zero T
				return zero, scratch, err
			}
		}
		err = any(obj).(protoUnmarshaler).Unmarshal(b)
	} else {
		err = errJSON(sigsjson.UnmarshalCaseSensitivePreserveInts(b, obj))
		if err == nil && c.strip {
			obj.SetManagedFields(nil)
		}
	}
	if err != nil {
		var zero T
		return zero, scratch, err
	}
	return obj, scratch, nil
}

// newObject returns a new T, a pointer to a zero struct.
func newObject[T Object]() T {
	return reflect.New(reflect.TypeFor[T]().Elem()).Interface().(T)
}

// errJSON keeps of a JSON error what names no content: its kind, and the
// offset or the field and type.
func errJSON(err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &syn):
		return fmt.Errorf("invalid JSON at byte %d", syn.Offset)
	case errors.As(err, &typ):
		return fmt.Errorf("JSON %s where %s wants a %s", typ.Value, typ.Field, typ.Type)
	}
	return errors.New("invalid JSON")
}
