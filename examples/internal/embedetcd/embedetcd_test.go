package embedetcd

import (
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// The server serves at Endpoint; Close stops it and removes its
// directory, and a second Close is harmless.
func TestServer_CloseRemovesTheDirectoryAndMayBeCalledTwice(t *testing.T) {
	s, err := Start(t.Context(), "embedetcd-test")
	require.NoError(t, err)
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{s.Endpoint}, Logger: zap.NewNop()})
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Put(t.Context(), "k", "v")
	require.NoError(t, err)
	require.DirExists(t, s.Dir)

	s.Close()
	_, err = os.Stat(s.Dir)
	assert.ErrorIs(t, err, os.ErrNotExist, "the directory is removed")
	assert.NotPanics(t, s.Close)
}

// A start that fails leaves no directory behind.
func TestStart_CancelledLeavesNoDirectory(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := Start(ctx, "embedetcd-test")
	require.Error(t, err)
	entries, err := os.ReadDir(tmp)
	require.NoError(t, err)
	assert.Empty(t, entries)
}
