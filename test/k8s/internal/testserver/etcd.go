package testserver

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"sync"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// EtcdOptions are the settings of StartEtcd. The zero value is etcd's
// defaults.
type EtcdOptions struct {
	// QuotaBackendBytes is etcd's storage quota, past which it refuses
	// writes; zero is etcd's default (2 GiB).
	QuotaBackendBytes int64
	// ReadyTimeout bounds the wait for etcd to be ready to serve; zero
	// is one minute.
	ReadyTimeout time.Duration
}

// Etcd is a one-member etcd started by StartEtcd.
type Etcd struct {
	// URL is the http URL etcd serves clients at.
	URL string
	// Stop stops etcd and returns once it has stopped; calls after the
	// first do nothing.
	Stop func()
}

// StartEtcd starts a one-member etcd on loopback, with its data in dir:
// what an earlier etcd left there is kept. etcd does not fsync and logs
// nothing. StartEtcd returns once etcd is ready to serve, or an error if
// it is not within opts.ReadyTimeout.
//
// etcd's ports are ones that were free a moment before; if another process
// takes one meanwhile, StartEtcd tries again on new ones, three attempts
// in all. etcd takes its ports before it writes to dir, so such an attempt
// leaves dir as it found it.
func StartEtcd(dir string, opts EtcdOptions) (*Etcd, error) {
	for attempt := 1; ; attempt++ {
		e, err := tryStartEtcd(dir, opts)
		if err == nil || attempt == 3 || !errors.Is(err, syscall.EADDRINUSE) {
			return e, err
		}
	}
}

func tryStartEtcd(dir string, opts EtcdOptions) (*Etcd, error) {
	peer, err := freeURL()
	if err != nil {
		return nil, err
	}
	client, err := freeURL()
	if err != nil {
		return nil, err
	}
	return startEtcdAt(dir, peer, client, opts)
}

// startEtcdAt starts etcd with the given peer and client URLs.
func startEtcdAt(dir string, peer, client url.URL, opts EtcdOptions) (*Etcd, error) {
	cfg := embed.NewConfig()
	cfg.Dir = dir
	cfg.ListenPeerUrls = []url.URL{peer}
	cfg.AdvertisePeerUrls = []url.URL{peer}
	cfg.ListenClientUrls = []url.URL{client}
	cfg.AdvertiseClientUrls = []url.URL{client}
	cfg.ListenMetricsUrls = nil
	cfg.InitialCluster = cfg.Name + "=" + peer.String()
	cfg.UnsafeNoFsync = true
	cfg.Logger = "zap"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	if opts.QuotaBackendBytes != 0 {
		cfg.QuotaBackendBytes = opts.QuotaBackendBytes
	}
	timeout := opts.ReadyTimeout
	if timeout == 0 {
		timeout = time.Minute
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, err
	}
	var once sync.Once
	// (*embed.Etcd).Close panics when called twice.
	s := &Etcd{URL: client.String(), Stop: func() { once.Do(e.Close) }}
	select {
	case <-e.Server.ReadyNotify():
		return s, nil
	case err := <-e.Err():
		s.Stop()
		return nil, err
	case <-time.After(timeout):
		s.Stop()
		return nil, fmt.Errorf("etcd not ready after %v", timeout)
	}
}

// freeURL returns an http URL on a loopback port that was free a moment ago.
func freeURL() (url.URL, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return url.URL{}, err
	}
	addr := l.Addr().String()
	return url.URL{Scheme: "http", Host: addr}, l.Close()
}
