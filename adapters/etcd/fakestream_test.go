package etcd

import (
	"context"
	"io"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// fakeStreamClient returns a client whose Gets go to kv and whose
// GetStreams to streams. The streams are served at the gRPC level, under
// the real client's GetStream, so that its channel and its error mapping
// are the real ones.
func fakeStreamClient(kv *fakeKV, streams *fakeStreams) *clientv3.Client {
	return &clientv3.Client{KV: streamKV{fakeKV: kv, stream: clientv3.NewKVFromKVClient(streams, nil)}}
}

type streamKV struct {
	*fakeKV
	stream clientv3.KV
}

func (s streamKV) GetStream(ctx context.Context, key string, opts ...clientv3.OpOption) (clientv3.GetStreamChan, error) {
	return s.stream.GetStream(ctx, key, opts...)
}

// fakeStreams answers RangeStream requests from a script and records them.
type fakeStreams struct {
	pb.KVClient // not faked: calling anything else panics

	mu       sync.Mutex
	script   []fakeStream
	requests []*pb.RangeRequest
}

// fakeStream is one scripted RangeStream: its chunks, then err (io.EOF if
// nil), or, if hang is set, a wait for the stream's context to end. If
// gate is set, the member sends the second chunk only once gate is closed
// (or fails when the stream's context ends first).
type fakeStream struct {
	chunks []*pb.RangeResponse
	err    error
	hang   bool
	gate   chan struct{}
	sent   int
}

func (f *fakeStreams) RangeStream(ctx context.Context, in *pb.RangeRequest, _ ...grpc.CallOption) (grpc.ServerStreamingClient[pb.RangeStreamResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, in)
	s := f.script[0]
	f.script = f.script[1:]
	return &fakeRangeStream{ctx: ctx, s: s}, nil
}

func (f *fakeStreams) streamRequests() []*pb.RangeRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*pb.RangeRequest(nil), f.requests...)
}

type fakeRangeStream struct {
	grpc.ClientStream // not faked
	ctx               context.Context
	s                 fakeStream
}

// Recv is gRPC's: a stream whose context ends fails with codes.Canceled.
func (f *fakeRangeStream) Recv() (*pb.RangeStreamResponse, error) {
	if err := f.ctx.Err(); err != nil {
		return nil, status.Error(codes.Canceled, err.Error())
	}
	if f.s.gate != nil && f.s.sent == 1 {
		select {
		case <-f.s.gate:
		case <-f.ctx.Done():
			return nil, status.Error(codes.Canceled, f.ctx.Err().Error())
		}
	}
	if len(f.s.chunks) > 0 {
		f.s.sent++
		c := f.s.chunks[0]
		f.s.chunks = f.s.chunks[1:]
		return &pb.RangeStreamResponse{RangeResponse: c}, nil
	}
	if f.s.hang {
		<-f.ctx.Done()
		return nil, status.Error(codes.Canceled, f.ctx.Err().Error())
	}
	if f.s.err != nil {
		return nil, f.s.err
	}
	return nil, io.EOF
}

// chunk is a RangeStream chunk holding keys; the last chunk of a stream
// also carries the header.
func chunk(keys ...string) *pb.RangeResponse { return &pb.RangeResponse{Kvs: kvs(keys...)} }

func lastChunk(rev int64, keys ...string) *pb.RangeResponse {
	return &pb.RangeResponse{Header: header(rev), Kvs: kvs(keys...)}
}
