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
	d, _, _ := lw.probe(ctx)
	return d
}

// probe sends the health check that diagnose describes. It returns the
// diagnosis ("" if it cannot tell), whether the client is connected to a
// member, and the health check's error, if any: gRPC's account of the
// client's last failed attempt to connect when it is not connected.
func (lw *ListWatcher[V]) probe(ctx context.Context) (diagnosis string, connected bool, err error) {
	conn := lw.client.ActiveConnection()
	if conn == nil || ctx.Err() != nil {
		return "", false, nil
	}
	if cctx := lw.client.Ctx(); cctx != nil && cctx.Err() != nil {
		return "", false, nil
	}
	dctx, cancel := context.WithTimeout(ctx, diagnoseTimeout)
	defer cancel()
	var resp healthpb.HealthCheckResponse
	err = conn.Invoke(dctx, healthCheck, &healthpb.HealthCheckRequest{}, &resp, grpc.WaitForReady(false))
	if ctx.Err() != nil {
		return "", false, nil
	}
	s, _ := status.FromError(err)
	switch s.Code() {
	case codes.OK:
		if resp.Status == healthpb.HealthCheckResponse_NOT_SERVING {
			return "connected, but etcd says it is not serving (defragmenting, or stopping)", true, nil
		}
		return "connected, and etcd answers a health check: the request itself took too long", true, nil
	case codes.Unavailable:
		// etcd answers a health check with a status, never with an
		// error: this one is the client's.
		if desc, ok := strings.CutPrefix(s.Message(), "connection error: desc = "); ok {
			return connFailure(desc), false, err
		}
		return "connection lost: " + s.Message(), false, err
	case codes.DeadlineExceeded:
		if conn.GetState() == connectivity.Ready {
			return fmt.Sprintf("connected, but etcd did not answer a health check within %v either (a paused or overloaded member?)", diagnoseTimeout), true, err
		}
		return fmt.Sprintf("cannot connect (timeout): still connecting %v later (the endpoint accepts no connection, or does not answer)", diagnoseTimeout), false, err
	case codes.Canceled:
		return "", false, nil // the client is closing
	default:
		// The member answered, if only to refuse: the connection works.
		return "connected, and etcd answers a health check: the request itself took too long", true, nil
	}
}

// connectWait is how long a request waits for a connection the client
// does not have before it ends with what probe tells of why (see
// guardConn): a refused connection, a name that does not resolve or a
// failed TLS handshake is then reported within seconds, not after
// Options.RequestTimeout.
const connectWait = 2 * time.Second

// guardConn watches, until ctx ends or stop is called, over a request
// that runs with ctx: if the request is still waiting after connectWait
// and the client has no connection to a member, guardConn calls fail with
// a *noAnswerError saying why, as probe tells it, and wrapping gRPC's
// error; the caller ends the request with it. It does so for the first
// such request since one last succeeded (see connected): the requests
// after it wait for the connection, up to Options.RequestTimeout, so that
// the mirror goes on as soon as the member is back, while the first
// failure is reported soon.
func (lw *ListWatcher[V]) guardConn(ctx context.Context, fail func(error)) (stop func()) {
	if lw.waitedOut.Load() || lw.client.ActiveConnection() == nil {
		return func() {}
	}
	gctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTimer(connectWait)
		defer t.Stop()
		for {
			select {
			case <-gctx.Done():
				return
			case <-t.C:
			}
			if lw.client.ActiveConnection().GetState() != connectivity.Ready {
				diagnosis, connected, err := lw.probe(gctx)
				if !connected && err != nil {
					lw.waitedOut.Store(true)
					fail(&noAnswerError{what: fmt.Sprintf("no connection within %v", connectWait), diagnosis: diagnosis, err: err})
					return
				}
			}
			t.Reset(connectWait)
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// connected notes that a request succeeded: the next request that waits
// for a connection is bounded by connectWait again (see guardConn).
func (lw *ListWatcher[V]) connected() {
	if lw.waitedOut.Load() {
		lw.waitedOut.Store(false)
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
