package etcd

import (
	"context"
	"errors"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// fakeClient returns a client whose reads and watches go to kv and w, so
// that unit tests can script etcd's answers.
func fakeClient(kv *fakeKV, w *fakeWatcher) *clientv3.Client {
	return &clientv3.Client{KV: kv, Watcher: w}
}

// fakeKV answers Gets from a script and records each request.
type fakeKV struct {
	clientv3.KV // not faked: calling anything else panics

	mu      sync.Mutex
	answers []fakeGet
	ops     []clientv3.Op
	// probe answers a watch's look at its start revision.
	probe error
}

type fakeGet struct {
	resp *clientv3.GetResponse
	err  error
}

func (f *fakeKV) Get(_ context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	if op := clientv3.OpGet(key, opts...); f == nil || (op.IsKeysOnly() && op.Rev() > 0) {
		// A watch's look at its start revision (probeStart) answers
		// probe, or nothing that concerns it.
		if f != nil && f.probe != nil {
			return nil, f.probe
		}
		return nil, errors.New("fake: not scripted")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ops = append(f.ops, clientv3.OpGet(key, opts...))
	a := f.answers[0]
	f.answers = f.answers[1:]
	return a.resp, a.err
}

// fakeWatcher hands out watch channels that the test writes to, and counts
// progress requests.
type fakeWatcher struct {
	clientv3.Watcher // not faked: calling anything else panics

	mu       sync.Mutex
	watches  []fakeWatch
	progress int
	// answer, if set, runs on every progress request with the newest
	// watch's channel.
	answer func(chan<- clientv3.WatchResponse)
	// gone, once set, makes Watch wait until its context ends and return
	// a closed channel, as the client does when its member is gone.
	gone bool
	// stalled, once set, makes progress requests wait until their
	// context ends, as the client's do while it reconnects.
	stalled bool
	// inFlight counts the progress requests that have not returned;
	// lateReturns those that returned when the newest watch had ended:
	// the client would have dropped the stream by then, and a request
	// finding no stream opens one that is never closed.
	inFlight, lateReturns int
}

type fakeWatch struct {
	ctx context.Context
	op  clientv3.Op
	ch  chan clientv3.WatchResponse
}

func (f *fakeWatcher) Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	f.mu.Lock()
	w := fakeWatch{ctx: ctx, op: clientv3.OpGet(key, opts...), ch: make(chan clientv3.WatchResponse, 16)}
	f.watches = append(f.watches, w)
	gone := f.gone
	f.mu.Unlock()
	if gone {
		<-ctx.Done()
		close(w.ch)
	}
	return w.ch
}

func (f *fakeWatcher) memberGone() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gone = true
}

func (f *fakeWatcher) watchCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.watches)
}

func (f *fakeWatcher) RequestProgress(ctx context.Context) error {
	f.mu.Lock()
	f.progress++
	f.inFlight++
	answer, stalled, w := f.answer, f.stalled, f.watches[len(f.watches)-1]
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.inFlight--
		if f.watches[len(f.watches)-1].ctx.Err() != nil {
			f.lateReturns++
		}
	}()
	if stalled {
		<-ctx.Done()
		return ctx.Err()
	}
	if answer != nil {
		answer(w.ch)
	}
	return nil
}

func (f *fakeWatcher) setAnswer(answer func(chan<- clientv3.WatchResponse)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.answer = answer
}

// stall makes progress requests wait from now on until their context ends.
func (f *fakeWatcher) stall() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stalled = true
}

// requestsInFlight returns how many progress requests have not returned,
// and how many returned after the watch they were for had ended.
func (f *fakeWatcher) requestsInFlight() (inFlight, late int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.inFlight, f.lateReturns
}

func (f *fakeWatcher) watch(i int) fakeWatch {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.watches[i]
}

func (f *fakeWatcher) progressRequests() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.progress
}

func header(rev int64) *pb.ResponseHeader { return &pb.ResponseHeader{Revision: rev} }

func put(key, value string, create, mod, version int64) *clientv3.Event {
	return &clientv3.Event{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{
		Key: []byte(key), Value: []byte(value), CreateRevision: create, ModRevision: mod, Version: version,
	}}
}

func kvs(keys ...string) []*mvccpb.KeyValue {
	out := make([]*mvccpb.KeyValue, 0, len(keys))
	for _, k := range keys {
		out = append(out, &mvccpb.KeyValue{Key: []byte(k), Value: []byte("v"), CreateRevision: 2, ModRevision: 2, Version: 1})
	}
	return out
}
