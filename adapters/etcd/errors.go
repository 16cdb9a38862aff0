package etcd

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/source"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// classify returns the mirror error kind of err, an error from etcd or from
// the client, or nil if none applies, and the error to report as its cause:
// err itself, or etcd's typed error where the client handed err on as text
// (see typedError). ctx is the caller's context: a deadline that expired
// while ctx is still live was this adapter's own request timeout, so the
// member did not answer in time.
func classify(ctx context.Context, err error) (kind, cause error) {
	switch {
	case errors.Is(err, rpctypes.ErrCompacted):
		return source.ErrExpired, err
	case errors.Is(err, rpctypes.ErrFutureRev):
		return source.ErrTooLargeResourceVersion, err
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		if ctx.Err() == nil {
			return source.ErrUnavailable, err
		}
		return nil, err
	}
	code, cause := typedError(err)
	switch {
	case errors.Is(cause, rpctypes.ErrInvalidAuthToken), errors.Is(cause, rpctypes.ErrAuthOldRevision):
		// A token that expired, or that predates a change to users or
		// roles: the client authenticates again for its next request
		// and for every new watch stream, so trying again cures it.
		return source.ErrUnavailable, cause
	case code == codes.PermissionDenied, code == codes.Unauthenticated,
		errors.Is(cause, rpctypes.ErrUserEmpty), errors.Is(cause, rpctypes.ErrAuthFailed):
		// The user may not read the prefix, or the client has no
		// credentials (etcd says the user name is empty) or wrong ones:
		// only someone changing the cluster's roles or the client's
		// configuration cures that.
		return mirror.ErrPermanent, cause
	case code == codes.Unavailable, code == codes.DeadlineExceeded:
		// No leader, leader changed, member stopping, connection lost,
		// and the server-side timeouts of a request that lost its
		// leader: all pass once the cluster recovers.
		return source.ErrUnavailable, cause
	case code == codes.ResourceExhausted && errors.Is(cause, rpctypes.ErrTooManyRequests):
		return source.ErrUnavailable, cause
	}
	return nil, cause
}

// typedError returns the gRPC code of err and err as the client's typed
// error where it can. The client turns the server's errors into
// rpctypes.EtcdError values, which carry a gRPC code but are not gRPC
// statuses; errors straight from gRPC (a refused connection) are statuses.
// But a watch that etcd refuses to create (permission denied, no user
// name) reaches the caller as a plain error holding the text of a status,
// "rpc error: code = PermissionDenied desc = etcdserver: permission
// denied", which neither errors.As nor status.FromError sees through: its
// code and description are read back from that text.
func typedError(err error) (codes.Code, error) {
	var etcdErr rpctypes.EtcdError
	if errors.As(err, &etcdErr) {
		return etcdErr.Code(), err
	}
	if s, ok := status.FromError(err); ok {
		return s.Code(), err
	}
	const codePrefix, descSep = "rpc error: code = ", " desc = "
	rest, ok := strings.CutPrefix(err.Error(), codePrefix)
	if !ok {
		return codes.Unknown, err
	}
	name, desc, ok := strings.Cut(rest, descSep)
	if !ok {
		return codes.Unknown, err
	}
	if typed := rpctypes.Error(errors.New(desc)); errors.As(typed, &etcdErr) {
		return etcdErr.Code(), typed
	}
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		if c.String() == name {
			return c, err
		}
	}
	return codes.Unknown, err
}

// wrapError describes err with the message format and args, and makes both
// its cause (see classify) and its mirror kind (if any) visible to
// errors.Is.
func wrapError(ctx context.Context, err error, format string, args ...any) error {
	what := fmt.Sprintf(format, args...)
	kind, cause := classify(ctx, err)
	if kind != nil {
		return fmt.Errorf("%s: %w: %w", what, kind, cause)
	}
	return fmt.Errorf("%s: %w", what, cause)
}
