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
	"github.com/listwatch/mirror/examples/internal/cli"
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
	p            *cli.Printer

	// undecodable holds, for each key whose value failed to decode, the
	// revision of that value, as the ErrorHandler learnt it, which is
	// before the mirror drops the key: a deletion whose final state is
	// unknown, of an older state of the key, is that drop, not a relist
	// finding the key gone.
	mu          sync.Mutex
	undecodable map[string]int64
}

// newMirror returns the informer over cfg.prefix and its handler; metrics,
// if not nil, receives its measurements.
func newMirror(client *clientv3.Client, cfg config, metrics mirror.Metrics, p *cli.Printer) *mirrorState {
	m := &mirrorState{undecodable: map[string]int64{}, p: p}
	lw := etcdmirror.NewTyped(client, cfg.prefix, decodeService, etcdmirror.Options{})
	// NewInformer keys the cache by etcd key, takes a key whose
	// ModRevision did not change for no change when it relists, and a key
	// whose CreateRevision changed for another object.
	m.inf = etcdmirror.NewInformer(lw, etcdmirror.InformerOptions[Service]{
		Metrics: metrics,
		Logger:  cfg.Logger(), // nil, slog's default, unless --quiet
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
			p.Printf("reported: %v", err)
		},
	})
	reg, err := m.inf.AddEventHandler(mirror.HandlerFuncs[object]{
		AddFunc: func(o object, initial bool) {
			if initial {
				m.initial.Add(1)
				return
			}
			m.saw(o.ModRevision)
			p.Printf("add    %s  zone=%s port=%d (rev %d)", o.Key, o.Value.Zone, o.Value.Port, o.ModRevision)
		},
		UpdateFunc: func(old, o object) {
			m.saw(o.ModRevision)
			p.Printf("update %s  zone=%s->%s port=%d->%d (rev %d)", o.Key, old.Value.Zone, o.Value.Zone, old.Value.Port, o.Value.Port, o.ModRevision)
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
			p.Printf("delete %s  zone=%s port=%d (%s)", o.Key, o.Value.Zone, o.Value.Port, how)
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

// firstSync waits for the initial sync, within --sync-timeout, and says
// what it got: how many keys, and a warning if there are none.
func (m *mirrorState) firstSync(ctx context.Context, cfg config, p *cli.Printer) error {
	start := time.Now()
	if err := cfg.WaitForSync(ctx, p, m.inf, m.reg); err != nil {
		if errors.Is(err, mirror.ErrPermanent) {
			return fmt.Errorf("etcd refuses the mirror: %w", err)
		}
		return err
	}
	m.syncedAt = time.Now()
	p.Printf("synced %s in %v", plural(m.inf.Len(), "key"), time.Since(start).Round(time.Millisecond))
	if m.inf.Len() > 0 {
		return nil
	}
	if n := m.skipped.Load(); n > 0 {
		p.Printf("warning: no key under %q has a value that decodes (%s skipped)", cfg.prefix, plural(n, "value"))
	} else {
		p.Printf("warning: no keys under %q: is the prefix right? (etcdctl get --prefix --keys-only %q lists them)", cfg.prefix, cfg.prefix)
	}
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

// summary prints what the mirror holds and did.
func (m *mirrorState) summary() {
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
	m.p.Summary("summary: %s mirrored (by zone: %v); %s handled after the initial %d (%.0f/s since the sync); %s (%s), %s; %s reported, %s skipped",
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
func (m *mirrorState) verify(ctx context.Context, client *clientv3.Client, prefix string, p *cli.Printer) error {
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
	p.Printf("verified: the mirror matches etcd at revision %d (%d keys)", resp.Header.Revision, len(want))
	return nil
}
