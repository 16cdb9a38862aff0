package nats_test

import (
	"context"
	"io"
	"testing"
	"time"

	natsmirror "github.com/listwatch/mirror/adapters/nats"
	"github.com/listwatch/mirror/source"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// TestListWatcher_LeavesNoGoroutineBehind lists, watches (stopped, timed
// out, ended by its context), and runs an informer to its end: nothing
// the adapter or the client started for them outlives them. The
// connection's own goroutines, there before, are not counted. (A watch
// ended by the loss of its connection leaves the client to stop its
// watcher once the connection is back: see the adapter's teardown.)
func TestListWatcher_LeavesNoGoroutineBehind(t *testing.T) {
	srv := startServer(t)
	_, js := connect(t, srv.url())
	kv := newBucket(t, js, jetstream.KeyValueConfig{})
	put(t, kv, "a", "1")
	lw := natsmirror.New(js, "mirror", natsmirror.Options{})
	ctx := testContext(t)
	_, err := lw.List(ctx, source.ListOptions{}) // looks the bucket up
	require.NoError(t, err)
	before := goleak.IgnoreCurrent()

	_, err = lw.List(ctx, source.ListOptions{})
	require.NoError(t, err)
	w, err := lw.Watch(ctx, source.WatchOptions{})
	require.NoError(t, err)
	w.Stop()
	w, err = lw.Watch(ctx, source.WatchOptions{Timeout: time.Millisecond})
	require.NoError(t, err)
	_, err = w.Next(ctx)
	require.ErrorIs(t, err, io.EOF)
	wctx, cancel := context.WithCancel(ctx)
	_, err = lw.Watch(wctx, source.WatchOptions{})
	require.NoError(t, err)
	cancel()

	inf := natsmirror.NewInformer(lw, natsmirror.InformerOptions[[]byte]{})
	ictx, icancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- inf.Run(ictx) }()
	require.NoError(t, inf.WaitForSync(ictx))
	icancel()
	require.NoError(t, <-done)

	goleak.VerifyNone(t, before)
}
