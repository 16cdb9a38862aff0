package k8s

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/adapters/k8s"
	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// typedClient is what the tests use of a typed client of one resource in
// one namespace, such as clientset.CoreV1().Pods(ns).
type typedClient[T k8s.Object, L runtime.Object] interface {
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// kind is a built-in resource the tests mirror through its typed client.
type kind[T k8s.Object, L runtime.Object] struct {
	name   string
	client func(cs kubernetes.Interface, ns string) typedClient[T, L]
	// object returns a new object to create.
	object func(ns, name string, labels map[string]string) T
}

var configMaps = kind[*corev1.ConfigMap, *corev1.ConfigMapList]{
	name: "ConfigMaps",
	client: func(cs kubernetes.Interface, ns string) typedClient[*corev1.ConfigMap, *corev1.ConfigMapList] {
		return cs.CoreV1().ConfigMaps(ns)
	},
	object: func(ns, name string, labels map[string]string) *corev1.ConfigMap {
		return &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
			Data:       map[string]string{"created": name},
		}
	},
}

var pods = kind[*corev1.Pod, *corev1.PodList]{
	name: "Pods",
	client: func(cs kubernetes.Interface, ns string) typedClient[*corev1.Pod, *corev1.PodList] {
		return cs.CoreV1().Pods(ns)
	},
	object: func(ns, name string, labels map[string]string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "registry.k8s.io/pause"}}},
		}
	},
}

// bothKinds runs a test of ConfigMaps, which the server reads from etcd,
// and the same test of Pods, which it reads from its watch cache, as
// parallel subtests of a parallel test.
func bothKinds(t *testing.T, configMapsTest func(*testing.T), podsTest func(*testing.T)) {
	t.Parallel()
	t.Run("ConfigMaps", func(t *testing.T) {
		t.Parallel()
		configMapsTest(t)
	})
	t.Run("Pods", func(t *testing.T) {
		t.Parallel()
		podsTest(t)
	})
}

// lw returns a ListWatcher of k's objects in every namespace, read through
// cs.
func (k kind[T, L]) lw(cs kubernetes.Interface, opts k8s.Options) *k8s.ListWatcher[T] {
	cl := k.client(cs, metav1.NamespaceAll)
	return k8s.New[T](cl.List, cl.Watch, opts)
}

func (k kind[T, L]) create(t testing.TB, cs kubernetes.Interface, ns, name string, labels map[string]string) T {
	t.Helper()
	obj, err := k.client(cs, ns).Create(context.Background(), k.object(ns, name, labels), metav1.CreateOptions{})
	require.NoError(t, err)
	return obj
}

// populate creates o0 to o<n-1> in s's namespace, with s's label.
func (k kind[T, L]) populate(t testing.TB, cs kubernetes.Interface, s scope, n int) {
	t.Helper()
	for i := range n {
		k.create(t, cs, s.ns, fmt.Sprintf("o%d", i), s.labels)
	}
}

// annotate sets the annotation "n" of an object to v: a change every
// resource allows.
func (k kind[T, L]) annotate(t testing.TB, cs kubernetes.Interface, key k8s.Key, v string) T {
	t.Helper()
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{"n":%q}}}`, v)
	obj, err := k.client(cs, key.Namespace).Patch(context.Background(), key.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	require.NoError(t, err)
	return obj
}

func (k kind[T, L]) delete(t testing.TB, cs kubernetes.Interface, key k8s.Key) {
	t.Helper()
	// Pods would otherwise wait for a kubelet to confirm.
	err := k.client(cs, key.Namespace).Delete(context.Background(), key.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	require.NoError(t, err)
}

// serverState lists k's objects that selector selects, consistently, as
// key -> resource version.
func (k kind[T, L]) serverState(t testing.TB, cs kubernetes.Interface, selector string) map[k8s.Key]string {
	t.Helper()
	list, err := k.client(cs, metav1.NamespaceAll).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	require.NoError(t, err)
	return versionsOf(t, list)
}

// versionsOf returns the items of a list as key -> resource version.
func versionsOf(t testing.TB, list runtime.Object) map[k8s.Key]string {
	t.Helper()
	out := make(map[k8s.Key]string)
	require.NoError(t, meta.EachListItem(list, func(o runtime.Object) error {
		m, err := meta.Accessor(o)
		if err != nil {
			return err
		}
		out[k8s.Key{Namespace: m.GetNamespace(), Name: m.GetName()}] = m.GetResourceVersion()
		return nil
	}))
	return out
}

// recorder is a handler that keeps what it has been told: its own view of
// the objects, built from its notifications alone, and every delete.
type recorder[T k8s.Object] struct {
	mu      sync.Mutex
	view    map[k8s.Key]T
	deletes []deleteCall[T]
}

// deleteCall is one OnDelete.
type deleteCall[T k8s.Object] struct {
	obj     T
	unknown bool
}

func newRecorder[T k8s.Object]() *recorder[T] {
	return &recorder[T]{view: make(map[k8s.Key]T)}
}

func (r *recorder[T]) OnAdd(obj T, _ bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.view[key(obj)] = obj
}

func (r *recorder[T]) OnUpdate(_, obj T) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.view[key(obj)] = obj
}

func (r *recorder[T]) OnDelete(obj T, finalStateUnknown bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.view, key(obj))
	r.deletes = append(r.deletes, deleteCall[T]{obj: obj, unknown: finalStateUnknown})
}

// versions returns the recorder's view as key -> resource version.
func (r *recorder[T]) versions() map[k8s.Key]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return versionsByKey(maps.All(r.view))
}

func (r *recorder[T]) deleteCalls() []deleteCall[T] {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]deleteCall[T](nil), r.deletes...)
}

func key[T k8s.Object](obj T) k8s.Key {
	k, _ := k8s.KeyOf(obj)
	return k
}

// versionsByKey returns objects as key -> resource version.
func versionsByKey[T k8s.Object](all func(yield func(k8s.Key, T) bool)) map[k8s.Key]string {
	out := make(map[k8s.Key]string)
	for k, o := range all {
		out[k] = o.GetResourceVersion()
	}
	return out
}

// errorLog collects what an informer reports.
type errorLog struct {
	mu   sync.Mutex
	errs []error
}

func (l *errorLog) add(err error) {
	l.mu.Lock()
	l.errs = append(l.errs, err)
	l.mu.Unlock()
}

func (l *errorLog) all() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.errs...)
}

// has reports whether some error reported so far wraps target.
func (l *errorLog) has(target error) bool {
	for _, err := range l.all() {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// informer is a running informer with its recording handlers and the
// errors it reported.
type informer[T k8s.Object] struct {
	*mirror.Informer[k8s.Key, T]
	handlers []*recorder[T]
	log      *errorLog
}

// informerOptions says how startInformer runs an informer.
type informerOptions struct {
	handlers  int   // recording handlers registered before Run; 0 means 1
	pageSize  int64 // 0: the Reflector's default
	streaming bool  // ReflectorOptions.StreamingList; without it, the ListWatcher chooses
}

// startInformer runs an informer of lw, keyed by namespace and name and
// indexed by namespace, until the test ends, and waits until it and every
// handler have synced. Its pauses are short, so that tests recover
// quickly.
func startInformer[T k8s.Object](t *testing.T, lw source.ListWatcher[T], o informerOptions) *informer[T] {
	t.Helper()
	log := &errorLog{}
	inf := &informer[T]{log: log, Informer: mirror.NewInformer(lw, mirror.InformerOptions[k8s.Key, T]{
		KeyFunc:         k8s.KeyOf[T],
		Indexers:        mirror.Indexers[T]{k8s.NamespaceIndex: k8s.IndexByNamespace[T]},
		ResourceVersion: k8s.ResourceVersionOf[T],
		Name:            t.Name(),
		ListWatch: mirror.ListWatchOptions{
			PageSize:       o.pageSize,
			StreamingList:  o.streaming,
			InitialBackoff: 20 * time.Millisecond,
			MaxBackoff:     500 * time.Millisecond,
		},
		ErrorHandler: log.add,
	})}
	syncers := []mirror.SyncWaiter{inf}
	for range max(o.handlers, 1) {
		h := newRecorder[T]()
		reg, err := inf.AddEventHandler(h, mirror.HandlerOptions{})
		require.NoError(t, err)
		inf.handlers = append(inf.handlers, h)
		syncers = append(syncers, reg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		assert.NoError(t, <-done)
	})
	wctx, wcancel := context.WithTimeout(ctx, convergeTimeout)
	defer wcancel()
	require.NoError(t, mirror.WaitForCacheSync(wctx, syncers...), "informer and handlers sync")
	return inf
}

// requireConverged waits until inf's cache and every handler's view hold
// exactly want, as key -> resource version.
func requireConverged[T k8s.Object](t *testing.T, inf *informer[T], want map[k8s.Key]string) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, want, versionsByKey(inf.All()), "cache")
		for i, h := range inf.handlers {
			assert.Equal(c, want, h.versions(), "handler %d's view", i)
		}
	}, convergeTimeout, 10*time.Millisecond)
}

// deleteCounts returns how many deletes a handler got per key.
func deleteCounts[T k8s.Object](calls []deleteCall[T]) map[k8s.Key]int {
	out := make(map[k8s.Key]int)
	for _, c := range calls {
		out[key(c.obj)]++
	}
	return out
}
