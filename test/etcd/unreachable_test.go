package etcd

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/listwatch/mirror"
	etcdmirror "github.com/listwatch/mirror/adapters/etcd"
	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// reportBound is how long the tests below give an unreachable endpoint's
// first report: generous for a loaded machine, yet well short of the
// default RequestTimeout (30s), after which even a request that waited
// for a connection all along reports one.
const reportBound = 15 * time.Second

// refusingEndpoint returns a loopback endpoint that refuses connections.
func refusingEndpoint(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return "http://" + addr
}

// unreachableCases are endpoints a client cannot connect to, each with
// what the error must say of why.
var unreachableCases = []struct {
	name     string
	endpoint func(t *testing.T) string
	cause    string
}{
	{name: "connection refused", endpoint: refusingEndpoint, cause: "connection refused"},
	{name: "name does not resolve", endpoint: func(*testing.T) string { return "http://etcd.invalid:2379" }, cause: "etcd.invalid"},
}

// unreachableClient returns a client of endpoint, with clientv3's
// defaults (no dial timeout: it does not wait for a connection).
func unreachableClient(t *testing.T, endpoint string) *clientv3.Client {
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, Logger: zap.NewNop()})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// An informer of an endpoint it cannot connect to, with default options,
// reports the first failure with its cause long before a request would
// run out of the default RequestTimeout: to the ErrorHandler and in
// Freshness().Err, as a transient failure (source.ErrUnavailable, never
// mirror.ErrPermanent), so that the wait for sync goes on waiting.
func TestInformer_UnreachableEndpointIsReportedSoonWithItsCause(t *testing.T) {
	t.Parallel()
	for _, tc := range unreachableCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := unreachableClient(t, tc.endpoint(t))
			errs := &errorLog{}
			inf := etcdmirror.NewInformer(etcdmirror.New(c, "/unreachable/", etcdmirror.Options{}),
				etcdmirror.InformerOptions[[]byte]{ErrorHandler: errs.add})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- inf.Run(ctx) }()
			t.Cleanup(func() {
				cancel()
				assert.NoError(t, <-done)
			})

			require.Eventually(t, func() bool { return len(errs.all()) > 0 }, reportBound, 10*time.Millisecond,
				"no failure reported")
			err := errs.all()[0]
			t.Logf("first report: %v", err)
			assert.ErrorIs(t, err, source.ErrUnavailable)
			assert.NotErrorIs(t, err, mirror.ErrPermanent)
			assert.ErrorContains(t, err, tc.cause)
			assert.ErrorContains(t, err, `mirror: reflector "/unreachable/": `, "the informer is named after its prefix")
			fresh := inf.Freshness().Err
			require.Error(t, fresh)
			assert.ErrorContains(t, fresh, tc.cause)

			// The failure is transient: the wait for sync goes on
			// until its caller gives up.
			wctx, wcancel := context.WithTimeout(ctx, 100*time.Millisecond)
			defer wcancel()
			assert.ErrorIs(t, inf.WaitForSync(wctx), context.DeadlineExceeded)
			assert.False(t, inf.HasSynced())
		})
	}
}

// A watch, the first request of a mirror resumed from a checkpoint, of an
// endpoint the client cannot connect to ends soon, unavailable, with the
// cause, rather than waiting for a connection until RequestTimeout.
func TestWatch_UnreachableEndpointFailsSoonWithItsCause(t *testing.T) {
	t.Parallel()
	for _, tc := range unreachableCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := unreachableClient(t, tc.endpoint(t))
			lw := etcdmirror.New(c, "/unreachable/", etcdmirror.Options{})
			ctx, cancel := context.WithTimeout(context.Background(), reportBound)
			defer cancel()
			w, err := lw.Watch(ctx, source.WatchOptions{ResourceVersion: "7"})
			if w != nil {
				w.Stop()
			}
			require.Error(t, err)
			require.NoError(t, ctx.Err(), "the watch waited until the test's bound: %v", err)
			assert.ErrorIs(t, err, source.ErrUnavailable)
			assert.ErrorContains(t, err, tc.cause)
			assert.True(t, strings.HasPrefix(err.Error(), `etcd: watch "/unreachable/"`), err.Error())
		})
	}
}
