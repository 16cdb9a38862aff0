// Package k8s adapts Kubernetes clients to source.ListWatcher, so that a
// mirror.Informer keeps a typed, indexed cache of Kubernetes objects:
// *corev1.Pod rather than interface{}, tombstones of the same type, and
// keys that are comparable structs instead of "namespace/name" strings.
//
// The adapter reads through the caller's client, so configuration,
// authentication, rate limits and the choice of namespace stay the
// caller's. New takes the List and Watch methods of any typed client;
// NewDynamic takes a dynamic client's resource (any resource, custom
// resources included); FromListerWatcher takes a client-go
// cache.ListerWatcher; NewForConfig takes a rest.Config and a resource and
// reads through a client of its own that decodes what the server sends
// itself (see below). NewInformer makes an informer of any of them, keyed
// by namespace and name, indexed by namespace, that reports a relisted
// object only if its resource version changed, and an object deleted and
// created again unseen (a new UID) as a deletion then an addition.
//
// An informer of New, NewDynamic or FromListerWatcher gets the objects by
// a streaming list (a watch with sendInitialEvents) by default, as
// client-go's does since 1.35, unless Options.NoStreamingList is set; one
// of NewForConfig lists by pages (see NewForConfig). A server that refuses
// streaming lists makes Watch
// fail with an error wrapping errors.ErrUnsupported, so the Reflector
// falls back to List. Lists are paged with limit and continue; a list at
// a resource version asks for a state not older than that version.
// Watches ask for bookmarks and a server-side timeout. The server's errors
// are classified for the Reflector: 410 Gone and Expired wrap
// source.ErrExpired, "too large resource version" wraps
// source.ErrTooLargeResourceVersion, 429, 503, 504, refused or lost
// connections wrap source.ErrUnavailable, and 401 Unauthorized, 403
// Forbidden and a 404 for the resource type (a custom resource whose
// definition is missing) wrap mirror.ErrPermanent, so that an informer
// that cannot sync says so instead of waiting. The original error stays
// visible to errors.As (*apierrors.StatusError, for one).
//
// A ListWatcher of NewForConfig asks for protobuf by default, for the
// types that have it (Kubernetes' own), and takes JSON from a server that
// answers with it (a custom resource); a typed client of client-go decodes
// JSON unless its config asks for protobuf. It decodes a watch's events
// (and so a streaming list) on up to four goroutines while the next
// arrive, handing them on in order, and, with Options.StripManagedFields,
// drops managedFields from the protobuf before decoding an object, so they
// are never held. Over protobuf it is an EncodedListWatcher too: a compact
// cache (NewCompactInformer) over it keeps each object's bytes as the
// server sent them, decoding none. New, NewDynamic and FromListerWatcher decode as their
// client does, and strip managedFields (with StripManagedFields) once an
// object is decoded.
//
// For the replicas of a controller, NewShardBackend keeps a shard group
// (see package shard) on coordination.k8s.io/v1 Leases, and NewSharded
// makes a ListWatcher that asks only for the objects of the shards a
// member holds, by KEP-5866 shard selectors, so that each replica caches
// its own part.
package k8s

import (
	"cmp"
	"context"
	"fmt"
	"reflect"
	"strings"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/source"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
)

// Object is what the adapter lists and watches: a Kubernetes object with
// metadata, such as *corev1.Pod or *unstructured.Unstructured.
type Object interface {
	metav1.Object
	runtime.Object
}

// ListFunc lists objects, as the List method of a typed client does:
// clientset.CoreV1().Pods(ns).List is a ListFunc[*corev1.PodList].
type ListFunc[L runtime.Object] func(ctx context.Context, opts metav1.ListOptions) (L, error)

// WatchFunc watches objects, as the Watch method of a typed or dynamic
// client does.
type WatchFunc func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)

// Options tunes a ListWatcher. The zero value lists and watches every
// object the client can reach.
type Options struct {
	// LabelSelector restricts lists and watches to the objects whose
	// labels it selects, in the syntax of metav1.ListOptions (for
	// example "app=web"). Empty selects every object.
	LabelSelector string
	// FieldSelector restricts lists and watches to the objects whose
	// fields it selects, in the syntax of metav1.ListOptions (for
	// example "spec.nodeName=node-1"). Empty selects every object.
	FieldSelector string

	// NoStreamingList turns streaming lists off: the informer lists with
	// paged List calls, as client-go's did before 1.35. By default the
	// ListWatcher asks for streaming lists (see PrefersStreamingList),
	// but for one of NewForConfig, which lists by pages regardless;
	// a server that refuses them (before Kubernetes 1.27, or with the
	// WatchList feature gate off) makes the informer list instead.
	//
	// client-go's fake clientsets cannot stream lists (their watches
	// ignore sendInitialEvents); the adapter recognises the fake watches
	// they return and lists instead, so they work with the default.
	NoStreamingList bool

	// StripManagedFields drops every object's managedFields, the
	// server-side apply bookkeeping that no controller reads, as the
	// ListWatcher gets it: a ListWatcher of NewForConfig drops them from
	// the protobuf as it decodes an object, never holding them; the
	// others clear them from the decoded object. False keeps them.
	StripManagedFields bool
}

// ListWatcher lists and watches Kubernetes objects of type T through a
// client's list and watch functions. *ListWatcher[T] implements
// source.ListWatcher[T]. It is safe for concurrent use if the client is
// (client-go's clients are); it holds no resources of its own, and every
// Watcher it returns ends with its context or its Stop.
type ListWatcher[T Object] struct {
	list  func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error)
	watch WatchFunc
	opts  Options
	// cannotStream is set when the client said it cannot stream lists.
	cannotStream bool
	// what names T in errors, such as "*v1.Pod".
	what string
	// wire, if set, lists and watches instead of list and watch,
	// decoding what the server sends itself (see NewForConfig).
	wire *wireClient[T]
	// shardSelector, if set, goes with every request (see NewSharded).
	shardSelector string
	// resource names what lw lists, such as "pods" or "apps/v1/deployments
	// in shop", or is "" if lw cannot tell (see resourceName).
	resource string
}

var (
	_ source.ListWatcher[*unstructured.Unstructured] = (*ListWatcher[*unstructured.Unstructured])(nil)
	_ source.StreamingListPreferrer                  = (*ListWatcher[*unstructured.Unstructured])(nil)
)

// New returns a ListWatcher of the objects that list and watch return,
// typically the methods of a typed client:
//
//	pods := clientset.CoreV1().Pods(metav1.NamespaceAll)
//	lw := k8s.New[*corev1.Pod](pods.List, pods.Watch, k8s.Options{})
//
// T is the type of the list's items, as pointers (*corev1.Pod for a
// *corev1.PodList); an item or event of another type is reported as an
// *mirror.ObjectError and skipped.
func New[T Object, L runtime.Object](list ListFunc[L], watch WatchFunc, opts Options) *ListWatcher[T] {
	return newListWatcher[T](func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		l, err := list(ctx, o)
		if err != nil {
			// A typed client returns a typed nil with its error, which
			// is not a nil runtime.Object.
			return nil, err
		}
		return l, nil
	}, watch, opts)
}

// NewDynamic returns a ListWatcher of the objects of one resource of a
// dynamic client, such as dyn.Resource(gvr).Namespace(ns) for a namespaced
// custom resource, or dyn.Resource(gvr) for all namespaces.
func NewDynamic(r dynamic.ResourceInterface, opts Options) *ListWatcher[*unstructured.Unstructured] {
	return New[*unstructured.Unstructured](r.List, r.Watch, opts)
}

// FromListerWatcher returns a ListWatcher of the objects of type T that lw
// lists and watches, such as one made by cache.NewListWatchFromClient.
// The context is passed on if lw implements
// cache.ListerWatcherWithContext. If lw says that its client cannot stream
// lists, as those of client-go's fake clientsets do (through
// cache.ToListWatcherWithWatchListSemantics), the ListWatcher never asks
// it for one.
func FromListerWatcher[T Object](lw cache.ListerWatcher, opts Options) *ListWatcher[T] {
	c := cache.ToListerWatcherWithContext(lw)
	l := newListWatcher[T](c.ListWithContext, c.WatchWithContext, opts)
	if u, ok := lw.(watchListUnsupported); ok && u.IsWatchListSemanticsUnSupported() {
		l.cannotStream = true
	}
	return l
}

// watchListUnsupported is client-go's way for a client to say that it
// cannot stream lists: its fake clientsets say so, and so does
// a ListerWatcher that wraps one.
type watchListUnsupported interface {
	IsWatchListSemanticsUnSupported() bool
}

func newListWatcher[T Object](list func(context.Context, metav1.ListOptions) (runtime.Object, error), watch WatchFunc, opts Options) *ListWatcher[T] {
	var zero T
	return &ListWatcher[T]{list: list, watch: watch, opts: opts, what: fmt.Sprintf("%T", zero), resource: typeResource[T]()}
}

// typeResource guesses the resource of T from its type, as client-go's
// clients name it: "pods" for a *corev1.Pod, "apps/v1/deployments" for an
// *appsv1.Deployment (the group as k8s.io/api names its package), the
// lower-case plural of the kind for a type of another module. It returns
// "" for the types that hold any resource (unstructured objects, object
// metadata).
func typeResource[T Object]() string {
	t := reflect.TypeFor[T]()
	if t.Kind() != reflect.Pointer || t.Elem().Name() == "" {
		return ""
	}
	t = t.Elem()
	switch t {
	case reflect.TypeFor[unstructured.Unstructured](), reflect.TypeFor[metav1.PartialObjectMetadata]():
		return ""
	}
	gvr, _ := meta.UnsafeGuessKindToResource(schema.GroupVersionKind{Kind: t.Name()})
	const apiPrefix = "k8s.io/api/"
	if gv, ok := strings.CutPrefix(t.PkgPath(), apiPrefix); ok && gv != "core/v1" {
		return gv + "/" + gvr.Resource
	}
	return gvr.Resource
}

// gvrName names gvr as typeResource does: "pods", "apps/v1/deployments".
func gvrName(gvr schema.GroupVersionResource) string {
	if gvr.Group == "" && gvr.Version == "v1" {
		return gvr.Resource
	}
	return gvr.GroupVersion().String() + "/" + gvr.Resource
}

// name names what lw lists, for an informer of it: its resource (its
// object type if it cannot tell), namespace and selectors, such as
// "pods where app=web" or "apps/v1/deployments in shop".
func (lw *ListWatcher[T]) name() string {
	s := cmp.Or(lw.resource, lw.what)
	if sel := joinSelectors(lw.opts.LabelSelector, lw.opts.FieldSelector); sel != "" {
		s += " where " + sel
	}
	return s
}

// joinSelectors joins a label and a field selector with a comma.
func joinSelectors(label, field string) string {
	if label != "" && field != "" {
		return label + "," + field
	}
	return label + field
}

// PrefersStreamingList reports whether lw wants the Reflector to get the
// objects by a streaming list (a watch with sendInitialEvents) rather than
// by paged lists: true unless Options.NoStreamingList is set, the client
// said it cannot stream lists (see FromListerWatcher), or lw is
// NewForConfig's, which reads pages ahead instead. It makes
// *ListWatcher[T] a source.StreamingListPreferrer, so an informer streams
// its lists without ListWatchOptions.StreamingList, as client-go's
// informers do since 1.35; a server that refuses them makes the informer
// list instead, from then on.
func (lw *ListWatcher[T]) PrefersStreamingList() bool {
	return !lw.opts.NoStreamingList && !lw.cannotStream && lw.wire == nil
}

// listOptions returns the options every request of lw starts from.
func (lw *ListWatcher[T]) listOptions() metav1.ListOptions {
	return metav1.ListOptions{LabelSelector: lw.opts.LabelSelector, FieldSelector: lw.opts.FieldSelector, ShardSelector: lw.shardSelector}
}

// object returns o as a T, or an *mirror.ObjectError naming o if it is
// not one. rv is the version it was read at, for the error.
func (lw *ListWatcher[T]) object(o runtime.Object, rv string) (T, error) {
	obj, ok := o.(T)
	if ok && !isNil(obj) {
		if lw.opts.StripManagedFields && lw.wire == nil {
			obj.SetManagedFields(nil)
		}
		return obj, nil
	}
	err := &mirror.ObjectError{ResourceVersion: rv, Err: fmt.Errorf("k8s: got a %T, want a %s", o, lw.what)}
	if m, ok := o.(metav1.Object); ok && !isNil(m) {
		err.Key = Key{Namespace: m.GetNamespace(), Name: m.GetName()}.String()
		err.ResourceVersion = m.GetResourceVersion()
	}
	var zero T
	return zero, err
}

// isNil reports whether v holds a nil pointer, which no client should
// return but which would make every method call on it panic.
func isNil(v any) bool {
	r := reflect.ValueOf(v)
	return !r.IsValid() || r.Kind() == reflect.Pointer && r.IsNil()
}
