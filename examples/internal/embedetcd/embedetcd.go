// Package embedetcd starts an etcd server of the examples' own: one
// member, on loopback, in a temporary directory, for their demos and tests.
package embedetcd

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

// Server is a running etcd. Close stops it and removes its directory.
type Server struct {
	Endpoint string // the client URL, such as http://127.0.0.1:40123
	Host     string // the client address, host:port
	Dir      string // its data, removed by Close

	etcd *embed.Etcd
	once sync.Once
}

// Start starts a one-member etcd on loopback, its data in a new temporary
// directory whose name begins with name, and waits until it serves, for at
// most 30 seconds or until ctx ends. Whatever fails, it leaves no directory
// and no server behind.
func Start(ctx context.Context, name string) (*Server, error) {
	clientURL, err := freeURL()
	if err != nil {
		return nil, err
	}
	peerURL, err := freeURL()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", name+"-")
	if err != nil {
		return nil, err
	}
	cfg := embed.NewConfig()
	cfg.Name = name
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
	s := &Server{Endpoint: clientURL.String(), Host: clientURL.Host, Dir: dir, etcd: e}
	select {
	case <-e.Server.ReadyNotify():
		err = ctx.Err() // nil unless ctx ended meanwhile
	case err = <-e.Err():
		err = fmt.Errorf("embedded etcd: %w", err)
	case <-time.After(30 * time.Second):
		err = fmt.Errorf("embedded etcd: not ready after 30s")
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Close stops the server and removes its directory. It is safe to call
// more than once, which (*embed.Etcd).Close is not.
func (s *Server) Close() {
	s.once.Do(func() {
		s.etcd.Close()
		os.RemoveAll(s.Dir)
	})
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
