package nats_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/listwatch/mirror"
	natsmirror "github.com/listwatch/mirror/adapters/nats"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNewInformer_RestartsFromItsCheckpointWithoutAList stops an informer
// that keeps a checkpoint, changes the bucket, and starts another from
// the checkpoint: it lists nothing, and its handler hears only the
// changes made while it was down.
func TestNewInformer_RestartsFromItsCheckpointWithoutAList(t *testing.T) {
	srv := startServer(t)
	_, js := connect(t, srv.url())
	kv := newBucket(t, js, jetstream.KeyValueConfig{History: 5})
	put(t, kv, "a", "v1")
	put(t, kv, "b", "v1")
	put(t, kv, "c", "v1")
	path := filepath.Join(t.TempDir(), "mirror.ckpt")

	start := func() (*natsmirror.ListWatcher[[]byte], *mirror.Informer[string, natsmirror.KV], *recorder, func()) {
		lw := natsmirror.New(js, "mirror", natsmirror.Options{})
		inf := natsmirror.NewInformer(lw, natsmirror.InformerOptions[[]byte]{
			Checkpoint: mirror.CheckpointOptions[natsmirror.KV]{Path: path},
		})
		rec := newRecorder()
		reg, err := inf.AddEventHandler(rec.handler(), mirror.HandlerOptions{ChangesOnly: true})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- inf.Run(ctx) }()
		sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
		defer scancel()
		require.NoError(t, mirror.WaitForCacheSync(sctx, reg))
		return lw, inf, rec, func() { cancel(); require.NoError(t, <-done) }
	}
	lw, _, _, stop := start()
	assert.Equal(t, int64(1), lw.Stats().Lists)
	stop()

	put(t, kv, "b", "v2")
	require.NoError(t, kv.Delete(t.Context(), "c"))
	put(t, kv, "d", "v1")
	lw, inf, rec, stop := start()
	defer stop()
	require.Eventually(t, func() bool { return rec.snapshot()["d"] == "v1" }, 30*time.Second, 5*time.Millisecond)
	assert.Equal(t, int64(0), lw.Stats().Lists, "no list while the bucket holds the checkpoint's revision")
	assert.Equal(t, []string{"update v2"}, rec.since("b", 0))
	assert.Equal(t, []string{"delete v1"}, rec.since("c", 0))
	assert.Empty(t, rec.since("a", 0))
	assert.Equal(t, bucketState(t, kv), cacheState(inf))
}
