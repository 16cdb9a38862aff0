package k8s

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"time"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/source"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
)

// Errors of a Factory and its handles.
var (
	// ErrFactoryShutdown means the factory was shut down: it makes no
	// informer any more.
	ErrFactoryShutdown = errors.New("k8s: factory shut down")
	// ErrNotStarted means the factory was not started, so its informers
	// cannot sync yet.
	ErrNotStarted = errors.New("k8s: factory not started")
	// ErrReleased means the handle was released: it holds no informer
	// any more.
	ErrReleased = errors.New("k8s: informer handle released")
	// ErrResourceGone is reported, once, when the resource of an informer
	// that had synced is no longer served (a 404 for its type: a custom
	// resource whose definition was deleted). The error also wraps
	// mirror.ErrPermanent and the server's error.
	ErrResourceGone = errors.New("k8s: resource gone")
)

// defaultGoneRetry is FactoryOptions.GoneRetry's default.
const defaultGoneRetry = time.Minute

// FactoryOptions configures a Factory. The zero value makes a factory of
// typed informers only (see Typed), logging through slog.Default.
type FactoryOptions struct {
	// Dynamic is the client of the informers Dynamic makes; nil makes
	// Dynamic fail.
	Dynamic dynamic.Interface
	// Metadata is the client of the informers Metadata makes; nil makes
	// Metadata fail.
	Metadata metadata.Interface

	// ResyncPeriod is every informer's resync period; zero means none.
	ResyncPeriod time.Duration
	// NoStreamingList turns streaming lists off (see Options).
	NoStreamingList bool
	// ListWatch tunes how every informer lists and watches (page size,
	// watch timeout, backoff).
	ListWatch mirror.ListWatchOptions
	// Metrics, if set, receives every informer's measurements, under the
	// informer's name (see Request.Name and mirror.InformerOptions.Metrics).
	Metrics mirror.Metrics

	// GoneRetry is how long an informer whose resource went away (see
	// ErrResourceGone) waits before each new request to the server, on
	// top of its usual backoff; zero means one minute. It comes back by
	// itself when the resource does.
	GoneRetry time.Duration

	// ErrorHandler, if set, sees every informer's failures with the
	// Resource it informs about, as InformerOptions.ErrorHandler does;
	// an informer whose resource went away reports ErrResourceGone once,
	// not its every retry. Nil means logging them through Logger at Warn.
	ErrorHandler func(r Resource, err error)
	// Logger receives the factory's and its informers' logs; nil means
	// slog.Default().
	Logger *slog.Logger
}

// Resource names what an informer of a Factory holds: the objects of one
// resource, in one namespace or all (Namespace ""), that the selectors
// select.
type Resource struct {
	// GVR is the resource, such as {Version: "v1", Resource: "pods"}.
	GVR schema.GroupVersionResource
	// Namespace restricts the informer to one namespace; empty means all
	// of them (and is what a cluster-scoped resource needs).
	Namespace string
	// LabelSelector and FieldSelector restrict the informer as
	// Options' do.
	LabelSelector, FieldSelector string
}

// String describes r for logs and errors, such as
// "pods.v1 in shop where app=web".
func (r Resource) String() string {
	s := r.GVR.Resource + "." + r.GVR.Version
	if r.GVR.Group != "" {
		s += "." + r.GVR.Group
	}
	if r.Namespace != "" {
		s += " in " + r.Namespace
	}
	if r.LabelSelector != "" || r.FieldSelector != "" {
		s += " where " + r.LabelSelector
		if r.LabelSelector != "" && r.FieldSelector != "" {
			s += ","
		}
		s += r.FieldSelector
	}
	return s
}

// Request asks a Factory for an informer of objects of type T. Two
// requests are served by one informer when their Resource, T, kind
// (typed, dynamic, metadata), StripManagedFields and TransformName are
// equal.
type Request[T Object] struct {
	Resource

	// Name identifies the informer in logs, errors and metrics; empty
	// means Resource.String(). It is not part of what makes requests
	// share an informer: the first request names it.
	Name string

	// StripManagedFields drops each object's managedFields as it enters
	// the cache (see StripManagedFields).
	StripManagedFields bool
	// Transform, if set, runs on each object as it enters the cache,
	// after StripManagedFields (see mirror.InformerOptions.Transform).
	// A function cannot be compared, so TransformName names it: requests
	// with the same TransformName share an informer, and the first one's
	// Transform is the one that runs. A Transform without a name is an
	// error.
	Transform mirror.TransformFunc[T]
	// TransformName identifies Transform among the factory's requests.
	TransformName string
}

// factoryKey is what makes two requests share an informer.
type factoryKey struct {
	kind          string // "typed", "dynamic", "metadata"
	typ           reflect.Type
	res           Resource
	strip         bool
	transformName string
}

// Factory makes informers shared by the consumers that ask for the same
// objects, and stops each one when the last of them releases it:
//
//   - one informer per Resource, object type, kind and transform, however
//     many consumers ask for it (Typed, Dynamic, Metadata);
//   - started lazily: by Start for the informers asked for before it, at
//     once for those asked for after;
//   - synced together: WaitForCacheSync waits for every informer asked
//     for, a Handle's WaitForSync for its own;
//   - ref-counted: each request returns a Handle; when the last Handle of
//     an informer is released, the informer stops (its watch ends, its
//     goroutines return) and the factory drops it and its cache. A later
//     request starts a new one.
//
// An informer whose resource goes away after it synced (a custom
// resource's definition deleted) is reported once, with ErrResourceGone,
// and asks the server again only every GoneRetry; its consumers decide
// whether to release it or wait for the resource to come back, which it
// notices by itself.
//
// A Factory is safe for concurrent use. Its zero value is not usable: use
// NewFactory.
type Factory struct {
	opts   FactoryOptions
	logger *slog.Logger

	mu       sync.Mutex
	ctx      context.Context // set by Start
	cancel   context.CancelFunc
	shutdown bool
	entries  map[factoryKey]*entry
	running  sync.WaitGroup
}

// NewFactory returns a Factory with no informer yet.
func NewFactory(opts FactoryOptions) *Factory {
	if opts.GoneRetry <= 0 {
		opts.GoneRetry = defaultGoneRetry
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	return &Factory{opts: opts, logger: logger, entries: make(map[factoryKey]*entry)}
}

// Start starts the informers asked for so far, and makes the factory
// start each one asked for later as soon as it is. Every informer stops
// when ctx ends, or when it is released; Shutdown waits for them. Start
// returns at once; a second call does nothing.
func (f *Factory) Start(ctx context.Context) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ctx != nil || f.shutdown {
		return
	}
	f.ctx, f.cancel = context.WithCancel(ctx)
	for _, e := range f.entries {
		f.startLocked(e)
	}
}

// Shutdown stops every informer of the factory and waits until each has
// stopped; from then on the factory makes no informer (ErrFactoryShutdown).
// Handles stay valid to Release.
func (f *Factory) Shutdown() {
	f.mu.Lock()
	f.shutdown = true
	if f.cancel != nil {
		f.cancel()
	}
	f.mu.Unlock()
	f.running.Wait()
}

// WaitForCacheSync waits until every informer the factory holds has
// synced and returns nil; it returns ctx.Err() if ctx ends first, the
// first informer's failure to sync (see mirror.WaitForCacheSync), or
// ErrNotStarted before Start.
func (f *Factory) WaitForCacheSync(ctx context.Context) error {
	f.mu.Lock()
	if f.ctx == nil {
		f.mu.Unlock()
		return ErrNotStarted
	}
	waiters := make([]mirror.SyncWaiter, 0, len(f.entries))
	for _, e := range f.entries {
		waiters = append(waiters, e.inf)
	}
	f.mu.Unlock()
	return mirror.WaitForCacheSync(ctx, waiters...)
}

// Len returns how many informers the factory holds: those asked for and
// not yet released by every consumer.
func (f *Factory) Len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.entries)
}

// Typed returns a handle on the factory's informer of req's objects of
// type T, made, the first time, over the ListWatcher newLW returns for the
// request's namespace and options, typically:
//
//	func(ns string, o k8s.Options) source.ListWatcher[*corev1.Pod] {
//		pods := clientset.CoreV1().Pods(ns)
//		return k8s.New[*corev1.Pod](pods.List, pods.Watch, o)
//	}
//
// req.GVR names the resource; it must be set. The caller must Release the
// handle.
func Typed[T Object](f *Factory, req Request[T], newLW func(namespace string, opts Options) source.ListWatcher[T]) (*Handle[T], error) {
	if newLW == nil {
		return nil, errors.New("k8s: Typed needs a ListWatcher constructor")
	}
	return acquire(f, "typed", req, func(o Options) source.ListWatcher[T] {
		return newLW(req.Namespace, o)
	})
}

// Dynamic returns a handle on the factory's informer of req's objects as
// unstructured objects, through FactoryOptions.Dynamic: any resource,
// custom resources included. The caller must Release the handle.
func Dynamic(f *Factory, req Request[*unstructured.Unstructured]) (*Handle[*unstructured.Unstructured], error) {
	if f.opts.Dynamic == nil {
		return nil, errors.New("k8s: Dynamic needs FactoryOptions.Dynamic")
	}
	return acquire(f, "dynamic", req, func(o Options) source.ListWatcher[*unstructured.Unstructured] {
		return NewDynamic(f.opts.Dynamic.Resource(req.GVR).Namespace(req.Namespace), o)
	})
}

// Metadata returns a handle on the factory's informer of the metadata
// alone of req's objects (metav1.PartialObjectMetadata: names, labels,
// annotations, owners, UID, resource version), through
// FactoryOptions.Metadata. It costs a fraction of a full object's memory,
// and keeps the keys, versions and identities (UIDs) of a typed
// informer. The caller must Release the handle.
func Metadata(f *Factory, req Request[*metav1.PartialObjectMetadata]) (*Handle[*metav1.PartialObjectMetadata], error) {
	if f.opts.Metadata == nil {
		return nil, errors.New("k8s: Metadata needs FactoryOptions.Metadata")
	}
	return acquire(f, "metadata", req, func(o Options) source.ListWatcher[*metav1.PartialObjectMetadata] {
		return NewMetadata(f.opts.Metadata, req.GVR, req.Namespace, o)
	})
}

// acquire returns a handle on the informer for req, making it if there is
// none.
func acquire[T Object](f *Factory, kind string, req Request[T], newLW func(Options) source.ListWatcher[T]) (*Handle[T], error) {
	if req.GVR.Resource == "" {
		return nil, errors.New("k8s: a factory request needs its GVR's Resource")
	}
	if req.Transform != nil && req.TransformName == "" {
		return nil, errors.New("k8s: a factory request's Transform needs a TransformName")
	}
	key := factoryKey{kind: kind, typ: reflect.TypeFor[T](), res: req.Resource,
		strip: req.StripManagedFields, transformName: req.TransformName}
	f.mu.Lock()
	defer f.mu.Unlock()
	for {
		if f.shutdown {
			return nil, ErrFactoryShutdown
		}
		if e := f.entries[key]; e != nil {
			e.refs++
			return newHandle(e, e.inf.(*mirror.Informer[Key, T])), nil
		}
		// The caller's constructor runs without the lock, so that it
		// may use the factory; a request for the same key meanwhile
		// makes one too, and the first one stored wins.
		f.mu.Unlock()
		e := &entry{f: f, key: key}
		e.inf = newFactoryInformer(f, e, req, newLW)
		f.mu.Lock()
		if f.entries[key] == nil && !f.shutdown {
			f.entries[key] = e
			if f.ctx != nil {
				f.startLocked(e)
			}
		}
	}
}

// newFactoryInformer makes the informer of an entry.
func newFactoryInformer[T Object](f *Factory, e *entry, req Request[T], newLW func(Options) source.ListWatcher[T]) *mirror.Informer[Key, T] {
	lw := newLW(Options{LabelSelector: req.LabelSelector, FieldSelector: req.FieldSelector,
		NoStreamingList: f.opts.NoStreamingList})
	transform := req.Transform
	if req.StripManagedFields {
		transform = chainTransforms(StripManagedFields[T], req.Transform)
	}
	// The informer sees lw through goneListWatcher, which hides lw's
	// version order unless it is passed on.
	var compare func(a, b string) (int, error)
	if c, ok := lw.(source.VersionComparer); ok {
		compare = c.CompareVersions
	}
	var inf *mirror.Informer[Key, T]
	inf = NewInformer(goneListWatcher[T](lw, e, func() bool { return inf.HasSynced() }), InformerOptions[T]{
		CompareVersions: compare,
		Name:            cmp.Or(req.Name, req.Resource.String()),
		Indexers:        mirror.Indexers[T]{LabelIndex: IndexByLabels[T]},
		Transform:       transform,
		ResyncPeriod:    f.opts.ResyncPeriod,
		ListWatch:       f.opts.ListWatch,
		Metrics:         f.opts.Metrics,
		ErrorHandler:    e.report,
		Logger:          f.logger,
	})
	return inf
}

// startLocked runs e's informer until f's context ends or e is released.
// f.mu must be held.
func (f *Factory) startLocked(e *entry) {
	if e.done != nil {
		return
	}
	ctx, cancel := context.WithCancel(f.ctx)
	e.cancel, e.done = cancel, make(chan struct{})
	inf, done := e.inf, e.done
	f.running.Add(1)
	go func() {
		defer f.running.Done()
		defer close(done)
		_ = inf.Run(ctx) // ErrStarted only, if the caller ran it
	}()
}

// release drops one reference to e, and stops e's informer, waiting for
// it, if it was the last.
func (f *Factory) release(e *entry) {
	f.mu.Lock()
	e.refs--
	if e.refs > 0 {
		f.mu.Unlock()
		return
	}
	if f.entries[e.key] == e {
		delete(f.entries, e.key)
	}
	cancel, done := e.cancel, e.done
	f.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	f.mu.Lock()
	e.inf = nil // the cache goes with the informer
	f.mu.Unlock()
}

// runner is what the factory needs of a *mirror.Informer[Key, T].
type runner interface {
	Run(ctx context.Context) error
	WaitForSync(ctx context.Context) error
	HasSynced() bool
}

// entry is one informer of a factory and its consumers.
type entry struct {
	f   *Factory
	key factoryKey

	// Guarded by f.mu.
	refs   int
	inf    runner
	cancel context.CancelFunc
	done   chan struct{} // closed when Run has returned; nil before Start

	gone goneState
}

// report passes an informer's failure on, but not the retries of a
// resource known to be gone.
func (e *entry) report(err error) {
	if isResourceNotFound(err) && e.gone.is() {
		return
	}
	e.f.report(e.key.res, err)
}

func (f *Factory) report(r Resource, err error) {
	if f.opts.ErrorHandler != nil {
		f.opts.ErrorHandler(r, err)
		return
	}
	f.logger.Warn("k8s: informer error", "resource", r.String(), "err", err)
}

// chainTransforms returns a transform that runs first and then second, if
// set.
func chainTransforms[T any](first, second mirror.TransformFunc[T]) mirror.TransformFunc[T] {
	if second == nil {
		return first
	}
	return func(obj T) (T, error) {
		obj, err := first(obj)
		if err != nil {
			return obj, err
		}
		return second(obj)
	}
}

// goneError is the report of a resource gone.
func goneError(r Resource, retry time.Duration, err error) error {
	return fmt.Errorf("k8s: %s: %w after having synced, asking again every %s: %w: %w",
		r, ErrResourceGone, retry, mirror.ErrPermanent, err)
}
