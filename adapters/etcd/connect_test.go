package etcd

import (
	"context"
	"crypto/tls"
	"testing"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/health"
)

// With default Options, a list through a client that cannot connect ends
// long before RequestTimeout, unavailable, saying why the client could not
// connect; the test's own bound is well short of the default 30s. Real
// cases on loopback.
func TestList_WithoutConnectionFailsSoonWithTheCause(t *testing.T) {
	for _, tc := range []struct {
		name     string
		endpoint func(t *testing.T) string
		tls      *tls.Config
		want     string
	}{
		{name: "closed port", endpoint: func(t *testing.T) string { return "http://" + closedPort(t) },
			want: "cannot connect (connection refused)"},
		{name: "unresolvable name", endpoint: func(*testing.T) string { return "http://etcd.invalid:2379" },
			want: "cannot connect (DNS lookup failed)"},
		{name: "TLS client, plain-text server",
			endpoint: func(t *testing.T) string { return "https://" + grpcServer(t, health.NewServer()) },
			tls:      &tls.Config{}, want: "cannot connect (TLS handshake failed)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := clientv3.New(clientv3.Config{Endpoints: []string{tc.endpoint(t)}, TLS: tc.tls, Logger: zap.NewNop()})
			require.NoError(t, err)
			defer c.Close()
			lw := New(c, "/p/", Options{})
			ctx, cancel := context.WithTimeout(t.Context(), defaultRequestTimeout/2)
			defer cancel()
			_, err = lw.List(ctx, source.ListOptions{})
			require.Error(t, err)
			require.NoError(t, ctx.Err(), "the list waited for the test's bound: %v", err)
			assert.ErrorIs(t, err, source.ErrUnavailable)
			assert.NotErrorIs(t, err, mirror.ErrPermanent)
			assert.ErrorContains(t, err, tc.want)

			// The next request waits for the connection: only the
			// first is cut short, so that a mirror goes on as soon as
			// the member is back.
			short, cancelShort := context.WithTimeout(t.Context(), 2*connectWait)
			defer cancelShort()
			_, err = lw.List(short, source.ListOptions{})
			assert.ErrorIs(t, err, context.DeadlineExceeded)
		})
	}
}
