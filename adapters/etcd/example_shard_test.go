package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/listwatch/mirror/adapters/etcd"
	"github.com/listwatch/mirror/shard"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// This example runs one replica of a controller as a member of a shard
// group kept under /controllers/mine/: it reconciles a key only while it
// holds the key's shard, and writes through the fenced path, so that
// etcd refuses the write if the shard moved on meanwhile. It needs a
// cluster, so it is not run.
func ExampleNewShardBackend() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"10.0.0.1:2379"}})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	m := shard.NewMember(etcd.NewShardBackend(cli, "/controllers/mine/", etcd.Options{}), shard.MemberOptions{})
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }() // Run leaves the group when ctx ends

	reconcile := func(key string) error {
		work, release, ok := m.Hold(ctx, shard.Hash(key))
		if !ok {
			return nil // another replica's key, or this one is not sure of its lease
		}
		defer release()
		_, err := etcd.FencedPut(work, cli, "/status/"+key, "reconciled")
		return err // wraps shard.ErrFenced if the shard moved on
	}
	time.Sleep(time.Second) // stands for the controller's own work
	if err := reconcile("/objects/a"); err != nil {
		log.Print(err)
	}
	cancel()
	if err := <-done; err != nil {
		log.Fatal(err) // wraps mirror.ErrPermanent if etcd refused the member
	}
}

// This example makes a write conditional on the claim of a shard that a
// shard.Member granted the work on. The token is made by hand here, as
// the member would put it in the work's context; newClient stands in for
// clientv3.New, as in the package example.
func ExampleFencedPut() {
	cli := newClient()
	defer cli.Close()
	ctx := context.Background()
	const claimKey = "/controllers/mine/shards/00007"
	// A member claims shard 7: the claim's key is created, and its
	// CreateRevision is the token.
	claim, err := cli.Put(ctx, claimKey, "replica-a")
	if err != nil {
		log.Fatal(err)
	}
	work := shard.WithToken(ctx, shard.Token{Shard: 7, Record: claimKey, Value: claim.Header.Revision})

	if _, err := etcd.FencedPut(work, cli, "/status/x", "from replica-a"); err != nil {
		log.Fatal(err)
	}
	fmt.Println("written while the claim stands")

	// The shard moves on: another member's claim creates the key anew.
	if _, err := cli.Delete(ctx, claimKey); err != nil {
		log.Fatal(err)
	}
	if _, err := cli.Put(ctx, claimKey, "replica-b"); err != nil {
		log.Fatal(err)
	}
	_, err = etcd.FencedPut(work, cli, "/status/x", "late, from replica-a")
	fmt.Println("refused:", errors.Is(err, shard.ErrFenced))
	// Output:
	// written while the claim stands
	// refused: true
}

// This example adds the fence to a transaction of the caller's own, here
// one that also checks the status it replaces.
func ExampleFence() {
	cli := newClient()
	defer cli.Close()
	ctx := context.Background()
	const claimKey = "/controllers/mine/shards/00003"
	claim, err := cli.Put(ctx, claimKey, "replica-a")
	if err != nil {
		log.Fatal(err)
	}
	work := shard.WithToken(ctx, shard.Token{Shard: 3, Record: claimKey, Value: claim.Header.Revision})

	fence, err := etcd.Fence(work)
	if err != nil {
		log.Fatal(err) // etcd.ErrNoToken: the work was not granted by a member
	}
	resp, err := cli.Txn(work).
		If(fence, clientv3.Compare(clientv3.CreateRevision("/status/y"), "=", 0)).
		Then(clientv3.OpPut("/status/y", "first")).
		Commit()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("written:", resp.Succeeded)
	// Output:
	// written: true
}

// Txn serves the examples' transactions: comparisons of a key's
// CreateRevision, ModRevision or value, and puts, reads and deletes of
// single keys, all at one new revision if anything is written.
func (m *memoryEtcd) Txn(_ context.Context, r *pb.TxnRequest, _ ...grpc.CallOption) (*pb.TxnResponse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ok := true
	for _, c := range r.Compare {
		ok = ok && m.holds(c)
	}
	ops := r.Success
	if !ok {
		ops = r.Failure
	}
	resp := &pb.TxnResponse{Succeeded: ok}
	var events []*mvccpb.Event
	next := m.rev + 1
	for _, op := range ops {
		switch req := op.Request.(type) {
		case *pb.RequestOp_RequestRange:
			kvs := m.at(m.rev, req.RequestRange.Key, req.RequestRange.RangeEnd)
			resp.Responses = append(resp.Responses, &pb.ResponseOp{Response: &pb.ResponseOp_ResponseRange{
				ResponseRange: &pb.RangeResponse{Header: m.header(), Kvs: kvs, Count: int64(len(kvs))}}})
		case *pb.RequestOp_RequestPut:
			p := req.RequestPut
			kv := &mvccpb.KeyValue{Key: p.Key, Value: p.Value, CreateRevision: next, ModRevision: next, Version: 1}
			if prev := m.at(m.rev, p.Key, nil); len(prev) == 1 {
				kv.CreateRevision, kv.Version = prev[0].CreateRevision, prev[0].Version+1
			}
			events = append(events, &mvccpb.Event{Type: mvccpb.PUT, Kv: kv})
			resp.Responses = append(resp.Responses, &pb.ResponseOp{Response: &pb.ResponseOp_ResponsePut{
				ResponsePut: &pb.PutResponse{Header: &pb.ResponseHeader{Revision: next}}}})
		case *pb.RequestOp_RequestDeleteRange:
			d := req.RequestDeleteRange
			gone := m.at(m.rev, d.Key, d.RangeEnd)
			for _, kv := range gone {
				events = append(events, &mvccpb.Event{Type: mvccpb.DELETE, Kv: &mvccpb.KeyValue{Key: kv.Key, ModRevision: next}})
			}
			resp.Responses = append(resp.Responses, &pb.ResponseOp{Response: &pb.ResponseOp_ResponseDeleteRange{
				ResponseDeleteRange: &pb.DeleteRangeResponse{Deleted: int64(len(gone))}}})
		}
	}
	if len(events) > 0 {
		m.rev = next
		m.record(events)
	}
	resp.Header = m.header()
	return resp, nil
}

// holds reports whether comparison c holds now.
func (m *memoryEtcd) holds(c *pb.Compare) bool {
	kv := &mvccpb.KeyValue{} // an absent key: revisions 0, no value
	if cur := m.at(m.rev, c.Key, nil); len(cur) == 1 {
		kv = cur[0]
	}
	var got, want int64
	switch t := c.TargetUnion.(type) {
	case *pb.Compare_CreateRevision:
		got, want = kv.CreateRevision, t.CreateRevision
	case *pb.Compare_ModRevision:
		got, want = kv.ModRevision, t.ModRevision
	case *pb.Compare_Value:
		if c.Result != pb.Compare_EQUAL {
			panic("the examples' etcd compares values for equality only")
		}
		return string(kv.Value) == string(t.Value)
	default:
		panic(fmt.Sprintf("the examples' etcd does not compare %T", t))
	}
	switch c.Result {
	case pb.Compare_EQUAL:
		return got == want
	case pb.Compare_NOT_EQUAL:
		return got != want
	case pb.Compare_GREATER:
		return got > want
	}
	return got < want
}
