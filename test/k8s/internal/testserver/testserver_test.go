package testserver

import (
	"net"
	"net/url"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/kubernetes/test/utils/ktesting"
)

var _ ktesting.TB = (*TB)(nil)

func TestRunReturnsFatalAndCloseRunsCleanupsLastFirst(t *testing.T) {
	tb := NewTB("Name", "prefix")
	var order []int
	err := tb.Run(func(tb *TB) error {
		tb.Cleanup(func() { order = append(order, 1) })
		tb.Cleanup(func() {
			order = append(order, 2)
			tb.Cleanup(func() { order = append(order, 3) })
		})
		tb.Fatalf("stop %d", 7)
		return nil
	})
	require.EqualError(t, err, "stop 7")
	tb.Close()
	assert.Equal(t, []int{2, 3, 1}, order, "cleanups run last registered first")
	assert.Equal(t, "Name", tb.Name())
	assert.False(t, tb.Failed())
}

// StartEtcd tries again in the same directory when a port is taken; that
// is safe only while etcd takes its ports before it writes to its
// directory.
func TestEtcdLeavesDirAloneWhenAPortIsTaken(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	peer, err := freeURL()
	require.NoError(t, err)
	dir := filepath.Join(t.TempDir(), "etcd")
	_, err = startEtcdAt(dir, peer, url.URL{Scheme: "http", Host: l.Addr().String()}, EtcdOptions{})
	require.ErrorIs(t, err, syscall.EADDRINUSE)
	entries, err := os.ReadDir(dir)
	if !os.IsNotExist(err) {
		require.NoError(t, err)
	}
	assert.Empty(t, entries, "the failed start wrote nothing to its directory")

	e, err := StartEtcd(dir, EtcdOptions{QuotaBackendBytes: 1 << 30})
	require.NoError(t, err)
	e.Stop()
	e.Stop()
}
