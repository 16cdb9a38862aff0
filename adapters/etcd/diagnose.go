package etcd

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// The client waits for a connection before it sends a request, so a
// request to an endpoint it cannot reach just runs out of time, and
// "context deadline exceeded" says nothing of why: a refused connection, a
// name that does not resolve and a TLS mismatch all read the same. gRPC
// knows why its last attempt to connect failed, and says so to a request
// that does not wait for a connection. So, once a request of ours has run
// out of time, diagnose sends one such request, a health check (the
// cheapest request etcd serves), and reads the answer. It runs only after
// a request failed, never on the way of one that succeeds, and waits at
// most diagnoseTimeout.

// diagnoseTimeout bounds diagnose's health check.
const diagnoseTimeout = time.Second

// healthCheck is the method of gRPC's health service, which etcd serves.
const healthCheck = "/grpc.health.v1.Health/Check"

// diagnose says what the client's connection tells of why etcd did not
// answer in time, or "" if it cannot tell: the client has no connection to
// ask (a client made without clientv3.New), is closed, or ctx ended.
func (lw *ListWatcher[V]) diagnose(ctx context.Context) string {
	conn := lw.client.ActiveConnection()
	if conn == nil || ctx.Err() != nil {
		return ""
	}
	if cctx := lw.client.Ctx(); cctx != nil && cctx.Err() != nil {
		return ""
	}
	dctx, cancel := context.WithTimeout(ctx, diagnoseTimeout)
	defer cancel()
	var resp healthpb.HealthCheckResponse
	err := conn.Invoke(dctx, healthCheck, &healthpb.HealthCheckRequest{}, &resp, grpc.WaitForReady(false))
	if ctx.Err() != nil {
		return ""
	}
	s, _ := status.FromError(err)
	switch s.Code() {
	case codes.OK:
		if resp.Status == healthpb.HealthCheckResponse_NOT_SERVING {
			return "connected, but etcd says it is not serving (defragmenting, or stopping)"
		}
		return "connected, and etcd answers a health check: the request itself took too long"
	case codes.Unavailable:
		// etcd answers a health check with a status, never with an
		// error: this one is the client's.
		if desc, ok := strings.CutPrefix(s.Message(), "connection error: desc = "); ok {
			return connFailure(desc)
		}
		return "connection lost: " + s.Message()
	case codes.DeadlineExceeded:
		if conn.GetState() == connectivity.Ready {
			return fmt.Sprintf("connected, but etcd did not answer a health check within %v either (a paused or overloaded member?)", diagnoseTimeout)
		}
		return fmt.Sprintf("cannot connect (timeout): still connecting %v later (the endpoint accepts no connection, or does not answer)", diagnoseTimeout)
	case codes.Canceled:
		return "" // the client is closing
	default:
		// The member answered, if only to refuse: the connection works.
		return "connected, and etcd answers a health check: the request itself took too long"
	}
}

// connFailure describes gRPC's description of a failed attempt to connect,
// with the reason first where the description gives one.
func connFailure(desc string) string {
	if unq, err := strconv.Unquote(desc); err == nil {
		desc = unq
	}
	desc = strings.TrimPrefix(desc, "transport: ")
	desc = strings.TrimPrefix(desc, "Error while dialing: ")
	desc, handshake := strings.CutPrefix(desc, "authentication handshake failed: ")
	var reason string
	switch {
	case strings.Contains(desc, "connection refused"):
		reason = "connection refused"
	case strings.Contains(desc, "no such host"), strings.Contains(desc, "lookup "):
		reason = "DNS lookup failed"
	case handshake, strings.Contains(desc, "tls:"), strings.Contains(desc, "x509:"):
		reason = "TLS handshake failed"
	case strings.Contains(desc, "server preface") && strings.Contains(desc, "HTTP/1"):
		reason = "not a gRPC server: it answers in HTTP/1"
	case strings.Contains(desc, "server preface"):
		// The endpoint took the connection but closed it, or said
		// something else, before speaking gRPC: a TLS port reached
		// without TLS does that, and so does a proxy with no etcd
		// behind it.
		reason = "no gRPC handshake: does the endpoint expect TLS? is etcd behind it?"
	case strings.Contains(desc, "timeout"), strings.Contains(desc, "deadline exceeded"):
		reason = "timeout"
	default:
		return "cannot connect: " + desc
	}
	return "cannot connect (" + reason + "): " + desc
}

// noAnswerError is a request or watch that etcd did not answer in time:
// what says what etcd did not do ("no answer within 5s"), diagnosis what
// the client's connection tells of why (see diagnose), if anything. It
// wraps err, the deadline error, if any.
type noAnswerError struct {
	what, diagnosis string
	err             error
}

func (e *noAnswerError) Error() string {
	if e.diagnosis == "" {
		return e.what
	}
	return e.what + ": " + e.diagnosis
}

func (e *noAnswerError) Unwrap() error { return e.err }
