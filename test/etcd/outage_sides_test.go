package etcd

// The two watchers TestOutage_Measure compares: a mirror (an informer from
// etcd.NewInformer with default options) and a raw clientv3 watch loop,
// each on a client of its own, and what each records: when it first saw
// each key and, for the mirror, its errors, logs and Freshness over time.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/listwatch/mirror"
	etcdmirror "github.com/listwatch/mirror/adapters/etcd"
	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/connectivity"
)

// newOutageClient returns a client of endpoints that the caller closes.
// Every client of the measurement has this configuration, so that the
// mirror and the raw watch reconnect alike: gRPC's pause between
// connection attempts is its default, which starts at 1 s and grows by
// 1.6 with 20% jitter up to 120 s, or with -outage.fastdial starts at
// 50 ms and stays under a second (as the soak's clients); with
// -outage.keepalive, the client pings its member that often and drops a
// connection whose ping goes unanswered as long.
func newOutageClient(t testing.TB, endpoints ...string) *clientv3.Client {
	t.Helper()
	cfg := clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
	if *outageFastDialFlag {
		cfg.DialOptions = []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: time.Second,
		})}
	}
	if d := *outageKeepAliveFlag; d > 0 {
		cfg.DialKeepAliveTime, cfg.DialKeepAliveTimeout = d, d
	}
	c, err := clientv3.New(cfg)
	require.NoError(t, err)
	return c
}

// outageClientConfig describes newOutageClient's configuration.
func outageClientConfig() string {
	s := "clientv3.Config{Endpoints, DialTimeout: 5s"
	if d := *outageKeepAliveFlag; d > 0 {
		s += fmt.Sprintf(", DialKeepAliveTime: %v, DialKeepAliveTimeout: %v", d, d)
	}
	if *outageFastDialFlag {
		return s + "}, gRPC reconnect backoff 50 ms ×1.6 up to 1 s, jitter 0.2"
	}
	return s + "}, gRPC's default reconnect backoff (1 s ×1.6 up to 120 s, jitter 0.2)"
}

// connWatch records when a client's gRPC connection became ready, until
// its context ends.
type connWatch struct {
	mu    sync.Mutex
	ready []time.Time // each time the connection became ready
	state connectivity.State
	done  chan struct{}
}

func watchConn(ctx context.Context, c *clientv3.Client) *connWatch {
	w := &connWatch{done: make(chan struct{})}
	conn := c.ActiveConnection()
	go func() {
		defer close(w.done)
		for {
			st := conn.GetState()
			w.mu.Lock()
			if st == connectivity.Ready && w.state != connectivity.Ready {
				w.ready = append(w.ready, time.Now())
			}
			w.state = st
			w.mu.Unlock()
			if !conn.WaitForStateChange(ctx, st) {
				return
			}
		}
	}()
	return w
}

// readyAfter returns how long after from the connection became ready:
// 0 if it never stopped being ready, negative if it is not ready.
func (w *connWatch) readyAfter(from time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, at := range w.ready {
		if !at.Before(from) {
			return at.Sub(from)
		}
	}
	if w.state == connectivity.Ready {
		return 0
	}
	return -1
}

// sightings records when each key was first seen, and lets a caller wait
// for a key. It is safe for concurrent use.
type sightings struct {
	mu    sync.Mutex
	at    map[string]time.Time
	ready map[string]chan struct{} // closed once the key is seen
}

func newSightings() *sightings {
	return &sightings{at: map[string]time.Time{}, ready: map[string]chan struct{}{}}
}

func (s *sightings) see(key string) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.at[key]; ok {
		return
	}
	s.at[key] = now
	if ch, ok := s.ready[key]; ok {
		close(ch)
	}
}

// seen returns a channel closed once key has been seen.
func (s *sightings) seen(key string) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, ok := s.ready[key]
	if !ok {
		ch = make(chan struct{})
		s.ready[key] = ch
		if _, ok := s.at[key]; ok {
			close(ch)
		}
	}
	return ch
}

// when returns when key was first seen, if it was.
func (s *sightings) when(key string) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.at[key]
	return at, ok
}

// rawWatch is a raw clientv3 watch of a prefix, as a program without the
// mirror would write it: it watches from the revision after the last event
// seen, and watches again whenever the client's channel closes or reports
// an error.
type rawWatch struct {
	c      *clientv3.Client
	conn   *connWatch
	seen   *sightings
	cancel context.CancelFunc
	done   chan struct{}
}

func startRawWatch(t testing.TB, prefix string, endpoints ...string) *rawWatch {
	t.Helper()
	c := newOutageClient(t, endpoints...)
	ctx, cancel := context.WithCancel(context.Background())
	r := &rawWatch{c: c, conn: watchConn(ctx, c), seen: newSightings(), cancel: cancel, done: make(chan struct{})}
	gctx, gcancel := context.WithTimeout(ctx, convergeTimeout)
	defer gcancel()
	resp, err := c.Get(gctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	require.NoError(t, err)
	next := resp.Header.Revision + 1
	go func() {
		defer close(r.done)
		for ctx.Err() == nil {
			wctx, wcancel := context.WithCancel(ctx)
			for resp := range c.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(next)) {
				if resp.Err() != nil {
					break
				}
				for _, ev := range resp.Events {
					r.seen.see(string(ev.Kv.Key))
					next = ev.Kv.ModRevision + 1
				}
			}
			wcancel()
		}
	}()
	return r
}

// stop ends the watch and closes its client.
func (r *rawWatch) stop() {
	r.cancel()
	<-r.done
	<-r.conn.done
	_ = r.c.Close()
}

// timedLog records a mirror's errors and logs, each with its time. It is
// safe for concurrent use, and its handler (a slog.Handler) records every
// level.
type timedLog struct {
	mu      sync.Mutex
	entries []timedEntry
}

type timedEntry struct {
	at  time.Time
	msg string
	err error // set for errors from the ErrorHandler
}

func (l *timedLog) addErr(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries = append(l.entries, timedEntry{at: time.Now(), msg: err.Error(), err: err})
}

func (l *timedLog) addLine(at time.Time, msg string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries = append(l.entries, timedEntry{at: at, msg: msg})
}

// errsSince returns the errors reported from from on.
func (l *timedLog) errsSince(from time.Time) []timedEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []timedEntry
	for _, e := range l.entries {
		if e.err != nil && !e.at.Before(from) {
			out = append(out, e)
		}
	}
	return out
}

// firstErr returns when the first error wrapping target after from was
// reported, if one was.
func (l *timedLog) firstErr(from time.Time, target error) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.entries {
		if e.err != nil && !e.at.Before(from) && errors.Is(e.err, target) {
			return e.at, true
		}
	}
	return time.Time{}, false
}

// since returns the entries from from on, one line each, timed in seconds
// relative to zero.
func (l *timedLog) since(from, zero time.Time) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, e := range l.entries {
		if e.at.Before(from) {
			continue
		}
		kind := "log"
		if e.err != nil {
			kind = "err"
		}
		out = append(out, fmt.Sprintf("%+8.3fs %s %s", e.at.Sub(zero).Seconds(), kind, e.msg))
	}
	return out
}

// handler returns a slog.Handler that records into l.
func (l *timedLog) handler() slog.Handler { return &timedLogHandler{log: l} }

type timedLogHandler struct {
	log   *timedLog
	attrs string
}

func (h *timedLogHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *timedLogHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	b.WriteString(h.attrs)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s", a)
		return true
	})
	h.log.addLine(r.Time, b.String())
	return nil
}

func (h *timedLogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	var b strings.Builder
	b.WriteString(h.attrs)
	for _, a := range attrs {
		fmt.Fprintf(&b, " %s", a)
	}
	return &timedLogHandler{log: h.log, attrs: b.String()}
}

func (h *timedLogHandler) WithGroup(string) slog.Handler { return h }

// freshnessSample is a change of whether a mirror's Freshness holds an
// error, and when it was first observed.
type freshnessSample struct {
	at     time.Time
	failed bool
	err    error
}

// mirrorWatch is a mirror of a prefix: an informer from etcd.NewInformer
// over a ListWatcher with default options, on a client of its own, with a
// handler that records when it is told of each key, its errors and logs,
// and Freshness sampled every freshnessPoll.
type mirrorWatch struct {
	c    *clientv3.Client
	conn *connWatch
	inf  *mirror.Informer[string, etcdmirror.KV]
	seen *sightings
	log  *timedLog

	mu    sync.Mutex
	fresh []freshnessSample // transitions only

	cancel context.CancelFunc
	done   chan error
	polled chan struct{}
}

// freshnessPoll is how often a mirrorWatch reads its informer's Freshness.
const freshnessPoll = 5 * time.Millisecond

func startMirrorWatch(t testing.TB, prefix string, endpoints ...string) *mirrorWatch {
	t.Helper()
	c := newOutageClient(t, endpoints...)
	m := &mirrorWatch{c: c, seen: newSightings(), log: &timedLog{}, done: make(chan error, 1), polled: make(chan struct{})}
	m.inf = etcdmirror.NewInformer(etcdmirror.New(c, prefix, etcdmirror.Options{}), etcdmirror.InformerOptions[[]byte]{
		Name:         "outage",
		ErrorHandler: m.log.addErr,
		Logger:       slog.New(m.log.handler()),
	})
	reg, err := m.inf.AddEventHandler(mirror.HandlerFuncs[etcdmirror.KV]{
		AddFunc:    func(o etcdmirror.KV, _ bool) { m.seen.see(o.Key) },
		UpdateFunc: func(_, o etcdmirror.KV) { m.seen.see(o.Key) },
	}, mirror.HandlerOptions{})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	m.conn = watchConn(ctx, c)
	go func() { m.done <- m.inf.Run(ctx) }()
	go m.poll(ctx)
	wctx, wcancel := context.WithTimeout(ctx, convergeTimeout)
	defer wcancel()
	require.NoError(t, mirror.WaitForCacheSync(wctx, reg))
	return m
}

// poll records the changes of whether Freshness holds an error.
func (m *mirrorWatch) poll(ctx context.Context) {
	defer close(m.polled)
	tick := time.NewTicker(freshnessPoll)
	defer tick.Stop()
	failed := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		f := m.inf.Freshness()
		if (f.Err != nil) != failed {
			failed = f.Err != nil
			now := time.Now()
			m.mu.Lock()
			m.fresh = append(m.fresh, freshnessSample{at: now, failed: failed, err: f.Err})
			m.mu.Unlock()
			m.log.addLine(now, fmt.Sprintf("Freshness: Err=%v ResourceVersion=%s ConfirmedAt=%s",
				f.Err != nil, f.ResourceVersion, f.ConfirmedAt.Format("15:04:05.000")))
		}
	}
}

// freshnessChange returns when Freshness was first seen, from from on, to
// hold an error wrapping source.ErrUnavailable (failed) or no error (not
// failed), if it was.
func (m *mirrorWatch) freshnessChange(from time.Time, failed bool) (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.fresh {
		if s.at.Before(from) || s.failed != failed {
			continue
		}
		if failed && !errors.Is(s.err, source.ErrUnavailable) {
			continue
		}
		return s.at, true
	}
	return time.Time{}, false
}

// stop ends the informer, waits for it and closes its client.
func (m *mirrorWatch) stop(t testing.TB) {
	m.cancel()
	require.NoError(t, <-m.done)
	<-m.polled
	<-m.conn.done
	_ = m.c.Close()
}
