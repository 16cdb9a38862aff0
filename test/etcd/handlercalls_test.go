package etcd

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/listwatch/mirror"
	etcdmirror "github.com/listwatch/mirror/adapters/etcd"
	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// callKind is the Handler method a notification came through.
type callKind uint8

const (
	callAdd callKind = iota + 1
	callUpdate
	callDelete
)

func (k callKind) String() string {
	switch k {
	case callAdd:
		return "OnAdd"
	case callUpdate:
		return "OnUpdate"
	case callDelete:
		return "OnDelete"
	}
	return "call(" + strconv.Itoa(int(k)) + ")"
}

// call is one notification a handler received. old is set for OnUpdate
// only; unknown is OnDelete's finalStateUnknown.
type call[T any] struct {
	kind    callKind
	old     etcdmirror.Object[T]
	obj     etcdmirror.Object[T]
	unknown bool
}

// callLog is a Handler that keeps every notification, in the order it
// received them.
type callLog[T any] struct {
	mu    sync.Mutex
	calls []call[T]
}

func (l *callLog[T]) record(c call[T]) {
	l.mu.Lock()
	l.calls = append(l.calls, c)
	l.mu.Unlock()
}

func (l *callLog[T]) OnAdd(obj etcdmirror.Object[T], _ bool) {
	l.record(call[T]{kind: callAdd, obj: obj})
}

func (l *callLog[T]) OnUpdate(old, obj etcdmirror.Object[T]) {
	l.record(call[T]{kind: callUpdate, old: old, obj: obj})
}

func (l *callLog[T]) OnDelete(obj etcdmirror.Object[T], finalStateUnknown bool) {
	l.record(call[T]{kind: callDelete, obj: obj, unknown: finalStateUnknown})
}

// all returns the calls so far.
func (l *callLog[T]) all() []call[T] {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]call[T](nil), l.calls...)
}

// len is how many calls have come so far.
func (l *callLog[T]) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.calls)
}

// view is what the handler holds after its calls: each key's last added
// or updated state, unless a delete came after it.
func (l *callLog[T]) view() map[string]etcdmirror.Object[T] {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]etcdmirror.Object[T])
	for _, c := range l.calls {
		if c.kind == callDelete {
			delete(out, c.obj.Key)
		} else {
			out[c.obj.Key] = c.obj
		}
	}
	return out
}

// byKey groups calls by key, each key's in the order they came.
func byKey[T any](calls []call[T]) map[string][]call[T] {
	out := make(map[string][]call[T])
	for _, c := range calls {
		out[c.obj.Key] = append(out[c.obj.Key], c)
	}
	return out
}

// identityOptions are the informer options these tests give an informer
// of etcd objects, as the adapter's constructor will: an object is a key's
// life from its creation to its deletion, which its CreateRevision names,
// and its version is its ModRevision, so that a relist that finds a key
// unchanged does not report it as updated. Pauses are short, so that tests
// recover quickly.
func identityOptions[T any](report func(error)) mirror.InformerOptions[string, etcdmirror.Object[T]] {
	return mirror.InformerOptions[string, etcdmirror.Object[T]]{
		KeyFunc: etcdmirror.KeyOf[T],
		SameObject: func(cached, incoming etcdmirror.Object[T]) bool {
			return cached.CreateRevision == incoming.CreateRevision
		},
		ResourceVersion: func(o etcdmirror.Object[T]) string { return strconv.FormatInt(o.ModRevision, 10) },
		ListWatch: mirror.ListWatchOptions{
			InitialBackoff: 20 * time.Millisecond,
			MaxBackoff:     200 * time.Millisecond,
		},
		ErrorHandler: report,
	}
}

// runningInformer is an informer running on a goroutine of its own, with
// a callLog registered before Run.
type runningInformer[T any] struct {
	inf    *etcdInformer[T]
	calls  *callLog[T]
	cancel context.CancelFunc
	done   chan error
}

// runInformer starts an informer of lw with opts.
func runInformer[T any](lw source.ListWatcher[etcdmirror.Object[T]], opts mirror.InformerOptions[string, etcdmirror.Object[T]]) (*runningInformer[T], error) {
	r := &runningInformer[T]{
		inf:   mirror.NewInformer(lw, opts),
		calls: &callLog[T]{},
		done:  make(chan error, 1),
	}
	if _, err := r.inf.AddEventHandler(r.calls, mirror.HandlerOptions{}); err != nil {
		return nil, err
	}
	var ctx context.Context
	ctx, r.cancel = context.WithCancel(context.Background())
	go func() { r.done <- r.inf.Run(ctx) }()
	return r, nil
}

// stop ends the informer and returns what Run returned; no handler is
// called afterwards. It must be called once.
func (r *runningInformer[T]) stop() error {
	r.cancel()
	return <-r.done
}

// cacheObjects returns inf's cache as key -> object.
func cacheObjects[T any](inf *etcdInformer[T]) map[string]etcdmirror.Object[T] {
	out := make(map[string]etcdmirror.Object[T], inf.Len())
	for k, o := range inf.All() {
		out[k] = o
	}
	return out
}

// requireMirrored waits until r's informer has reached rev, and its cache
// and its handler's view both hold exactly want.
func requireMirrored[T any](t *testing.T, r *runningInformer[T], want map[string]etcdmirror.Object[T], rev int64) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.GreaterOrEqual(c, informerRev(r.inf), rev, "informer reaches revision %d", rev)
		assert.Equal(c, want, cacheObjects(r.inf), "cache equals etcd at revision %d", rev)
		assert.Equal(c, want, r.calls.view(), "handler's view equals etcd at revision %d", rev)
	}, convergeTimeout, 10*time.Millisecond)
}
