package main

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"sync"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// embedded is an etcd server of the demo's own.
type embedded struct {
	endpoint string // URL, for a client
	dir      string
	close    func()
}

// startEmbedded starts a one-member etcd on loopback in a temporary
// directory and waits until it serves.
func startEmbedded(ctx context.Context) (*embedded, error) {
	dir, err := os.MkdirTemp("", "etcd-reconcile-")
	if err != nil {
		return nil, err
	}
	clientURL, err := freeURL()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	peerURL, err := freeURL()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	cfg := embed.NewConfig()
	cfg.Name = "demo"
	cfg.Dir = dir
	cfg.ListenClientUrls = []url.URL{clientURL}
	cfg.AdvertiseClientUrls = []url.URL{clientURL}
	cfg.ListenPeerUrls = []url.URL{peerURL}
	cfg.AdvertisePeerUrls = []url.URL{peerURL}
	cfg.ListenMetricsUrls = nil
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.UnsafeNoFsync = true // a throwaway directory
	cfg.Logger = "zap"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start embedded etcd: %w", err)
	}
	var once sync.Once // (*embed.Etcd).Close panics when called twice
	stop := func() {
		once.Do(func() {
			e.Close()
			os.RemoveAll(dir)
		})
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		stop()
		return nil, fmt.Errorf("embedded etcd: %w", err)
	case <-time.After(30 * time.Second):
		stop()
		return nil, fmt.Errorf("embedded etcd: not ready after 30s")
	case <-ctx.Done():
		stop()
		return nil, ctx.Err()
	}
	return &embedded{endpoint: clientURL.String(), dir: dir, close: stop}, nil
}

// freeURL returns an http URL on a loopback port that was free a moment ago.
func freeURL() (url.URL, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return url.URL{}, err
	}
	defer l.Close()
	return url.URL{Scheme: "http", Host: l.Addr().String()}, nil
}
