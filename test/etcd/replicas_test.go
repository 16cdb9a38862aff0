package etcd

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/listwatch/mirror/shard"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// replicaProc is a replica (see replica_child_test.go) running in a child
// process.
type replicaProc struct {
	name   string
	cfg    replicaConfig
	proxy  *proxy // between the replica and etcd, nil if none
	cmd    *exec.Cmd
	stdin  io.Closer
	stderr *lockedBuffer
	exited chan struct{}
	err    error // cmd.Wait's, once exited is closed
}

// startReplicaProc starts a replica with cfg, History set to a file of
// dir named after it; with viaProxy, it reaches etcd through a proxy the
// test controls. It is killed when the test ends if it still runs.
func startReplicaProc(t testing.TB, cfg replicaConfig, dir string, viaProxy bool) *replicaProc {
	t.Helper()
	r := &replicaProc{name: cfg.Name, stderr: &lockedBuffer{}, exited: make(chan struct{})}
	if viaProxy {
		r.proxy = newProxy(t, strings.TrimPrefix(cfg.Endpoint, "http://"))
		cfg.Endpoint = r.proxy.endpoint()
	}
	cfg.History = filepath.Join(dir, cfg.Name+".jsonl")
	r.cfg = cfg
	raw, err := json.Marshal(cfg)
	require.NoError(t, err)
	exe, err := os.Executable()
	require.NoError(t, err)
	r.cmd = exec.Command(exe, "-test.run=^$")
	r.cmd.Env = append(os.Environ(), replicaEnv+"="+string(raw))
	r.cmd.Stderr = r.stderr
	stdin, err := r.cmd.StdinPipe()
	require.NoError(t, err)
	r.stdin = stdin
	require.NoError(t, r.cmd.Start())
	go func() {
		r.err = r.cmd.Wait()
		close(r.exited)
	}()
	t.Cleanup(func() {
		_ = r.cmd.Process.Signal(syscall.SIGCONT)
		_ = r.cmd.Process.Kill()
		_ = r.stdin.Close()
		<-r.exited
	})
	return r
}

// kill ends the replica with SIGKILL, as a crash does: its lease is left
// to end at etcd.
func (r *replicaProc) kill(t testing.TB) {
	t.Helper()
	require.NoError(t, r.cmd.Process.Kill())
	<-r.exited
}

// leave ends the replica with SIGTERM, a graceful leave, and requires a
// clean exit.
func (r *replicaProc) leave(t testing.TB) {
	t.Helper()
	require.NoError(t, r.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-r.exited:
	case <-time.After(procStopTimeout):
		t.Fatalf("replica %s: still running %v after SIGTERM; stderr:\n%s", r.name, procStopTimeout, r.stderr)
	}
	require.NoError(t, r.err, "replica %s: stderr:\n%s", r.name, r.stderr)
}

// freeze stops the replica's process (SIGSTOP) and returns once every
// thread of it is stopped; thaw continues it (SIGCONT).
func (r *replicaProc) freeze(t testing.TB) {
	t.Helper()
	require.NoError(t, r.cmd.Process.Signal(syscall.SIGSTOP))
	require.NoError(t, waitStopped(r.cmd.Process.Pid, true))
}

func (r *replicaProc) thaw(t testing.TB) {
	t.Helper()
	require.NoError(t, r.cmd.Process.Signal(syscall.SIGCONT))
	require.NoError(t, waitStopped(r.cmd.Process.Pid, false))
}

// replicaOf returns the name of the replica whose member ID is id: the ID
// without its random suffix.
func replicaOf(id string) string {
	if i := strings.LastIndexByte(id, '-'); i > 0 {
		return id[:i]
	}
	return id
}

// owners returns the replica that holds each shard, as etcd's claims
// under root's group say.
func owners(t testing.TB, c *clientv3.Client, root string) map[int]string {
	t.Helper()
	resp, err := c.Get(context.Background(), root+"group/shards/", clientv3.WithPrefix())
	require.NoError(t, err)
	out := map[int]string{}
	for _, kv := range resp.Kvs {
		var s int
		if _, err := fmt.Sscanf(strings.TrimPrefix(string(kv.Key), root+"group/shards/"), "%05d", &s); err == nil {
			out[s] = replicaOf(string(kv.Value))
		}
	}
	return out
}

// shardsHeldBy returns, in order, the shards own gives replica name.
func shardsHeldBy(own map[int]string, name string) []int {
	var out []int
	for s, n := range own {
		if n == name {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

// awaitSplit waits until every shard is claimed, by the replicas names
// and no other, as shard.Assign gives the shards to the members whose
// records etcd holds (the split has settled), and returns the claims.
func awaitSplit(t testing.TB, c *clientv3.Client, root string, shards int, names ...string) map[int]string {
	t.Helper()
	var own map[int]string
	want := slices.Sorted(slices.Values(names))
	require.Eventually(t, func() bool {
		resp, err := c.Get(context.Background(), root+"group/", clientv3.WithPrefix())
		require.NoError(t, err)
		var members []string
		claims := map[int]string{}
		for _, kv := range resp.Kvs {
			rest := strings.TrimPrefix(string(kv.Key), root+"group/")
			var s int
			if id, ok := strings.CutPrefix(rest, "members/"); ok {
				members = append(members, id)
			} else if _, err := fmt.Sscanf(rest, "shards/%05d", &s); err == nil {
				claims[s] = string(kv.Value)
			}
		}
		own = map[int]string{}
		held := map[string]bool{}
		for s, id := range claims {
			own[s] = replicaOf(id)
			held[own[s]] = true
		}
		target := shard.Assign(members, shards)
		for s := range shards {
			if len(target) != shards || claims[s] != target[s] {
				return false
			}
		}
		return slices.Equal(slices.Sorted(maps.Keys(held)), want)
	}, convergeTimeout, 20*time.Millisecond, "the shards never split among %v; claims by replica: %v", names, countByReplica(own))
	return own
}

// countByReplica counts the shards each replica holds.
func countByReplica(own map[int]string) map[string]int {
	out := map[string]int{}
	for _, n := range own {
		out[n]++
	}
	return out
}

// prefixValues returns the keys under prefix, without it, and their
// values.
func prefixValues(t testing.TB, c *clientv3.Client, prefix string) map[string]string {
	t.Helper()
	resp, err := c.Get(context.Background(), prefix, clientv3.WithPrefix())
	require.NoError(t, err)
	out := make(map[string]string, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		out[strings.TrimPrefix(string(kv.Key), prefix)] = string(kv.Value)
	}
	return out
}

// awaitConverged waits until the status the replicas wrote under root
// matches every key: the same value, or absent for a key that is gone.
// It returns the keys' values.
func awaitConverged(t testing.TB, c *clientv3.Client, root string) map[string]string {
	t.Helper()
	var keys, status map[string]string
	require.Eventually(t, func() bool {
		keys, status = prefixValues(t, c, root+"keys/"), prefixValues(t, c, root+"status/")
		return maps.Equal(keys, status)
	}, convergeTimeout, 50*time.Millisecond, "the status never matched the keys: %d keys, %d statuses, %d differ",
		len(keys), len(status), differing(keys, status))
	return keys
}

func differing(a, b map[string]string) int {
	n := 0
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			n++
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			n++
		}
	}
	return n
}

// writer changes random keys under root+"keys/" until stopped.
type writer struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error
	writes int
}

// startWriter puts a new value in one of keys every period.
func startWriter(c *clientv3.Client, root string, keys []string, period time.Duration) *writer {
	ctx, cancel := context.WithCancel(context.Background())
	w := &writer{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(period) // the load's pace, not a synchronisation
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			k := keys[rand.IntN(len(keys))]
			if _, err := c.Put(ctx, root+"keys/"+k, fmt.Sprintf("w%d", w.writes)); err != nil {
				if ctx.Err() == nil {
					w.err = err
				}
				return
			}
			w.writes++
		}
	}()
	return w
}

func (w *writer) stop(t testing.TB) {
	t.Helper()
	w.cancel()
	<-w.done
	require.NoError(t, w.err)
}

// historyLines counts the whole lines of a history file so far.
func historyLines(path string) int {
	b, _ := os.ReadFile(path)
	return strings.Count(string(b), "\n")
}

// faultRoot is the prefix the fault test's group, keys and statuses live
// under.
const faultRoot = "/replicas/"

// TestReplicas_FaultsKeepReconcilesApartAndConverge runs a sharded
// controller as separate processes on an etcd of its own process, with a
// writer changing keys throughout, and meets the faults a fleet meets: a
// replica killed (kill -9) and another started, a replica frozen
// (SIGSTOP) for longer than the lease, a replica cut from etcd by its TCP
// proxy, and a graceful leave (SIGTERM) and join. From the replicas'
// histories it then checks that no two replicas reconciled one key at
// once (but for a frozen replica's call, whose late writes etcd must
// refuse), that no replica started work on a shard after its successor
// had, and that every key's last change was reconciled by the final owner
// of its shard. The takeover times are logged, not asserted.
func TestReplicas_FaultsKeepReconcilesApartAndConverge(t *testing.T) {
	if testing.Short() {
		t.Skip("a fault run of about a minute, with five replica processes")
	}
	e := startEtcdProc(t)
	c := newClient(t, e.Endpoint())
	ctx := context.Background()
	const n = 1000
	var names []string
	for i := range n {
		names = append(names, fmt.Sprintf("k%04d", i))
	}
	var ops []clientv3.Op
	for _, k := range names {
		ops = append(ops, clientv3.OpPut(faultRoot+"keys/"+k, "v0"))
	}
	for i := 0; i < len(ops); i += 500 {
		_, err := c.Txn(ctx).Then(ops[i:min(i+500, len(ops))]...).Commit()
		require.NoError(t, err)
	}

	dir := t.TempDir()
	cfg := func(name string) replicaConfig {
		return replicaConfig{
			Name: name, Endpoint: e.Endpoint(), Root: faultRoot,
			TTL: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 500 * time.Millisecond,
			Work: 5 * time.Millisecond, Workers: 4,
		}
	}
	reps := map[string]*replicaProc{}
	start := func(name string) {
		reps[name] = startReplicaProc(t, cfg(name), dir, true)
	}
	var faults faultLog
	defer func() {
		if t.Failed() {
			for _, r := range reps {
				t.Logf("replica %s stderr:\n%s", r.name, clip(r.stderr.String(), 4000))
			}
		}
	}()
	for _, name := range []string{"r1", "r2", "r3"} {
		start(name)
	}
	own := awaitSplit(t, c, faultRoot, shard.DefaultShards, "r1", "r2", "r3")
	t.Logf("3 replicas: shards %v", countByReplica(own))
	awaitConverged(t, c, faultRoot)

	// A writer changes keys throughout; every 20th key is deleted first,
	// and stays deleted.
	var live []string
	for i, k := range names {
		if i%20 == 0 {
			_, err := c.Delete(ctx, faultRoot+"keys/"+k)
			require.NoError(t, err)
			continue
		}
		live = append(live, k)
	}
	busy := busyShards(live, faultRoot+"keys/", shard.DefaultShards)
	w := startWriter(c, faultRoot, live, 4*time.Millisecond)
	defer w.cancel()

	// kill -9 of r1, then r4 joins.
	killed := shardsHeldBy(owners(t, c, faultRoot), "r1")
	faults.kills = append(faults.kills, fault{replica: "r1", at: time.Now().UnixNano(), shards: killed})
	reps["r1"].kill(t)
	awaitSplit(t, c, faultRoot, shard.DefaultShards, "r2", "r3")
	awaitTakeover(t, faults.kills[0], reps, busy)
	start("r4")
	awaitSplit(t, c, faultRoot, shard.DefaultShards, "r2", "r3", "r4")

	// r2 frozen for longer than its lease, while busy: a burst of
	// changes to every key, and the freeze once r2 is working through
	// its share.
	var burst []clientv3.Op
	for _, k := range live {
		burst = append(burst, clientv3.OpPut(faultRoot+"keys/"+k, "burst"))
	}
	base := historyLines(reps["r2"].cfg.History)
	_, err := c.Txn(ctx).Then(burst...).Commit()
	require.NoError(t, err)
	require.Eventually(t, func() bool { return historyLines(reps["r2"].cfg.History) >= base+20 }, convergeTimeout, time.Millisecond)
	fr := fault{replica: "r2", at: time.Now().UnixNano()}
	reps["r2"].freeze(t)
	awaitSplit(t, c, faultRoot, shard.DefaultShards, "r3", "r4")
	reps["r2"].thaw(t)
	fr.until = time.Now().UnixNano()
	faults.freezes = append(faults.freezes, fr)
	awaitSplit(t, c, faultRoot, shard.DefaultShards, "r2", "r3", "r4")

	// r3 cut from etcd by its proxy until its shards are taken.
	reps["r3"].proxy.Cut()
	awaitSplit(t, c, faultRoot, shard.DefaultShards, "r2", "r4")
	reps["r3"].proxy.Resume()
	awaitSplit(t, c, faultRoot, shard.DefaultShards, "r2", "r3", "r4")

	// r4 leaves gracefully, then r5 joins.
	leaving := shardsHeldBy(owners(t, c, faultRoot), "r4")
	faults.leaves = append(faults.leaves, fault{replica: "r4", at: time.Now().UnixNano(), shards: leaving})
	reps["r4"].leave(t)
	awaitSplit(t, c, faultRoot, shard.DefaultShards, "r2", "r3")
	awaitTakeover(t, faults.leaves[0], reps, busy)
	start("r5")
	final := awaitSplit(t, c, faultRoot, shard.DefaultShards, "r2", "r3", "r5")

	w.stop(t)
	keys := awaitConverged(t, c, faultRoot)
	// The final owners reconcile the keys of the shards they gained last
	// at background priority: wait for that.
	var end int64
	var late []string
	require.Eventually(t, func() bool {
		end = time.Now().UnixNano()
		late = newCallHistory(readAll(t, reps), shard.DefaultShards).unconverged(keys, final, names, faultRoot+"keys/", end)
		return len(late) == 0
	}, convergeTimeout, 100*time.Millisecond, "a key's last change was never reconciled by its final owner: %v", late)
	for _, name := range []string{"r2", "r3", "r5"} {
		reps[name].leave(t)
	}
	var paths []string
	for _, r := range reps {
		paths = append(paths, r.cfg.History)
	}
	calls := readHistories(t, paths...)
	t.Logf("%d calls, %d writes by the writer", len(calls), w.writes)

	h := newCallHistory(calls, shard.DefaultShards)
	require.Empty(t, h.overlaps(faults.freezes), "two replicas reconciled one key at once")
	require.Empty(t, h.staleStarts(faults.freezes), "a replica started work on a shard after its successor had")
	require.Empty(t, h.unconverged(keys, final, names, faultRoot+"keys/", end), "a key's last change was not reconciled by its final owner")
	for _, f := range faults.freezes {
		t.Logf("frozen %s: %s", f.replica, h.frozenCalls(f))
	}
	for _, f := range faults.kills {
		took, missing := h.takeover(f, busy)
		require.Zero(t, missing, "shards of the killed replica %s never reconciled by another", f.replica)
		t.Logf("kill -9 of %s (%d shards, TTL 3s): all reconciled by others %v after the kill", f.replica, len(f.shards), took.Round(time.Millisecond))
	}
	for _, f := range faults.leaves {
		took, missing := h.takeover(f, busy)
		require.Zero(t, missing, "shards of %s, which left, never reconciled by another", f.replica)
		t.Logf("graceful leave of %s (%d shards): all reconciled by others %v after SIGTERM", f.replica, len(f.shards), took.Round(time.Millisecond))
	}
}

// awaitTakeover waits until every shard with keys (busy) that f's
// replica held has been reconciled by another replica since f, as the
// replicas' histories say.
func awaitTakeover(t testing.TB, f fault, reps map[string]*replicaProc, busy map[int]bool) {
	t.Helper()
	var missing int
	require.Eventually(t, func() bool {
		var paths []string
		for _, r := range reps {
			paths = append(paths, r.cfg.History)
		}
		_, missing = newCallHistory(readHistories(t, paths...), shard.DefaultShards).takeover(f, busy)
		return missing == 0
	}, convergeTimeout, 50*time.Millisecond, "%d shards of %s never reconciled by another", missing, f.replica)
}

// clip cuts s to its last n bytes.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
