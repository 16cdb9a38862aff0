package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/listwatch/mirror"
	etcdmirror "github.com/listwatch/mirror/adapters/etcd"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// decodeService is the adapter's decode function: JSON to Service.
func decodeService(key string, value []byte) (Service, error) {
	var s Service
	if err := json.Unmarshal(value, &s); err != nil {
		return Service{}, fmt.Errorf("decode %s: %w", key, err)
	}
	return s, nil
}

// mirrorState is the informer over the prefix and what the demo counts.
type mirrorState struct {
	inf          *mirror.Informer[string, object]
	reg          *mirror.Registration
	initial      atomic.Int64 // initial-list adds handled
	events       atomic.Int64 // changes handled after the initial list
	errors       atomic.Int64 // every error reported
	skipped      atomic.Int64 // values that failed to decode
	lastRevision atomic.Int64 // highest ModRevision the handler saw
	syncedAt     time.Time    // when the handler had the initial list

	// undecodable holds, for each key whose value failed to decode, the
	// revision of that value, as the ErrorHandler learnt it, which is
	// before the mirror drops the key: a deletion whose final state is
	// unknown, of an older state of the key, is that drop, not a relist
	// finding the key gone.
	mu          sync.Mutex
	undecodable map[string]int64
}

// newMirror returns the informer over prefix and its handler; metrics, if
// not nil, receives its measurements.
func newMirror(client *clientv3.Client, prefix string, metrics mirror.Metrics, p *printer) *mirrorState {
	m := &mirrorState{undecodable: map[string]int64{}}
	lw := etcdmirror.NewTyped(client, prefix, decodeService, etcdmirror.Options{
		// Report a member that does not answer after 5s rather than
		// the default 30s; the informer retries either way.
		RequestTimeout: 5 * time.Second,
	})
	// NewInformer keys the cache by etcd key, takes a key whose
	// ModRevision did not change for no change when it relists, and a key
	// whose CreateRevision changed for another object.
	m.inf = etcdmirror.NewInformer(lw, etcdmirror.InformerOptions[Service]{
		Name:    prefix,
		Metrics: metrics,
		Indexers: mirror.Indexers[object]{
			"zone": func(o object) ([]string, error) { return []string{o.Value.Zone}, nil },
		},
		ListWatch: mirror.ListWatchOptions{PageSize: 1000},
		ErrorHandler: func(err error) {
			m.errors.Add(1)
			// A skipped key says all it needs by itself; other errors
			// (a lost connection, a compaction) keep the Reflector's
			// context.
			var skipped *mirror.ObjectError
			if errors.As(err, &skipped) {
				m.skipped.Add(1)
				m.failedToDecode(skipped)
				err = skipped
			}
			p.printf("reported: %v", err)
		},
	})
	reg, err := m.inf.AddEventHandler(mirror.HandlerFuncs[object]{
		AddFunc: func(o object, initial bool) {
			if initial {
				m.initial.Add(1)
				return
			}
			m.saw(o.ModRevision)
			p.event("add    %s  zone=%s port=%d (rev %d)", o.Key, o.Value.Zone, o.Value.Port, o.ModRevision)
		},
		UpdateFunc: func(old, o object) {
			m.saw(o.ModRevision)
			p.event("update %s  zone=%s->%s port=%d->%d (rev %d)", o.Key, old.Value.Zone, o.Value.Zone, old.Value.Port, o.Value.Port, o.ModRevision)
		},
		DeleteFunc: func(o object, finalStateUnknown bool) {
			m.events.Add(1)
			how := "observed"
			switch rev, undecodable := m.decodesNoMore(o); {
			case undecodable:
				// etcd holds a value of the key the mirror cannot
				// represent: the mirror drops the key.
				how = fmt.Sprintf("dropped: its value at rev %d does not decode", rev)
			case finalStateUnknown:
				// The watch missed the deletion (the mirror was cut
				// off and etcd compacted its history): a relist found
				// the key gone, or created again.
				how = "unseen, found by a relist"
			}
			// o is the last state the mirror held, whether the watch saw
			// the delete or the key left the mirror otherwise.
			p.event("delete %s  zone=%s port=%d (%s)", o.Key, o.Value.Zone, o.Value.Port, how)
		},
	}, mirror.HandlerOptions{Name: "print"})
	if err != nil {
		panic(err) // only for a nil handler, or an informer already stopped
	}
	m.reg = reg
	return m
}

// failedToDecode records the revision of a value that failed to decode.
func (m *mirrorState) failedToDecode(e *mirror.ObjectError) {
	rev, err := strconv.ParseInt(e.ResourceVersion, 10, 64)
	if err != nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.undecodable[e.Key] = rev
}

// decodesNoMore returns the revision of a value of o's key that failed to
// decode after o, the last state the mirror held, if there is one: the
// mirror dropped o for that value. The informer reports a value that
// fails to decode before any handler sees the key go.
func (m *mirrorState) decodesNoMore(o object) (rev int64, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rev, ok = m.undecodable[o.Key]
	return rev, ok && rev > o.ModRevision
}

// start runs the informer until ctx ends or the returned function is
// called; that function returns once the informer has stopped.
func (m *mirrorState) start(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := m.inf.Run(ctx); err != nil {
			panic(err) // only for a second Run
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

func (m *mirrorState) saw(rev int64) {
	m.events.Add(1)
	for {
		cur := m.lastRevision.Load()
		if rev <= cur || m.lastRevision.CompareAndSwap(cur, rev) {
			return
		}
	}
}

// firstSync waits for the initial sync until cfg.syncTimeout after
// start, and says what it got: how many keys, and a warning if there are
// none.
func (m *mirrorState) firstSync(ctx context.Context, cfg config, start time.Time, p *printer) error {
	if err := m.waitForSync(ctx, cfg.syncTimeout, start, p); err != nil {
		return err
	}
	p.printf("synced %s in %v", plural(m.inf.Len(), "key"), time.Since(start).Round(time.Millisecond))
	if m.inf.Len() > 0 {
		return nil
	}
	if n := m.skipped.Load(); n > 0 {
		p.printf("warning: no key under %q has a value that decodes (%s skipped)", cfg.prefix, plural(n, "value"))
	} else {
		p.printf("warning: no keys under %q: is the prefix right? (etcdctl get --prefix --keys-only %q lists them)", cfg.prefix, cfg.prefix)
	}
	return nil
}

// waitForSync waits for the handler to have the initial list, printing
// progress once a second, until timeout after start (no bound if 0). If
// the wait ends first, or the informer gives up because etcd refuses it
// (mirror.ErrPermanent), it says why.
func (m *mirrorState) waitForSync(ctx context.Context, timeout time.Duration, start time.Time, p *printer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the wait below if the timeout comes first
	synced := make(chan error, 1)
	go func() { synced <- m.reg.WaitForSync(ctx) }()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var expired <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout - time.Since(start))
		defer t.Stop()
		expired = t.C
	}
	for {
		select {
		case err := <-synced:
			switch {
			case err == nil:
				m.syncedAt = time.Now()
				return nil
			case errors.Is(err, mirror.ErrPermanent):
				return fmt.Errorf("etcd refuses the mirror: %w", err)
			}
			return err // ctx ended
		case <-tick.C:
			p.printf("initial sync: %d keys so far", m.initial.Load())
		case <-expired:
			return m.notSynced(fmt.Errorf("not synced within --sync-timeout %v", timeout))
		}
	}
}

// notSynced adds to err, which says that the initial sync did not
// complete in time, the mirror's last failure, which says why it did not.
func (m *mirrorState) notSynced(err error) error {
	if last := m.inf.Freshness().Err; last != nil {
		return fmt.Errorf("%w; last failure: %w", err, last)
	}
	return fmt.Errorf("%w; no failure reported yet", err)
}

// stopped ends a run whose context ended: an interruption (Ctrl-C,
// SIGTERM) is a normal stop at any time, and so is the end of --duration
// once the mirror has synced; either prints the summary so far and
// returns nil. --duration over before the initial sync is a failure.
func (m *mirrorState) stopped(ctx context.Context, cfg config, p *printer) error {
	over := errors.Is(context.Cause(ctx), errDurationOver)
	switch {
	case over && m.syncedAt.IsZero():
		return m.notSynced(fmt.Errorf("not synced within --duration %v: %w", cfg.duration, ctx.Err()))
	case over:
		p.printf("stopped: --duration %v over", cfg.duration)
	case m.syncedAt.IsZero():
		p.printf("interrupted before the first sync")
	default:
		p.printf("interrupted")
	}
	m.summary(p)
	return nil
}

// waitFor waits until the mirror has seen revision rev and the handler
// has nothing left to do.
func (m *mirrorState) waitFor(ctx context.Context, rev int64) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		seen, _ := strconv.ParseInt(m.inf.Freshness().ResourceVersion, 10, 64)
		if seen >= rev && m.reg.Backlog() == 0 {
			return nil
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (m *mirrorState) summary(p *printer) {
	zones := map[string]int{}
	for _, o := range m.inf.All() {
		zones[o.Value.Zone]++
	}
	var perZone []string
	for _, z := range slices.Sorted(maps.Keys(zones)) {
		n, _ := m.inf.IndexKeys("zone", z)
		perZone = append(perZone, fmt.Sprintf("%s=%d", z, len(n)))
	}
	st := m.inf.Stats().Reflector
	events := m.events.Load()
	var rate float64
	if d := time.Since(m.syncedAt); !m.syncedAt.IsZero() && d > 0 {
		rate = float64(events) / d.Seconds()
	}
	p.printf("summary: %s mirrored (by zone: %v); %s handled after the initial %d (%.0f/s since the sync); %s (%s), %s; %s reported, %s skipped",
		plural(m.inf.Len(), "key"), perZone, plural(events, "change"), m.initial.Load(), rate,
		plural(st.Lists, "list"), plural(st.Relists, "relist"), plural(st.Watches, "watch"),
		plural(m.errors.Load(), "error"), plural(m.skipped.Load(), "undecodable value"))
}

// plural returns n and noun, in the plural unless n is 1: "1 list", "2
// lists", "0 watches".
func plural[N int | int64](n N, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	if strings.HasSuffix(noun, "ch") || strings.HasSuffix(noun, "s") {
		return fmt.Sprintf("%d %ses", n, noun)
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// verify reads the prefix straight from etcd and compares it with the
// mirror, leaving out values that do not decode (the mirror skips them).
func (m *mirrorState) verify(ctx context.Context, client *clientv3.Client, prefix string, p *printer) error {
	resp, err := client.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	want := map[string]Service{}
	for _, kv := range resp.Kvs {
		if s, err := decodeService(string(kv.Key), kv.Value); err == nil {
			want[string(kv.Key)] = s
		}
	}
	got := map[string]Service{}
	for k, o := range m.inf.All() {
		got[k] = o.Value
	}
	if !maps.Equal(want, got) {
		return fmt.Errorf("verify: the mirror holds %d keys, etcd %d decodable keys: they differ", len(got), len(want))
	}
	p.printf("verified: the mirror matches etcd at revision %d (%d keys)", resp.Header.Revision, len(want))
	return nil
}
