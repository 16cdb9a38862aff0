package etcd

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/listwatch/mirror/shard"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
)

var (
	replicasFlag = flag.Bool("replicas", false,
		"run the replicas measurement (TestReplicas_Measure) for bench/SHARDING.md")
	replicasKeys = flag.Int("replicas.keys", 100_000, "replicas measurement: keys of the scale runs")
	replicasTTLs = flag.String("replicas.ttls", "5s,15s", "replicas measurement: lease TTLs of the takeover runs")
)

// TestReplicas_Measure measures what bench/SHARDING.md reports of
// replicas as separate processes on an etcd of its own process: the
// balance of shard.Assign, the scale of 1, 2 and 4 replicas reconciling
// keys with a Reconcile that waits 2 ms, and, at each lease TTL, the
// takeover after kill -9, a graceful leave's hand-over, a join's moved
// share and the requests of idle members. Figures are logged; nothing is
// asserted of them.
//
//	go test -run 'TestReplicas_Measure$' -replicas -v -timeout 30m ./test/etcd/
func TestReplicas_Measure(t *testing.T) {
	if !*replicasFlag {
		t.Skip("a measurement of several minutes: run with -replicas -v")
	}
	measureAssign(t)
	e := startEtcdProc(t)
	c := newClient(t, e.Endpoint())
	measureScale(t, e.Endpoint(), c, *replicasKeys)
	for _, s := range strings.Split(*replicasTTLs, ",") {
		ttl, err := time.ParseDuration(s)
		require.NoError(t, err)
		measureTakeover(t, e.Endpoint(), c, ttl)
	}
}

// measureAssign logs the balance of shard.Assign over random member IDs,
// and the share of shards a join moves.
func measureAssign(t *testing.T) {
	const trials = 200
	id := func() string { return fmt.Sprintf("replica-%08x", rand.Uint32()) }
	t.Logf("shard.Assign, %d shards, %d random groups per size:", shard.DefaultShards, trials)
	t.Logf("%-7s %-22s %-26s", "members", "most/fewest mean (max)", "join moves, × 1/(N+1): mean (max)")
	for n := 2; n <= 8; n++ {
		var ratioSum, ratioMax, moveSum, moveMax float64
		for range trials {
			var ids []string
			for range n {
				ids = append(ids, id())
			}
			own := shard.Assign(ids, shard.DefaultShards)
			counts := map[string]int{}
			for _, o := range own {
				counts[o]++
			}
			most, fewest := 0, shard.DefaultShards
			for _, m := range ids {
				most, fewest = max(most, counts[m]), min(fewest, counts[m])
			}
			r := float64(most) / float64(fewest)
			ratioSum, ratioMax = ratioSum+r, max(ratioMax, r)
			joined := shard.Assign(append(ids, id()), shard.DefaultShards)
			moved := 0
			for s := range own {
				if own[s] != joined[s] {
					moved++
				}
			}
			share := float64(moved) / float64(shard.DefaultShards) * float64(n+1)
			moveSum, moveMax = moveSum+share, max(moveMax, share)
		}
		t.Logf("%-7d %.3f (%.3f)          %.3f (%.3f)", n, ratioSum/trials, ratioMax, moveSum/trials, moveMax)
	}
}

// measureScale logs the rate at which 1, 2 and 4 replicas reconcile n
// keys, with a Reconcile that waits 2 ms and writes nothing, 4 workers
// each. The replicas start gated: once they split the shards and hold
// every key queued, the gate key opens and the clock starts.
func measureScale(t *testing.T, endpoint string, c *clientv3.Client, n int) {
	ctx := context.Background()
	var base float64
	for _, replicas := range []int{1, 2, 4} {
		root := fmt.Sprintf("/scale%d/", replicas)
		seedKeys(t, c, root+"keys/", n)
		dir := t.TempDir()
		var names []string
		var reps []*replicaProc
		for i := range replicas {
			name := fmt.Sprintf("s%d", i+1)
			names = append(names, name)
			reps = append(reps, startReplicaProc(t, replicaConfig{
				Name: name, Endpoint: endpoint, Root: root, TTL: 5 * time.Second,
				Work: 2 * time.Millisecond, Workers: 4, NoWrite: true, Gate: root + "go",
			}, dir, false))
		}
		own := awaitSplit(t, c, root, shard.DefaultShards, names...)
		_, err := c.Put(ctx, root+"go", "")
		require.NoError(t, err)
		opened := time.Now()
		require.Eventually(t, func() bool {
			lines := 0
			for _, r := range reps {
				lines += historyLines(r.cfg.History)
			}
			return lines >= n
		}, 10*time.Minute, 100*time.Millisecond)
		var paths []string
		for _, r := range reps {
			paths = append(paths, r.cfg.History)
		}
		calls := readHistories(t, paths...)
		keys, last := map[string]bool{}, int64(0)
		perReplica := map[string]int{}
		for _, cl := range calls {
			keys[cl.Key] = true
			last = max(last, cl.End)
			perReplica[cl.Replica]++
		}
		took := time.Duration(last - opened.UnixNano())
		rate := float64(len(keys)) / took.Seconds()
		if replicas == 1 {
			base = rate
		}
		t.Logf("scale: %d replicas, %d keys (%d calls) in %v: %.0f keys/s, %.2f × one replica (target ≥ %.1f); shards %v, calls %v",
			replicas, len(keys), len(calls), took.Round(time.Millisecond), rate, rate/base, 0.9*float64(replicas), countByReplica(own), perReplica)
		for _, r := range reps {
			r.leave(t)
		}
		_, err = c.Delete(ctx, root, clientv3.WithPrefix())
		require.NoError(t, err)
	}
}

// seedKeys puts n keys under prefix, in transactions of 1000.
func seedKeys(t *testing.T, c *clientv3.Client, prefix string, n int) {
	ops := make([]clientv3.Op, 0, 1000)
	for i := 0; i < n; i++ {
		ops = append(ops, clientv3.OpPut(fmt.Sprintf("%sk%06d", prefix, i), "v0"))
		if len(ops) == cap(ops) || i == n-1 {
			_, err := c.Txn(context.Background()).Then(ops...).Commit()
			require.NoError(t, err)
			ops = ops[:0]
		}
	}
}

// measureTakeover logs, with leases of ttl and the other timings at
// their defaults: the requests idle members send etcd, a join's moved
// share, the takeover of a killed replica's shards (twice) and the
// hand-over of a replica that leaves gracefully.
func measureTakeover(t *testing.T, endpoint string, c *clientv3.Client, ttl time.Duration) {
	root := fmt.Sprintf("/takeover%v/", ttl)
	const n = 1000
	seedKeys(t, c, root+"keys/", n)
	var keyNames []string
	for i := range n {
		keyNames = append(keyNames, fmt.Sprintf("k%06d", i))
	}
	busy := busyShards(keyNames, root+"keys/", shard.DefaultShards)
	dir := t.TempDir()
	reps := map[string]*replicaProc{}
	start := func(name string) {
		reps[name] = startReplicaProc(t, replicaConfig{
			Name: name, Endpoint: endpoint, Root: root, TTL: ttl,
			Work: 2 * time.Millisecond, Workers: 4,
		}, dir, false)
	}
	for _, name := range []string{"t1", "t2", "t3"} {
		start(name)
	}
	awaitSplit(t, c, root, shard.DefaultShards, "t1", "t2", "t3")
	awaitConverged(t, c, root)
	// shard.MemberOptions' defaults for a TTL of ttl.
	renewDeadline := min(shard.DefaultRenewDeadline, ttl*2/3)
	retryPeriod := min(shard.DefaultRetryPeriod, renewDeadline/5)

	// Idle members: what they send etcd over 10 RetryPeriods.
	before, err := etcdMetrics(endpoint)
	require.NoError(t, err)
	window := 10 * retryPeriod
	time.Sleep(window) // a measurement window, not a synchronisation
	after, err := etcdMetrics(endpoint)
	require.NoError(t, err)
	periods := 3 * float64(window) / float64(retryPeriod)
	var msgs []string
	for k, v := range after {
		if d := v - before[k]; d > 0 && strings.HasPrefix(k, "grpc_server_msg_received_total") {
			_, method, _ := strings.Cut(k, `grpc_method="`)
			method, _, _ = strings.Cut(method, `"`)
			msgs = append(msgs, fmt.Sprintf("%s %.2f", method, d/periods))
		}
	}
	t.Logf("TTL %v (RenewDeadline %v, RetryPeriod %v): 3 idle members over %v: lease renewals per member per RetryPeriod %.2f; gRPC messages received per member per RetryPeriod by method: %v",
		ttl, renewDeadline, retryPeriod, window,
		(after["etcd_debugging_lease_renewed_total"]-before["etcd_debugging_lease_renewed_total"])/periods, msgs)

	kill := func(name string, next []string) {
		f := fault{replica: name, at: time.Now().UnixNano(), shards: shardsHeldBy(owners(t, c, root), name)}
		reps[name].kill(t)
		awaitTakeover(t, f, reps, busy)
		took, _ := newCallHistory(readAll(t, reps), shard.DefaultShards).takeover(f, busy)
		t.Logf("TTL %v: kill -9 of %s (%d shards): all reconciled by others %v after (target ≤ %v)", ttl, name, len(f.shards), took.Round(time.Millisecond), ttl+time.Second)
		awaitSplit(t, c, root, shard.DefaultShards, next...)
	}
	kill("t1", []string{"t2", "t3"})
	before2 := owners(t, c, root)
	start("t4")
	after2 := awaitSplit(t, c, root, shard.DefaultShards, "t2", "t3", "t4")
	moved := 0
	for s := range before2 {
		if before2[s] != after2[s] {
			moved++
		}
	}
	t.Logf("TTL %v: join of t4 to 2 members moved %d of %d shards: %.3f × 1/3 (target ≤ 1.2); shards %v", ttl, moved, shard.DefaultShards,
		float64(moved)/float64(shard.DefaultShards)*3, countByReplica(after2))
	kill("t2", []string{"t3", "t4"})

	f := fault{replica: "t3", at: time.Now().UnixNano(), shards: shardsHeldBy(owners(t, c, root), "t3")}
	reps["t3"].leave(t)
	awaitTakeover(t, f, reps, busy)
	took, _ := newCallHistory(readAll(t, reps), shard.DefaultShards).takeover(f, busy)
	t.Logf("TTL %v: graceful leave of t3 (%d shards): all reconciled by others %v after SIGTERM (target ≤ 1s)", ttl, len(f.shards), took.Round(time.Millisecond))
	start("t5")
	awaitSplit(t, c, root, shard.DefaultShards, "t4", "t5")
	awaitConverged(t, c, root)
	h := newCallHistory(readAll(t, reps), shard.DefaultShards)
	ov, st := h.overlaps(nil), h.staleStarts(nil)
	t.Logf("TTL %v: %d calls: %d overlaps, %d stale starts", ttl, len(readAll(t, reps)), len(ov), len(st))
	require.Empty(t, ov)
	require.Empty(t, st)
	for _, r := range reps {
		select {
		case <-r.exited:
		default:
			r.leave(t)
		}
	}
}

// readAll reads the histories of reps.
func readAll(t testing.TB, reps map[string]*replicaProc) []callRecord {
	var paths []string
	for _, r := range reps {
		paths = append(paths, r.cfg.History)
	}
	return readHistories(t, paths...)
}

// etcdMetrics reads the counters of etcd's /metrics at ep, by their whole
// name with labels.
func etcdMetrics(ep string) (map[string]float64, error) {
	resp, err := http.Get(ep + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out, sc.Err()
}
