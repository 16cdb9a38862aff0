package etcd

import (
	"context"
	"crypto/tls"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// silentListener accepts connections and never says a word.
func silentListener(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	return ln.Addr().String()
}

// stuckKV is an etcd KV service whose reads never answer.
type stuckKV struct{ pb.UnimplementedKVServer }

func (stuckKV) Range(ctx context.Context, _ *pb.RangeRequest) (*pb.RangeResponse, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// stuckHealth is a health service that never answers.
type stuckHealth struct {
	healthpb.UnimplementedHealthServer
}

func (stuckHealth) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// grpcServer serves, in plain text, a KV service whose reads never answer
// and the health service given.
func grpcServer(t *testing.T, hs healthpb.HealthServer) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := grpc.NewServer()
	pb.RegisterKVServer(s, stuckKV{})
	healthpb.RegisterHealthServer(s, hs)
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(s.Stop)
	return ln.Addr().String()
}

// A read that runs out of RequestTimeout says why etcd did not answer, as
// far as the client's connection tells: "context deadline exceeded" alone
// reads the same for a refused connection, a name that does not resolve
// and a TLS mismatch. Real cases on loopback.
func TestList_UnansweredReadSaysWhyTheClientGotNoAnswer(t *testing.T) {
	for _, tc := range []struct {
		name     string
		endpoint func(t *testing.T) string
		tls      *tls.Config
		want     []string
	}{
		{
			name:     "closed port",
			endpoint: func(t *testing.T) string { return "http://" + closedPort(t) },
			want:     []string{"cannot connect (connection refused)", "connect: connection refused"},
		},
		{
			name:     "unresolvable name",
			endpoint: func(*testing.T) string { return "http://etcd.invalid:2379" },
			want:     []string{"cannot connect (DNS lookup failed)", "etcd.invalid"},
		},
		{
			name: "TLS client, plain-text server",
			endpoint: func(t *testing.T) string {
				return "https://" + grpcServer(t, health.NewServer())
			},
			tls:  &tls.Config{},
			want: []string{"cannot connect (TLS handshake failed)"},
		},
		{
			name: "plain-text client, TLS server",
			endpoint: func(t *testing.T) string {
				srv := httptest.NewUnstartedServer(http.NotFoundHandler())
				srv.Config.ErrorLog = log.New(io.Discard, "", 0)
				srv.StartTLS()
				t.Cleanup(srv.Close)
				return "http://" + srv.Listener.Addr().String()
			},
			want: []string{"cannot connect (no gRPC handshake: does the endpoint expect TLS? is etcd behind it?)"},
		},
		{
			name: "HTTP/1 server",
			endpoint: func(t *testing.T) string {
				srv := httptest.NewServer(http.NotFoundHandler())
				t.Cleanup(srv.Close)
				return "http://" + srv.Listener.Addr().String()
			},
			want: []string{"cannot connect (not a gRPC server: it answers in HTTP/1)"},
		},
		{
			name:     "server that never answers the connection",
			endpoint: func(t *testing.T) string { return "http://" + silentListener(t) },
			want:     []string{"cannot connect (timeout)"},
		},
		{
			name:     "connected, the read is slow",
			endpoint: func(t *testing.T) string { return "http://" + grpcServer(t, health.NewServer()) },
			want:     []string{"connected, and etcd answers a health check: the request itself took too long"},
		},
		{
			name:     "connected, nothing answers",
			endpoint: func(t *testing.T) string { return "http://" + grpcServer(t, stuckHealth{}) },
			want:     []string{"connected, but etcd did not answer a health check within 1s either"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := clientv3.New(clientv3.Config{Endpoints: []string{tc.endpoint(t)}, TLS: tc.tls, Logger: zap.NewNop()})
			require.NoError(t, err)
			defer c.Close()
			lw := New(c, "/p/", Options{RequestTimeout: 500 * time.Millisecond})
			_, err = lw.List(t.Context(), source.ListOptions{})
			require.ErrorIs(t, err, source.ErrUnavailable)
			require.ErrorIs(t, err, context.DeadlineExceeded)
			assert.ErrorContains(t, err, `etcd: list "/p/": mirror: source unavailable: no answer within 500ms: `)
			for _, want := range tc.want {
				assert.ErrorContains(t, err, want)
			}
		})
	}
}
