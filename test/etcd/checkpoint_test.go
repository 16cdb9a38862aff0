package etcd

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/listwatch/mirror"
	etcdmirror "github.com/listwatch/mirror/adapters/etcd"
	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// cpMirror is an informer from etcdmirror.NewInformer, over a ListWatcher
// of its own, that keeps a checkpoint, with two handlers registered
// before Run: replay, handed the checkpoint's objects first, and changes,
// with HandlerOptions.ChangesOnly.
type cpMirror struct {
	lw              *etcdmirror.ListWatcher[[]byte]
	inf             *etcdInformer[[]byte]
	replay, changes *callLog[[]byte]
	errs            *errorLog
	cancel          context.CancelFunc
	done            chan error
}

// startCPMirror runs a cpMirror of prefix through c with its checkpoint
// at path, written when it stops, until stop or the end of the test.
func startCPMirror(t *testing.T, c *clientv3.Client, prefix, path string) *cpMirror {
	t.Helper()
	return startCPMirrorEvery(t, c, prefix, path, 0)
}

// startCPMirrorEvery is startCPMirror with a checkpoint written every
// interval too.
func startCPMirrorEvery(t *testing.T, c *clientv3.Client, prefix, path string, interval time.Duration) *cpMirror {
	t.Helper()
	m := &cpMirror{
		lw:      etcdmirror.New(c, prefix, fastOptions),
		replay:  &callLog[[]byte]{},
		changes: &callLog[[]byte]{},
		errs:    &errorLog{},
		done:    make(chan error, 1),
	}
	m.inf = etcdmirror.NewInformer(m.lw, etcdmirror.InformerOptions[[]byte]{
		ErrorHandler: m.errs.add,
		ListWatch:    mirror.ListWatchOptions{InitialBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond},
		Checkpoint:   mirror.CheckpointOptions[etcdmirror.KV]{Path: path, Interval: interval},
	})
	_, err := m.inf.AddEventHandler(m.replay, mirror.HandlerOptions{})
	require.NoError(t, err)
	_, err = m.inf.AddEventHandler(m.changes, mirror.HandlerOptions{ChangesOnly: true})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	go func() { m.done <- m.inf.Run(ctx) }()
	t.Cleanup(m.stop)
	return m
}

// stop ends the informer, which writes its checkpoint, and waits until
// Run has returned. Later calls do nothing.
func (m *cpMirror) stop() {
	if m.cancel == nil {
		return
	}
	m.cancel()
	m.cancel = nil
	if err := <-m.done; err != nil {
		panic(err) // Run returns no error; a test reading this would be wrong
	}
}

// awaitCurrent waits until m's informer has reached etcd's current
// revision, and its cache and its replaying handler's view both equal a
// linearizable read of prefix, which it returns.
func (m *cpMirror) awaitCurrent(t *testing.T, c *clientv3.Client, prefix string) map[string]etcdmirror.KV {
	t.Helper()
	want, rev := getKVs(t, c, prefix)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.GreaterOrEqual(c, informerRev(m.inf), rev, "informer reaches revision %d", rev)
		assert.Equal(c, want, cacheObjects(m.inf), "cache equals etcd at revision %d", rev)
		assert.Equal(c, want, m.replay.view(), "the replaying handler's view equals etcd at revision %d", rev)
	}, convergeTimeout, 10*time.Millisecond)
	return want
}

// downtime is what happens to a prefix of cpKeys keys while no mirror
// runs, and what each kind of restart must tell a changes-only handler.
type downtime struct {
	// watched are the calls a mirror that watches from its checkpoint's
	// revision makes, by key: every change, in order.
	watched map[string][]call[[]byte]
	// relisted are the calls a mirror that must relist makes: the
	// difference between its checkpoint and the list.
	relisted map[string][]call[[]byte]
}

const cpKeys = 20

// changeWhileDown changes the prefix, which held before when the mirror
// stopped: it updates keys 1 and 2 (2 twice), deletes 3 and 4, deletes and
// creates again 5 and 6 (a new CreateRevision), creates two keys and
// creates and deletes a third, and leaves the others, among them one
// attached to a lease, as they were.
func changeWhileDown(t *testing.T, c *clientv3.Client, prefix string, before map[string]etcdmirror.KV) downtime {
	t.Helper()
	ctx := context.Background()
	d := downtime{watched: map[string][]call[[]byte]{}, relisted: map[string][]call[[]byte]{}}
	put := func(key, value string) etcdmirror.KV {
		t.Helper()
		resp, err := c.Put(ctx, key, value)
		require.NoError(t, err)
		kvs, _ := getKVs(t, c, key)
		got := kvs[key]
		require.Equal(t, resp.Header.Revision, got.ModRevision)
		return got
	}
	del := func(key string) {
		t.Helper()
		_, err := c.Delete(ctx, key)
		require.NoError(t, err)
	}
	watched := func(key string, calls ...call[[]byte]) { d.watched[key] = append(d.watched[key], calls...) }
	relisted := func(key string, calls ...call[[]byte]) { d.relisted[key] = append(d.relisted[key], calls...) }

	for _, i := range []int{1, 2} {
		k := nthKey(prefix, i)
		old := before[k]
		if i == 2 {
			mid := put(k, "changed once")
			watched(k, call[[]byte]{kind: callUpdate, old: old, obj: mid})
			old = mid
		}
		now := put(k, "changed")
		watched(k, call[[]byte]{kind: callUpdate, old: old, obj: now})
		relisted(k, call[[]byte]{kind: callUpdate, old: before[k], obj: now})
	}
	for _, i := range []int{3, 4} {
		k := nthKey(prefix, i)
		del(k)
		watched(k, call[[]byte]{kind: callDelete, obj: before[k]})
		relisted(k, call[[]byte]{kind: callDelete, obj: before[k], unknown: true})
	}
	for _, i := range []int{5, 6} {
		k := nthKey(prefix, i)
		del(k)
		again := put(k, "again")
		require.NotEqual(t, before[k].CreateRevision, again.CreateRevision)
		watched(k, call[[]byte]{kind: callDelete, obj: before[k]}, call[[]byte]{kind: callAdd, obj: again})
		relisted(k, call[[]byte]{kind: callDelete, obj: before[k], unknown: true}, call[[]byte]{kind: callAdd, obj: again})
	}
	for _, name := range []string{"new-a", "new-b"} {
		k := prefix + name
		o := put(k, "new")
		watched(k, call[[]byte]{kind: callAdd, obj: o})
		relisted(k, call[[]byte]{kind: callAdd, obj: o})
	}
	// Created and gone again: a watch sees both; a relist, nothing.
	k := prefix + "short-lived"
	o := put(k, "x")
	del(k)
	watched(k, call[[]byte]{kind: callAdd, obj: o}, call[[]byte]{kind: callDelete, obj: o})
	return d
}

// putWithLease puts key attached to a new lease that outlives the test.
func putWithLease(t *testing.T, c *clientv3.Client, key string) {
	t.Helper()
	lease, err := c.Grant(context.Background(), 3600)
	require.NoError(t, err)
	_, err = c.Put(context.Background(), key, "leased", clientv3.WithLease(lease.ID))
	require.NoError(t, err)
}

// A mirror restarted from its checkpoint tells a changes-only handler
// exactly what changed while it was down, and a replaying handler the
// checkpoint's objects then the same changes, its cache equals etcd, and
// it asks etcd for no list; if etcd compacted the checkpoint's revision
// meanwhile, for exactly one, and then each key that left (re-created
// ones too) is one unknown-state delete, and an unchanged key nothing.
func TestCheckpoint_RestartTellsHandlersExactlyTheChangesMadeWhileDown(t *testing.T) {
	for _, compacted := range []bool{false, true} {
		for _, q := range informerQueues {
			t.Run(fmt.Sprintf("compacted=%t/%s", compacted, q.name), func(t *testing.T) {
				m := startEtcd(t)
				c := newClient(t, m.endpoint())
				const prefix = "/cp/"
				path := filepath.Join(t.TempDir(), "checkpoint")
				putN(t, c, prefix, cpKeys)
				putWithLease(t, c, prefix+"leased")

				first := startCPMirror(t, c, prefix, path)
				before := first.awaitCurrent(t, c, prefix)
				first.stop()
				assert.Equal(t, etcdmirror.Stats{Lists: 1, ListRequests: 2, ListKeys: cpKeys + 1,
					ListBytes: listBytes(before), Watches: first.lw.Stats().Watches}, first.lw.Stats(),
					"the first start lists once: the revision, then one stream")
				assert.Empty(t, first.errs.all(), "no checkpoint yet: a first start, not a failure")
				_, err := os.Stat(path)
				require.NoError(t, err, "a checkpoint written on stop")

				d := changeWhileDown(t, c, prefix, before)
				want := d.watched
				if compacted {
					_, err := c.Compact(context.Background(), currentRev(t, c), clientv3.WithCompactPhysical())
					require.NoError(t, err)
					want = d.relisted
				}

				second := startCPMirror(t, c, prefix, path)
				after := second.awaitCurrent(t, c, prefix)
				// If the informer learns of the compaction before its
				// load looks for a list (a race with etcd's answer), the
				// load stops and the list fills the cache as a first
				// list does: a replaying handler is handed the listed
				// state, not the checkpoint's objects then the changes.
				listedFirst := func(replayed []call[[]byte]) bool {
					if !compacted || len(replayed) != len(after) {
						return false
					}
					listed := map[string]etcdmirror.KV{}
					for _, c := range replayed {
						if c.kind != callAdd {
							return false
						}
						listed[c.obj.Key] = c.obj
					}
					return assert.ObjectsAreEqual(after, listed)
				}
				// The handlers are told after the cache changes, each at
				// its pace, and a stop drops what they were not told yet;
				// the replaying handler's view may be current before its
				// last calls (a key created and deleted).
				require.EventuallyWithT(t, func(c *assert.CollectT) {
					assert.Equal(c, want, byKey(second.changes.all()))
					if replayed := second.replay.all(); !listedFirst(replayed) && assert.GreaterOrEqual(c, len(replayed), len(before)) {
						assert.Equal(c, want, byKey(replayed[len(before):]))
					}
				}, convergeTimeout, 10*time.Millisecond)
				second.stop()

				stats := second.lw.Stats()
				assert.Positive(t, stats.Watches)
				if compacted {
					assert.Equal(t, int64(1), stats.Lists, "one relist, for the compacted revision")
					assert.Equal(t, int64(len(after)), stats.ListKeys)
					assert.True(t, second.errs.has(source.ErrExpired), "the watch from the checkpoint's revision")
				} else {
					assert.Zero(t, stats.Lists, "no list while etcd has the checkpoint's revision")
					assert.Zero(t, stats.ListRequests)
					assert.Empty(t, second.errs.all())
				}
				for _, err := range second.errs.all() {
					var ce *mirror.CheckpointError
					assert.NotErrorAs(t, err, &ce, "the checkpoint loaded")
				}

				assert.Equal(t, want, byKey(second.changes.all()), "the changes-only handler: exactly the changes")
				replayed := second.replay.all()
				if listedFirst(replayed) {
					return
				}
				require.GreaterOrEqual(t, len(replayed), len(before))
				initial := map[string]etcdmirror.KV{}
				for _, c := range replayed[:len(before)] {
					assert.Equal(t, callAdd, c.kind)
					initial[c.obj.Key] = c.obj
				}
				assert.Equal(t, before, initial, "the replaying handler: the checkpoint's objects first")
				assert.Equal(t, want, byKey(replayed[len(before):]), "then the same changes")
			})
		}
	}
}

// listBytes is what listing kvs reads: their keys and values.
func listBytes(kvs map[string]etcdmirror.KV) int64 {
	var n int64
	for k, o := range kvs {
		n += int64(len(k) + len(o.Value))
	}
	return n
}

// A checkpoint that cannot be used (truncated, corrupt, of a newer
// format, of another prefix) is reported as a
// *mirror.CheckpointError, and the mirror lists etcd once and is correct;
// what it writes when it stops is used by the next start.
func TestCheckpoint_UnusableFileIsReportedAndEtcdListedOnce(t *testing.T) {
	const prefix = "/cpbad/"
	spoil := map[string]func(t *testing.T, c *clientv3.Client, path string){
		"truncated": func(t *testing.T, _ *clientv3.Client, path string) {
			editFile(t, path, func(b []byte) []byte { return b[:len(b)-len(b)/3] })
		},
		"corrupt": func(t *testing.T, _ *clientv3.Client, path string) {
			editFile(t, path, func(b []byte) []byte { b[len(b)/2] ^= 0x01; return b })
		},
		"newer format": func(t *testing.T, _ *clientv3.Client, path string) {
			// The format follows the 8-byte magic, little-endian.
			editFile(t, path, func(b []byte) []byte { b[8]++; return b })
		},
		"another prefix": func(t *testing.T, c *clientv3.Client, path string) {
			putN(t, c, "/other/", 3)
			other := startCPMirror(t, c, "/other/", path)
			other.awaitCurrent(t, c, "/other/")
			other.stop()
		},
	}
	for name, spoil := range spoil {
		for _, q := range informerQueues {
			t.Run(name+"/"+q.name, func(t *testing.T) {
				m := startEtcd(t)
				c := newClient(t, m.endpoint())
				path := filepath.Join(t.TempDir(), "checkpoint")
				putN(t, c, prefix, cpKeys)
				first := startCPMirror(t, c, prefix, path)
				before := first.awaitCurrent(t, c, prefix)
				first.stop()

				spoil(t, c, path)
				changeWhileDown(t, c, prefix, before)

				second := startCPMirror(t, c, prefix, path)
				after := second.awaitCurrent(t, c, prefix)
				require.EventuallyWithT(t, func(c *assert.CollectT) {
					assert.Equal(c, after, second.changes.view(), "the changes-only handler, told after the cache")
				}, convergeTimeout, 10*time.Millisecond)
				second.stop()
				var ce *mirror.CheckpointError
				require.Len(t, second.errs.all(), 1)
				require.ErrorAs(t, second.errs.all()[0], &ce)
				assert.Equal(t, "load", ce.Op)
				assert.Equal(t, path, ce.Path)
				assert.ErrorIs(t, ce, mirror.ErrCheckpointInvalid)
				assert.Equal(t, int64(1), second.lw.Stats().Lists, "one full list")
				assert.Equal(t, after, second.changes.view(), "nothing to resume from: the changes-only handler is given the list")
				for _, c := range second.changes.all() {
					assert.Equal(t, callAdd, c.kind)
				}

				// What the second wrote when it stopped is sound.
				third := startCPMirror(t, c, prefix, path)
				third.awaitCurrent(t, c, prefix)
				third.stop()
				assert.Empty(t, third.errs.all())
				assert.Zero(t, third.lw.Stats().Lists)
				assert.Empty(t, third.changes.all())
			})
		}
	}
}

// editFile replaces the content of path with what edit makes of it.
func editFile(t *testing.T, path string, edit func([]byte) []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, edit(b), 0o600))
}
