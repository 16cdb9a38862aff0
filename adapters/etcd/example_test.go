package etcd_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"slices"
	"strings"
	"sync"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/adapters/etcd"
	"github.com/listwatch/mirror/source"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Service is what the examples keep under /services/, as JSON.
type Service struct {
	Addr string `json:"addr"`
}

func decodeService(_ string, v []byte) (Service, error) {
	var s Service
	err := json.Unmarshal(v, &s)
	return s, err
}

// This example mirrors /services/ into an informer and prints what its
// handler is told. newClient stands in for
//
//	clientv3.New(clientv3.Config{Endpoints: []string{"10.0.0.1:2379"}})
//
// so that the example runs without a server: it returns a real
// *clientv3.Client, whose own KV and Watcher code talks to a small
// in-memory etcd (defined at the end of this file) instead of a cluster.
func Example() {
	cli := newClient()
	defer cli.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := cli.Put(ctx, "/services/api", `{"addr": "10.0.0.1:443"}`); err != nil {
		log.Fatal(err)
	}
	if _, err := cli.Put(ctx, "/services/db", `{"addr": "10.0.0.2:5432"}`); err != nil {
		log.Fatal(err)
	}

	lw := etcd.NewTyped(cli, "/services/", decodeService, etcd.Options{})
	inf := etcd.NewInformer(lw, etcd.InformerOptions[Service]{})
	events := make(chan string)
	reg, err := inf.AddEventHandler(mirror.HandlerFuncs[etcd.Object[Service]]{
		AddFunc: func(o etcd.Object[Service], initial bool) {
			events <- fmt.Sprintf("add %s %s (initial list: %t)", o.Key, o.Value.Addr, initial)
		},
		UpdateFunc: func(old, o etcd.Object[Service]) {
			events <- fmt.Sprintf("update %s %s -> %s", o.Key, old.Value.Addr, o.Value.Addr)
		},
		DeleteFunc: func(o etcd.Object[Service], finalStateUnknown bool) {
			events <- fmt.Sprintf("delete %s, last at %s (final state unknown: %t)", o.Key, o.Value.Addr, finalStateUnknown)
		},
	}, mirror.HandlerOptions{})
	if err != nil {
		log.Fatal(err)
	}
	done := make(chan error)
	go func() { done <- inf.Run(ctx) }()
	defer func() {
		cancel()
		<-done // Run returns once nothing it started runs
	}()

	fmt.Println(<-events)
	fmt.Println(<-events)
	if err := mirror.WaitForCacheSync(ctx, reg); err != nil {
		log.Fatal(err)
	}

	for _, op := range []clientv3.Op{
		clientv3.OpPut("/services/web", `{"addr": "10.0.0.3:80"}`),
		clientv3.OpPut("/services/api", `{"addr": "10.0.0.1:8443"}`),
		clientv3.OpDelete("/services/db"),
	} {
		if _, err := cli.Do(ctx, op); err != nil {
			log.Fatal(err)
		}
		fmt.Println(<-events)
	}
	if api, ok := inf.GetByKey("/services/api"); ok {
		fmt.Println("api is at", api.Value.Addr, "since revision", api.ModRevision)
	}
	// Output:
	// add /services/api 10.0.0.1:443 (initial list: true)
	// add /services/db 10.0.0.2:5432 (initial list: true)
	// add /services/web 10.0.0.3:80 (initial list: false)
	// update /services/api 10.0.0.1:443 -> 10.0.0.1:8443
	// delete /services/db, last at 10.0.0.2:5432 (final state unknown: false)
	// api is at 10.0.0.1:8443 since revision 5
}

// This example uses a ListWatcher by hand, as a mirror.Reflector does: it
// lists /services/ page by page, every page at the revision of the first,
// then watches the changes made after that revision. An informer does this
// and more (relists, backoff, indexes, handlers). newClient stands in for
// clientv3.New, as in the package example.
func ExampleListWatcher() {
	cli := newClient()
	defer cli.Close()
	ctx := context.Background()
	for _, name := range []string{"a", "b", "c"} {
		if _, err := cli.Put(ctx, "/services/"+name, `{"addr": "`+name+`.local:80"}`); err != nil {
			log.Fatal(err)
		}
	}
	if _, err := cli.Put(ctx, "/services/broken", "{not json"); err != nil {
		log.Fatal(err)
	}

	lw := etcd.NewTyped(cli, "/services/", decodeService, etcd.Options{})
	opts := source.ListOptions{Limit: 2}
	var rv string
	for {
		page, err := lw.List(ctx, opts)
		if err != nil {
			log.Fatal(err)
		}
		for _, o := range page.Items {
			fmt.Println("listed", o.Key, o.Value.Addr)
		}
		for _, err := range page.Skipped {
			var bad *mirror.ObjectError // a value that is not a Service
			if errors.As(err, &bad) {
				fmt.Println("skipped", bad.Key)
			}
		}
		rv = page.ResourceVersion
		if page.Continue == "" {
			break
		}
		opts.Continue = page.Continue
	}
	fmt.Println("listed at revision", rv)

	w, err := lw.Watch(ctx, source.WatchOptions{ResourceVersion: rv})
	if err != nil {
		log.Fatal(err)
	}
	defer w.Stop()
	if _, err := cli.Delete(ctx, "/services/b"); err != nil {
		log.Fatal(err)
	}
	ev, err := w.Next(ctx)
	if err != nil {
		log.Fatal(err) // io.EOF once stopped; source.ErrExpired if compacted: list again
	}
	// A deletion carries the key alone, unless Options.PrevValues is set.
	fmt.Println(ev.Type, ev.Object.Key, "at revision", ev.ResourceVersion, "key only:", ev.KeyOnly)
	// Output:
	// listed /services/a a.local:80
	// listed /services/b b.local:80
	// listed /services/c c.local:80
	// skipped /services/broken
	// listed at revision 5
	// deleted /services/b at revision 6 key only: true
}

// newClient returns a *clientv3.Client served by a new, empty in-memory
// etcd. Only its KV and Watcher work, as the examples need nothing else.
func newClient() *clientv3.Client {
	m := &memoryEtcd{rev: 1, streams: make(map[*memoryStream]struct{})}
	cli := clientv3.NewCtxClient(context.Background())
	cli.KV = clientv3.NewKVFromKVClient(m, cli)
	cli.Watcher = clientv3.NewWatchFromWatchClient(m, cli)
	return cli
}

// memoryEtcd is a tiny etcd: puts, range deletes, reads at any past
// revision (it never compacts) and watch streams, at the gRPC level that
// the client's KV and Watcher call. It keeps every change, so it is only
// for examples.
type memoryEtcd struct {
	pb.KVClient // Txn and Compact are not served

	mu      sync.Mutex
	rev     int64
	history []*mvccpb.Event // every change, oldest first
	streams map[*memoryStream]struct{}
}

// at returns the keys in [key, end) as they were at rev, in key order.
func (m *memoryEtcd) at(rev int64, key, end []byte) []*mvccpb.KeyValue {
	state := make(map[string]*mvccpb.KeyValue)
	for _, ev := range m.history {
		if ev.Kv.ModRevision > rev {
			break
		}
		if ev.Type == mvccpb.DELETE {
			delete(state, string(ev.Kv.Key))
		} else {
			state[string(ev.Kv.Key)] = ev.Kv
		}
	}
	var kvs []*mvccpb.KeyValue
	for _, kv := range state {
		if inRange(kv.Key, key, end) {
			kvs = append(kvs, kv)
		}
	}
	slices.SortFunc(kvs, func(a, b *mvccpb.KeyValue) int { return strings.Compare(string(a.Key), string(b.Key)) })
	return kvs
}

// inRange reports whether k is in etcd's range [key, end): end empty means
// key alone, "\x00" every key from key on.
func inRange(k, key, end []byte) bool {
	switch {
	case len(end) == 0:
		return string(k) == string(key)
	case string(end) == "\x00":
		return string(k) >= string(key)
	}
	return string(k) >= string(key) && string(k) < string(end)
}

func (m *memoryEtcd) header() *pb.ResponseHeader { return &pb.ResponseHeader{Revision: m.rev} }

func (m *memoryEtcd) Range(_ context.Context, r *pb.RangeRequest, _ ...grpc.CallOption) (*pb.RangeResponse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rev := r.Revision
	if rev <= 0 {
		rev = m.rev
	} else if rev > m.rev {
		return nil, rpctypes.ErrGRPCFutureRev
	}
	kvs := m.at(rev, r.Key, r.RangeEnd)
	resp := &pb.RangeResponse{Header: m.header(), Count: int64(len(kvs))}
	if r.Limit > 0 && int64(len(kvs)) > r.Limit {
		kvs, resp.More = kvs[:r.Limit], true
	}
	if !r.CountOnly {
		resp.Kvs = kvs
	}
	return resp, nil
}

// RangeStream answers as an etcd older than 3.7 does, which lacks it.
func (m *memoryEtcd) RangeStream(context.Context, *pb.RangeRequest, ...grpc.CallOption) (grpc.ServerStreamingClient[pb.RangeStreamResponse], error) {
	return nil, status.Error(codes.Unimplemented, "unknown method RangeStream")
}

func (m *memoryEtcd) Put(_ context.Context, r *pb.PutRequest, _ ...grpc.CallOption) (*pb.PutResponse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rev++
	kv := &mvccpb.KeyValue{Key: r.Key, Value: r.Value, CreateRevision: m.rev, ModRevision: m.rev, Version: 1}
	if prev := m.at(m.rev, r.Key, nil); len(prev) == 1 {
		kv.CreateRevision, kv.Version = prev[0].CreateRevision, prev[0].Version+1
	}
	m.record([]*mvccpb.Event{{Type: mvccpb.PUT, Kv: kv}})
	return &pb.PutResponse{Header: m.header()}, nil
}

func (m *memoryEtcd) DeleteRange(_ context.Context, r *pb.DeleteRangeRequest, _ ...grpc.CallOption) (*pb.DeleteRangeResponse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	gone := m.at(m.rev, r.Key, r.RangeEnd)
	if len(gone) == 0 {
		return &pb.DeleteRangeResponse{Header: m.header()}, nil
	}
	m.rev++
	events := make([]*mvccpb.Event, len(gone))
	for i, kv := range gone {
		events[i] = &mvccpb.Event{Type: mvccpb.DELETE, Kv: &mvccpb.KeyValue{Key: kv.Key, ModRevision: m.rev}}
	}
	m.record(events)
	return &pb.DeleteRangeResponse{Header: m.header(), Deleted: int64(len(gone))}, nil
}

// record appends the events of one revision to the history and sends them
// to the watches they concern.
func (m *memoryEtcd) record(events []*mvccpb.Event) {
	m.history = append(m.history, events...)
	for s := range m.streams {
		for id, w := range s.watches {
			s.send(m.eventsFor(id, w, events))
		}
	}
}

// eventsFor is the response that tells watch id the events it watches, or
// nil if there are none.
func (m *memoryEtcd) eventsFor(id int64, w *pb.WatchCreateRequest, events []*mvccpb.Event) *pb.WatchResponse {
	var mine []*mvccpb.Event
	for _, ev := range events {
		if ev.Kv.ModRevision >= w.StartRevision && inRange(ev.Kv.Key, w.Key, w.RangeEnd) {
			mine = append(mine, ev)
		}
	}
	if len(mine) == 0 {
		return nil
	}
	return &pb.WatchResponse{Header: m.header(), WatchId: id, Events: mine}
}

func (m *memoryEtcd) Watch(ctx context.Context, _ ...grpc.CallOption) (pb.Watch_WatchClient, error) {
	s := &memoryStream{m: m, ctx: ctx, ready: make(chan struct{}, 1), watches: make(map[int64]*pb.WatchCreateRequest)}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.streams[s] = struct{}{}
	context.AfterFunc(ctx, func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		delete(m.streams, s)
	})
	return s, nil
}

// memoryStream is one watch stream: the client sends requests, and
// receives the responses in the order they were queued.
type memoryStream struct {
	grpc.ClientStream // headers and trailers are not served

	m       *memoryEtcd
	ctx     context.Context
	watches map[int64]*pb.WatchCreateRequest // guarded by m.mu
	nextID  int64                            // guarded by m.mu

	mu    sync.Mutex
	queue []*pb.WatchResponse
	ready chan struct{} // holds a token while queue may not be empty
}

func (s *memoryStream) Send(req *pb.WatchRequest) error {
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	switch r := req.RequestUnion.(type) {
	case *pb.WatchRequest_CreateRequest:
		w := r.CreateRequest
		if w.StartRevision == 0 {
			w.StartRevision = m.rev + 1 // from now
		}
		id := s.nextID
		s.nextID++
		s.watches[id] = w
		s.send(&pb.WatchResponse{Header: m.header(), WatchId: id, Created: true})
		s.send(m.eventsFor(id, w, m.history)) // the past the watch asked for
	case *pb.WatchRequest_CancelRequest:
		delete(s.watches, r.CancelRequest.WatchId)
		s.send(&pb.WatchResponse{Header: m.header(), WatchId: r.CancelRequest.WatchId, Canceled: true})
	case *pb.WatchRequest_ProgressRequest:
		// Every watch here is always current.
		s.send(&pb.WatchResponse{Header: m.header(), WatchId: clientv3.InvalidWatchID})
	}
	return nil
}

// send queues resp, if not nil, for Recv.
func (s *memoryStream) send(resp *pb.WatchResponse) {
	if resp == nil {
		return
	}
	s.mu.Lock()
	s.queue = append(s.queue, resp)
	s.mu.Unlock()
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

func (s *memoryStream) Recv() (*pb.WatchResponse, error) {
	for {
		s.mu.Lock()
		if len(s.queue) > 0 {
			resp := s.queue[0]
			s.queue = s.queue[1:]
			if len(s.queue) > 0 {
				select {
				case s.ready <- struct{}{}:
				default:
				}
			}
			s.mu.Unlock()
			return resp, nil
		}
		s.mu.Unlock()
		select {
		case <-s.ready:
		case <-s.ctx.Done():
			return nil, status.FromContextError(s.ctx.Err()).Err()
		}
	}
}

func (s *memoryStream) CloseSend() error { return nil }

func (s *memoryStream) Context() context.Context { return s.ctx }
