package etcd

import (
	"context"
	"testing"
	"time"

	"github.com/listwatch/mirror"
	etcdmirror "github.com/listwatch/mirror/adapters/etcd"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestInformer_CleanShutdownInEitherOrderReportsNothing closes the client
// and cancels the informer's context in both orders, as defers do: a
// shutdown is not an error.
func TestInformer_CleanShutdownInEitherOrderReportsNothing(t *testing.T) {
	m := startEtcd(t)
	for _, closeFirst := range []bool{true, false} {
		name := "cancel, then close the client"
		if closeFirst {
			name = "close the client, then cancel"
		}
		t.Run(name, func(t *testing.T) {
			c := newClient(t, m.endpoint())
			putN(t, c, "/shut/", 10)
			seen := &errorLog{}
			inf := etcdmirror.NewInformer(etcdmirror.New(c, "/shut/", etcdmirror.Options{}),
				etcdmirror.InformerOptions[[]byte]{ErrorHandler: seen.add})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- inf.Run(ctx) }()
			require.NoError(t, mirror.WaitForCacheSync(ctx, inf))

			if closeFirst {
				require.NoError(t, c.Close())
				// The watch ends at once, and a program takes a moment
				// to cancel: nothing is reported meanwhile either.
				assert.Never(t, func() bool { return len(seen.all()) > 0 }, 500*time.Millisecond, 10*time.Millisecond)
				cancel()
			} else {
				cancel()
				require.NoError(t, c.Close())
			}
			require.NoError(t, <-done)
			assert.Empty(t, seen.all())
		})
	}
}

func TestInformer_ClientClosedWhileTheMirrorRunsIsPermanent(t *testing.T) {
	m := startEtcd(t)
	c := newClient(t, m.endpoint())
	seen := &errorLog{}
	inf := etcdmirror.NewInformer(etcdmirror.New(c, "/gone/", etcdmirror.Options{}),
		etcdmirror.InformerOptions[[]byte]{ErrorHandler: seen.add})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	require.NoError(t, mirror.WaitForCacheSync(ctx, inf))
	require.NoError(t, c.Close())
	require.Eventually(t, func() bool {
		for _, err := range seen.all() {
			if assert.ErrorIs(t, err, mirror.ErrPermanent) {
				return true
			}
		}
		return false
	}, convergeTimeout, 100*time.Millisecond)
	cancel()
	require.NoError(t, <-done)
}
