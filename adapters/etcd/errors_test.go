package etcd

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// watchRefusal is how the client hands on a watch that etcd refused to
// create: the text of a gRPC status, in a plain error.
func watchRefusal(grpcErr error) error { return errors.New(grpcErr.Error()) }

func TestClassify_MapsEtcdErrorsToMirrorKinds(t *testing.T) {
	live := context.Background()
	done, cancel := context.WithCancel(live)
	cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		err  error
		want error
	}{
		{"compacted", live, rpctypes.ErrCompacted, source.ErrExpired},
		{"future revision", live, rpctypes.ErrFutureRev, source.ErrTooLargeResourceVersion},
		{"no leader", live, rpctypes.ErrNoLeader, source.ErrUnavailable},
		{"leader changed", live, rpctypes.ErrLeaderChanged, source.ErrUnavailable},
		{"request timed out", live, rpctypes.ErrTimeout, source.ErrUnavailable},
		{"server stopped", live, rpctypes.ErrStopped, source.ErrUnavailable},
		{"too many requests", live, rpctypes.ErrTooManyRequests, source.ErrUnavailable},
		{"grpc unavailable", live, status.Error(codes.Unavailable, "connection refused"), source.ErrUnavailable},
		{"wrapped", live, fmt.Errorf("ctx: %w", rpctypes.ErrCompacted), source.ErrExpired},
		{"own timeout", live, context.DeadlineExceeded, source.ErrUnavailable},
		{"caller's deadline", done, context.DeadlineExceeded, nil},
		{"caller canceled", done, context.Canceled, nil},
		{"no space", live, rpctypes.ErrNoSpace, nil},
		{"permission denied", live, rpctypes.ErrPermissionDenied, mirror.ErrPermanent},
		{"wrapped permission denied", live, fmt.Errorf("ctx: %w", rpctypes.ErrPermissionDenied), mirror.ErrPermanent},
		{"watch refused: permission denied", live, watchRefusal(rpctypes.ErrGRPCPermissionDenied), mirror.ErrPermanent},
		{"no user name (no credentials)", live, rpctypes.ErrUserEmpty, mirror.ErrPermanent},
		{"watch refused: no user name", live, watchRefusal(rpctypes.ErrGRPCUserEmpty), mirror.ErrPermanent},
		{"wrong password", live, rpctypes.ErrAuthFailed, mirror.ErrPermanent},
		{"grpc permission denied", live, status.Error(codes.PermissionDenied, "not for you"), mirror.ErrPermanent},
		{"grpc unauthenticated", live, status.Error(codes.Unauthenticated, "no certificate"), mirror.ErrPermanent},
		{"expired token, which the client renews", live, rpctypes.ErrInvalidAuthToken, source.ErrUnavailable},
		{"watch refused: expired token", live, watchRefusal(rpctypes.ErrGRPCInvalidAuthToken), source.ErrUnavailable},
		{"token older than the auth store", live, rpctypes.ErrAuthOldRevision, source.ErrUnavailable},
		{"watch refused: unknown reason, known code", live, errors.New("rpc error: code = Unavailable desc = try later"), source.ErrUnavailable},
		{"watch refused: unknown reason and code", live, errors.New("rpc error: code = Bogus desc = what"), nil},
		{"role not granted", live, rpctypes.ErrRoleNotGranted, nil},
		{"other", live, errors.New("boom"), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kind, _ := classify(tc.ctx, tc.err)
			assert.Equal(t, tc.want, kind)
		})
	}
}

func TestWrapError_KeepsKindAndCauseVisible(t *testing.T) {
	err := wrapError(context.Background(), rpctypes.ErrCompacted, "etcd: watch %q from rev %d", "/p/", 7)
	require.ErrorIs(t, err, source.ErrExpired)
	require.ErrorIs(t, err, rpctypes.ErrCompacted)
	assert.Equal(t, `etcd: watch "/p/" from rev 7: mirror: resource version expired: etcdserver: mvcc: required revision has been compacted`, err.Error())

	err = wrapError(context.Background(), errors.New("boom"), "etcd: list %q", "/p/")
	assert.Equal(t, `etcd: list "/p/": boom`, err.Error())

	// A refusal handed on as text becomes etcd's typed error again.
	err = wrapError(context.Background(), watchRefusal(rpctypes.ErrGRPCPermissionDenied), "etcd: watch %q from rev %d", "/p/", 7)
	require.ErrorIs(t, err, mirror.ErrPermanent)
	require.ErrorIs(t, err, rpctypes.ErrPermissionDenied)
	assert.Equal(t, `etcd: watch "/p/" from rev 7: mirror: source refused permanently: etcdserver: permission denied`, err.Error())
}
