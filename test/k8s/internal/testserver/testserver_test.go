package testserver

import (
	"errors"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

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
	if err == nil || err.Error() != "stop 7" {
		t.Fatalf("Run = %v, want the error stop 7", err)
	}
	tb.Close()
	if want := []int{2, 3, 1}; !slices.Equal(order, want) {
		t.Fatalf("cleanups ran in the order %v, want %v", order, want)
	}
	if tb.Name() != "Name" || tb.Failed() {
		t.Fatalf("Name = %q, Failed = %v", tb.Name(), tb.Failed())
	}
}

// StartEtcd tries again in the same directory when a port is taken; that
// is safe only while etcd takes its ports before it writes to its
// directory.
func TestEtcdLeavesDirAloneWhenAPortIsTaken(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	peer, err := freeURL()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "etcd")
	_, err = startEtcdAt(dir, peer, url.URL{Scheme: "http", Host: l.Addr().String()}, EtcdOptions{})
	if !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("start on a taken port: %v, want EADDRINUSE", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Fatalf("the failed start left %v in its directory", entries)
	}

	e, err := StartEtcd(dir, EtcdOptions{QuotaBackendBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	e.Stop()
	e.Stop()
}
