package reconcile_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/memsource"
	"github.com/listwatch/mirror/reconcile"
	"github.com/listwatch/mirror/shard"
)

// call is one Reconcile call of a replica, as the history records it.
type call struct {
	replica    string
	key        string
	val        int // the object's value the call saw, -1 for none
	start, end time.Time
	token      shard.Token
}

// history records every Reconcile call of a group of replicas.
type history struct {
	mu    sync.Mutex
	calls []call
}

func (h *history) add(c call) {
	h.mu.Lock()
	h.calls = append(h.calls, c)
	h.mu.Unlock()
}

// requireNoOverlap fails if two replicas reconciled one key at once.
func (h *history) requireNoOverlap(t *testing.T) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	byKey := map[string][]call{}
	for _, c := range h.calls {
		byKey[c.key] = append(byKey[c.key], c)
	}
	for key, calls := range byKey {
		for i, a := range calls {
			for _, b := range calls[i+1:] {
				if a.replica != b.replica && a.start.Before(b.end) && b.start.Before(a.end) {
					t.Fatalf("key %s reconciled at once by %s [%v, %v] and %s [%v, %v]", key, a.replica, a.start, a.end, b.replica, b.start, b.end)
				}
			}
		}
	}
}

// last returns, per key, the last call that started.
func (h *history) last() map[string]call {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]call{}
	for _, c := range h.calls {
		if p, ok := out[c.key]; !ok || !c.start.Before(p.start) {
			out[c.key] = c
		}
	}
	return out
}

// replica is one replica of a sharded controller: its own informer over
// the shared source, its own member of the shared group, its own loop.
type replica struct {
	name   string
	member *shard.Member
	stop   func()
}

func startReplica(t *testing.T, name string, src *memsource.Source[item], b shard.Backend, h *history, work time.Duration) *replica {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	m := shard.NewMember(b, shard.MemberOptions{
		Name: name, TTL: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 500 * time.Millisecond,
		Logger: quiet, ErrorHandler: func(error) {},
	})
	inf := mirror.NewInformer(src, mirror.InformerOptions[string, item]{KeyFunc: itemKey, Logger: quiet})
	loop := reconcile.New(reconcile.Func[string](func(ctx context.Context, key string) (reconcile.Result, error) {
		c := call{replica: name, key: key, val: -1, start: time.Now()}
		if obj, ok := inf.GetByKey(key); ok {
			c.val = obj.Val
		}
		c.token, _ = shard.TokenFrom(ctx)
		select {
		case <-time.After(work):
		case <-ctx.Done():
		}
		c.end = time.Now()
		h.add(c)
		return reconcile.Result{}, ctx.Err()
	}), reconcile.Options{Name: name, Workers: 4, Shards: m, Logger: quiet, ErrorHandler: func(error) {}})
	_, err := reconcile.Watch(loop, inf, mirror.HandlerOptions{})
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() { _ = inf.Run(ctx) })
	wg.Go(func() { assert.NoError(t, m.Run(ctx)) })
	wg.Go(func() { assert.NoError(t, loop.Run(ctx)) })
	var once sync.Once
	r := &replica{name: name, member: m, stop: func() { once.Do(func() { cancel(); wg.Wait() }) }}
	t.Cleanup(r.stop)
	return r
}

func TestShardedLoop_ReplicasShareTheKeysAndConverge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := memsource.New(itemKey, memsource.Options{})
		b := shard.NewMemory(shard.MemoryOptions{})
		var h history
		const keys = 300
		for i := range keys {
			_, err := src.Put(item{Name: fmt.Sprintf("k%03d", i), Val: 1})
			require.NoError(t, err)
		}
		rs := []*replica{
			startReplica(t, "a", src, b, &h, 10*time.Millisecond),
			startReplica(t, "b", src, b, &h, 10*time.Millisecond),
			startReplica(t, "c", src, b, &h, 10*time.Millisecond),
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()

		// Live changes, then a replica leaves and another is killed
		// mid-way (its lease left to expire), changes going on.
		for i := range keys {
			_, err := src.Put(item{Name: fmt.Sprintf("k%03d", i), Val: 2})
			require.NoError(t, err)
		}
		time.Sleep(time.Second)
		rs[0].stop()
		for i := 0; i < keys; i += 3 {
			_, err := src.Put(item{Name: fmt.Sprintf("k%03d", i), Val: 3})
			require.NoError(t, err)
		}
		src.Delete("k001")
		time.Sleep(10 * time.Second)
		synctest.Wait()

		h.requireNoOverlap(t)
		last := h.last()
		for i := range keys {
			key := fmt.Sprintf("k%03d", i)
			want := 2
			if i%3 == 0 {
				want = 3
			}
			if key == "k001" {
				want = -1
			}
			require.Contains(t, last, key)
			assert.Equal(t, want, last[key].val, "key %s's last reconcile saw its last change", key)
			assert.NotEqual(t, "a", last[key].replica, "key %s: the replica that left reconciles nothing after", key)
		}
		seen := map[string]bool{}
		for _, c := range last {
			seen[c.replica] = true
		}
		if !assert.True(t, seen["b"] && seen["c"], "both remaining replicas reconcile: %v", seen) {
			for i := range 5 {
				key := fmt.Sprintf("k%03d", i)
				t.Logf("%s in shard %d; b holds it: %v", key, shard.Of(reconcile.KeyHash(key), 256), rs[1].member.Owns(reconcile.KeyHash(key)))
				h.dump(t, key)
			}
		}
	})
}

func TestShardedLoop_CutOffReplicaNeverOverlapsItsSuccessor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := memsource.New(itemKey, memsource.Options{})
		b := shard.NewMemory(shard.MemoryOptions{})
		var h history
		const keys = 100
		for i := range keys {
			_, err := src.Put(item{Name: fmt.Sprintf("k%03d", i), Val: 1})
			require.NoError(t, err)
		}
		// Work longer than the lease: a cut-off owner is mid-call when it
		// must stop.
		a := startReplica(t, "a", src, b, &h, 5*time.Second)
		startReplica(t, "b", src, b, &h, 5*time.Second)
		time.Sleep(4 * time.Second)
		b.Cut(a.member.ID(), true)
		for i := range keys {
			_, err := src.Put(item{Name: fmt.Sprintf("k%03d", i), Val: 2})
			require.NoError(t, err)
		}
		time.Sleep(5 * time.Minute) // 100 keys of 5 s on 4 workers
		synctest.Wait()
		h.requireNoOverlap(t)
		for key, c := range h.last() {
			if !assert.Equal(t, 2, c.val, "key %s", key) {
				h.dump(t, key)
			}
			assert.Equal(t, "b", c.replica, "key %s", key)
		}
	})
}

func (h *history) dump(t *testing.T, key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.calls {
		if c.key == key {
			t.Logf("%s %s val=%d %v..%v tok=%v", c.key, c.replica, c.val, c.start.Format("04:05.000"), c.end.Format("04:05.000"), c.token)
		}
	}
}
