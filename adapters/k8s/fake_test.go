package k8s

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// fakePods plays a typed Pod client: it answers List and Watch from a
// script, in order, and records the options of every request.
type fakePods struct {
	mu        sync.Mutex
	lists     []fakeList
	watches   []fakeWatch
	listOpts  []metav1.ListOptions
	watchOpts []metav1.ListOptions
}

type fakeList struct {
	list *corev1.PodList
	err  error
}

type fakeWatch struct {
	src *fakeSource
	err error
}

// List has the signature of the List method of a typed client, which
// returns a typed nil list with an error.
func (f *fakePods) List(_ context.Context, o metav1.ListOptions) (*corev1.PodList, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listOpts = append(f.listOpts, o)
	a := f.lists[0]
	f.lists = f.lists[1:]
	return a.list, a.err
}

func (f *fakePods) Watch(_ context.Context, o metav1.ListOptions) (watch.Interface, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.watchOpts = append(f.watchOpts, o)
	a := f.watches[0]
	f.watches = f.watches[1:]
	if a.err != nil {
		return nil, a.err
	}
	return a.src, nil
}

func (f *fakePods) lw(opts Options) *ListWatcher[*corev1.Pod] {
	return New[*corev1.Pod](f.List, f.Watch, opts)
}

// fakeSource is a client-go watch whose events the test sends. Stop
// closes stopped, once; the test closes events to end the stream as a
// server would.
type fakeSource struct {
	events  chan watch.Event
	stopped chan struct{}
	once    sync.Once
}

func newFakeSource() *fakeSource {
	return &fakeSource{events: make(chan watch.Event, 16), stopped: make(chan struct{})}
}

func (s *fakeSource) ResultChan() <-chan watch.Event { return s.events }
func (s *fakeSource) Stop()                          { s.once.Do(func() { close(s.stopped) }) }

func (s *fakeSource) isStopped() bool {
	select {
	case <-s.stopped:
		return true
	default:
		return false
	}
}

func pod(ns, name, rv string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: rv}}
}

func podList(rv, cont string, pods ...*corev1.Pod) *corev1.PodList {
	l := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: rv, Continue: cont}}
	for _, p := range pods {
		l.Items = append(l.Items, *p)
	}
	return l
}
