package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
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
}

func newMirror(client *clientv3.Client, prefix string, p *printer) *mirrorState {
	m := &mirrorState{}
	lw := etcdmirror.NewTyped(client, prefix, decodeService, etcdmirror.Options{})
	m.inf = mirror.NewInformer(lw, mirror.InformerOptions[string, object]{
		KeyFunc: etcdmirror.KeyOf[Service],
		Indexers: mirror.Indexers[object]{
			"zone": func(o object) ([]string, error) { return []string{o.Value.Zone}, nil },
		},
		// A relisted key at the revision already mirrored is not a change.
		ResourceVersion: func(o object) string { return strconv.FormatInt(o.ModRevision, 10) },
		Reflector:       mirror.ReflectorOptions{PageSize: 1000},
		ErrorHandler: func(err error) {
			m.errors.Add(1)
			// A skipped key says all it needs by itself; other errors
			// (a lost connection, a compaction) keep the Reflector's
			// context.
			var skipped *mirror.ObjectError
			if errors.As(err, &skipped) {
				m.skipped.Add(1)
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
			if finalStateUnknown {
				how = "found missing by a relist"
			}
			// o is the last state the mirror held, whether the watch saw
			// the delete or a relist found the key gone.
			p.event("delete %s  zone=%s port=%d (%s)", o.Key, o.Value.Zone, o.Value.Port, how)
		},
	}, mirror.HandlerOptions{})
	if err != nil {
		panic(err) // only for a nil handler
	}
	m.reg = reg
	return m
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

// waitForSync waits for the handler to have the initial list, printing
// progress once a second for a large prefix.
func (m *mirrorState) waitForSync(ctx context.Context, p *printer) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-m.reg.Synced():
			m.syncedAt = time.Now()
			return nil
		case <-tick.C:
			p.printf("initial sync: %d keys so far", m.initial.Load())
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// waitFor waits until the mirror has seen revision rev and the handler
// has nothing left to do.
func (m *mirrorState) waitFor(ctx context.Context, rev int64) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		seen, _ := strconv.ParseInt(m.inf.LastSyncResourceVersion(), 10, 64)
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
	st := m.inf.ReflectorStats()
	events := m.events.Load()
	var rate float64
	if d := time.Since(m.syncedAt); !m.syncedAt.IsZero() && d > 0 {
		rate = float64(events) / d.Seconds()
	}
	p.printf("summary: %d keys mirrored (by zone: %v); %d changes handled after the initial %d (%.0f/s since the sync); %d lists (%d relists), %d watches; %d errors reported, %d undecodable values skipped",
		m.inf.Len(), perZone, events, m.initial.Load(), rate, st.Lists, st.Relists, st.Watches, m.errors.Load(), m.skipped.Load())
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
