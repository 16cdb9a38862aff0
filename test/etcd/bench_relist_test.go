package etcd

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/listwatch/mirror"
	etcdmirror "github.com/listwatch/mirror/adapters/etcd"
	"github.com/listwatch/mirror/source"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// BenchmarkRelist measures the relist that follows a compaction: a synced
// informer (with InformerOptions.ResourceVersion, so that unchanged keys
// are not delivered again) whose watch ends while the prefix changes and
// its history is compacted, so that it must list again and apply the
// list against its full cache; against a raw GetStream loop that reads
// the prefix into a new map and finds the keys the old map held that the
// new one lacks. One op is one relist of the prefix. The heap figures
// count from before the informer or the old map existed: held-MB is the
// cache (the map) of n keys, peak-MB what the relist needed on top at
// its worst.
//
// Each informer op, off the clock: a key ~sI is created and seen by the
// handler; the watch is held (holdingLW), ~sI deleted, ~zI created and
// the history compacted up to ~zI. On the clock: the watch is let go and
// ends; the Reflector watches again from its last revision, finds it
// compacted and relists; the op ends when the handler has seen the
// relist's unknown-state delete of ~sI and its add of ~zI, which sorts
// after every other key.
func BenchmarkRelist(b *testing.B) {
	c := sharedBenchEtcd(b)
	for _, n := range benchSizes() {
		prefix := syncPrefix(b, c, n)
		b.Run(sizeName(n), func(b *testing.B) {
			b.Run("impl=informer", func(b *testing.B) { benchInformerRelist(b, c, prefix, n) })
			b.Run("impl=raw-stream", func(b *testing.B) { benchRawRelist(b, c, prefix, n) })
		})
	}
}

// relistSeen is what the relist benchmark's handler reports: a change to
// one of the keys an op makes.
type relistSeen struct {
	key     string
	deleted bool
	unknown bool
}

func benchInformerRelist(b *testing.B, c *clientv3.Client, prefix string, n int) {
	var m opMeter
	m.fixBase()
	lw := &holdingLW{ListWatcher: etcdmirror.New(c, prefix, etcdmirror.Options{})}
	inf := mirror.NewInformer[string, etcdmirror.KV](lw, mirror.InformerOptions[string, etcdmirror.KV]{
		KeyFunc:         etcdmirror.KeyOf[[]byte],
		Logger:          quiet,
		ResourceVersion: func(o etcdmirror.KV) string { return strconv.FormatInt(o.ModRevision, 10) },
		ErrorHandler:    func(error) {}, // the compacted watch reports an error on each op
		ListWatch:       mirror.ListWatchOptions{InitialBackoff: time.Millisecond},
	})
	seen := make(chan relistSeen, 16)
	marked := func(key string) bool { return strings.HasPrefix(key, prefix+"~") }
	_, err := inf.AddEventHandler(mirror.HandlerFuncs[etcdmirror.KV]{
		AddFunc: func(o etcdmirror.KV, _ bool) {
			if marked(o.Key) {
				seen <- relistSeen{key: o.Key}
			}
		},
		DeleteFunc: func(o etcdmirror.KV, unknown bool) {
			if marked(o.Key) {
				seen <- relistSeen{key: o.Key, deleted: true, unknown: unknown}
			}
		},
	}, mirror.HandlerOptions{})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(b.Context())
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
	}()
	if err := mirror.WaitForCacheSync(b.Context(), inf); err != nil {
		b.Fatal(err)
	}
	await := func(want ...relistSeen) {
		b.Helper()
		left := append([]relistSeen(nil), want...)
		timeout := time.After(5 * time.Minute)
		for len(left) > 0 {
			select {
			case s := <-seen:
				for i, w := range left {
					if s == w {
						left = append(left[:i], left[i+1:]...)
						break
					}
				}
			case <-timeout:
				b.Fatalf("the handler did not see %v", left)
			}
		}
	}

	var lastZ string
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		s, z := fmt.Sprintf("%s~s%06d", prefix, i), fmt.Sprintf("%s~z%06d", prefix, i)
		mustPut(b, c, s)
		want := []relistSeen{{key: s}}
		if lastZ != "" {
			mustDelete(b, c, lastZ)
			want = append(want, relistSeen{key: lastZ, deleted: true})
		}
		await(want...)
		lw.hold()
		mustDelete(b, c, s)
		zRev := mustPut(b, c, z)
		if _, err := c.Compact(b.Context(), zRev); err != nil {
			b.Fatal(err)
		}
		lastZ = z
		m.start(b)
		lw.release()
		await(relistSeen{key: s, deleted: true, unknown: true}, relistSeen{key: z})
		m.stop(b, n)
	}
	m.report(b)
	if lastZ != "" {
		mustDelete(b, c, lastZ) // the prefix holds n keys again
	}
}

func benchRawRelist(b *testing.B, c *clientv3.Client, prefix string, n int) {
	var m opMeter
	m.fixBase()
	old, err := rawStream(b.Context(), c, prefix)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		m.start(b)
		cur, err := rawStream(b.Context(), c, prefix)
		if err != nil {
			b.Fatal(err)
		}
		gone := 0
		for k := range old {
			if _, ok := cur[k]; !ok {
				gone++
			}
		}
		old = cur
		m.stop(b, n)
		if len(cur) != n || gone != 0 {
			b.Fatalf("read %d keys, %d gone; want %d and none", len(cur), gone, n)
		}
	}
	m.report(b)
}

func mustPut(b *testing.B, c *clientv3.Client, key string) int64 {
	b.Helper()
	resp, err := c.Put(b.Context(), key, "marker")
	if err != nil {
		b.Fatal(err)
	}
	return resp.Header.Revision
}

func mustDelete(b *testing.B, c *clientv3.Client, key string) {
	b.Helper()
	if _, err := c.Delete(b.Context(), key); err != nil {
		b.Fatal(err)
	}
}

// holdingLW is the adapter whose watch a benchmark can hold and then end:
// while held, a watch hands out no event (one that arrives waits); once
// released, it ends as a watch does at its timeout (io.EOF), dropping what
// arrived meanwhile, as if the connection had been cut.
type holdingLW struct {
	*etcdmirror.ListWatcher[[]byte]

	mu   sync.Mutex
	held chan struct{} // while held; closed by release
}

func (l *holdingLW) hold() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held = make(chan struct{})
}

func (l *holdingLW) release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	close(l.held)
	l.held = nil
}

func (l *holdingLW) holding() chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held
}

func (l *holdingLW) Watch(ctx context.Context, opts source.WatchOptions) (source.Watcher[etcdmirror.KV], error) {
	w, err := l.ListWatcher.Watch(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &holdingWatcher{Watcher: w, lw: l}, nil
}

type holdingWatcher struct {
	source.Watcher[etcdmirror.KV]
	lw *holdingLW
}

func (w *holdingWatcher) Next(ctx context.Context) (source.Event[etcdmirror.KV], error) {
	held := w.lw.holding()
	if held == nil {
		ev, err := w.Watcher.Next(ctx)
		if err != nil {
			return ev, err
		}
		if held = w.lw.holding(); held == nil {
			return ev, nil
		}
	}
	select {
	case <-held:
	case <-ctx.Done():
		return source.Event[etcdmirror.KV]{}, ctx.Err()
	}
	w.Watcher.Stop()
	return source.Event[etcdmirror.KV]{}, io.EOF
}

var _ source.ChunkLister[etcdmirror.KV] = (*holdingLW)(nil)
