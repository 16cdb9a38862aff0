package etcd

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/listwatch/mirror"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

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
		{"compacted", live, rpctypes.ErrCompacted, mirror.ErrExpired},
		{"future revision", live, rpctypes.ErrFutureRev, mirror.ErrTooLargeResourceVersion},
		{"no leader", live, rpctypes.ErrNoLeader, mirror.ErrUnavailable},
		{"leader changed", live, rpctypes.ErrLeaderChanged, mirror.ErrUnavailable},
		{"request timed out", live, rpctypes.ErrTimeout, mirror.ErrUnavailable},
		{"server stopped", live, rpctypes.ErrStopped, mirror.ErrUnavailable},
		{"too many requests", live, rpctypes.ErrTooManyRequests, mirror.ErrUnavailable},
		{"grpc unavailable", live, status.Error(codes.Unavailable, "connection refused"), mirror.ErrUnavailable},
		{"wrapped", live, fmt.Errorf("ctx: %w", rpctypes.ErrCompacted), mirror.ErrExpired},
		{"own timeout", live, context.DeadlineExceeded, mirror.ErrUnavailable},
		{"caller's deadline", done, context.DeadlineExceeded, nil},
		{"caller canceled", done, context.Canceled, nil},
		{"no space", live, rpctypes.ErrNoSpace, nil},
		{"permission denied", live, rpctypes.ErrPermissionDenied, nil},
		{"other", live, errors.New("boom"), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, classify(tc.ctx, tc.err))
		})
	}
}

func TestWrapError_KeepsKindAndCauseVisible(t *testing.T) {
	err := wrapError(context.Background(), rpctypes.ErrCompacted, "etcd: watch %q from rev %d", "/p/", 7)
	require.ErrorIs(t, err, mirror.ErrExpired)
	require.ErrorIs(t, err, rpctypes.ErrCompacted)
	assert.Equal(t, `etcd: watch "/p/" from rev 7: mirror: resource version expired: etcdserver: mvcc: required revision has been compacted`, err.Error())

	err = wrapError(context.Background(), errors.New("boom"), "etcd: list %q", "/p/")
	assert.Equal(t, `etcd: list "/p/": boom`, err.Error())
}
