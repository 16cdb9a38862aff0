package etcd

import (
	"context"
	"errors"
	"fmt"

	"github.com/listwatch/mirror"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// classify returns the mirror error kind of err, an error from etcd or from
// the client, or nil if none applies. ctx is the caller's context: a
// deadline that expired while ctx is still live was this adapter's own
// request timeout, so the member did not answer in time.
func classify(ctx context.Context, err error) error {
	switch {
	case errors.Is(err, rpctypes.ErrCompacted):
		return mirror.ErrExpired
	case errors.Is(err, rpctypes.ErrFutureRev):
		return mirror.ErrTooLargeResourceVersion
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		if ctx.Err() == nil {
			return mirror.ErrUnavailable
		}
		return nil
	}
	// The client turns the server's errors into rpctypes.EtcdError values,
	// which carry a gRPC code but are not gRPC statuses; errors straight
	// from gRPC (a refused connection) are statuses.
	var code codes.Code
	var etcdErr rpctypes.EtcdError
	if errors.As(err, &etcdErr) {
		code = etcdErr.Code()
	} else if s, ok := status.FromError(err); ok {
		code = s.Code()
	}
	switch code {
	case codes.Unavailable, codes.DeadlineExceeded:
		// No leader, leader changed, member stopping, connection lost,
		// and the server-side timeouts of a request that lost its
		// leader: all pass once the cluster recovers.
		return mirror.ErrUnavailable
	case codes.ResourceExhausted:
		if errors.Is(err, rpctypes.ErrTooManyRequests) {
			return mirror.ErrUnavailable
		}
	}
	return nil
}

// wrapError describes err with the message format and args, and makes both
// err and its mirror kind (if any) visible to errors.Is.
func wrapError(ctx context.Context, err error, format string, args ...any) error {
	what := fmt.Sprintf(format, args...)
	if kind := classify(ctx, err); kind != nil {
		return fmt.Errorf("%s: %w: %w", what, kind, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}
