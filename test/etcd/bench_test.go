package etcd

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/metrics"
	"sync"
	"syscall"
	"testing"
	"time"

	etcdmirror "github.com/listwatch/mirror/adapters/etcd"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// The etcd benchmarks come in pairs, or small sets: the mirror fed by the
// etcd adapter (impl=informer), and raw clientv3 loops doing the same work
// by hand (impl=raw-...), which are the limit the mirror is measured
// against (DESIGN.md's targets). The etcd server runs in a child process
// (etcdproc_test.go), one for the whole run, so that every figure is the
// client's alone: CPU time (getrusage of this process), allocations and
// heap. Compare the sides with benchstat over one run:
//
//	go test -run '^$' -bench . -count=1 ./test/etcd/ | tee new.txt   # several times
//	benchstat -col /impl new.txt
//
// bench/run.sh runs them in interleaved rounds and writes bench/RESULTS.md.
// The 1M-key rows run only with -etcd.1m (go test ... -args -etcd.1m):
// loading a million keys and syncing them takes minutes. With -short, the
// sync and relist rows read 10k keys instead of 100k.
//
// Every sync and relist row reports, besides time:
//
//	keys/s        keys listed and applied per second of the timed part
//	cpu-us/key    this process's CPU time (user and system) per key
//	allocs/key    heap allocations per key, from runtime/metrics
//	peak-MB       the largest live heap seen during an op, over the live
//	              heap before it (runtime/metrics /gc/heap/live:bytes,
//	              sampled every millisecond: the live heap as of each GC)
//	held-MB       the live heap after the op, with its result still held
//	              (the informer running, the raw map referenced), over the
//	              same base
//	peak/held     peak-MB over held-MB: how much more than the result the
//	              op needed at its worst

var bench1M = flag.Bool("etcd.1m", false, "etcd benchmarks: run the 1M-key rows too")

// quiet is the benchmarks' informers' Logger: logs would land in the
// middle of the result lines (a nil Logger means slog.Default()).
var quiet = slog.New(slog.DiscardHandler)

// benchSizes are the key counts of the sync and relist rows: 100k, and
// 1M with -etcd.1m; with -short (CI runs every benchmark once), 10k.
func benchSizes() []int {
	switch {
	case testing.Short():
		return []int{10_000}
	case *bench1M:
		return []int{100_000, 1_000_000}
	}
	return []int{100_000}
}

func sizeName(n int) string {
	if n%1_000_000 == 0 {
		return fmt.Sprintf("keys=%dM", n/1_000_000)
	}
	return fmt.Sprintf("keys=%dk", n/1000)
}

// benchServer is the etcd member the benchmarks share: one child process
// for the whole run, killed when the tests end (see TestMain).
var benchServer struct {
	once   sync.Once
	member *procMember
	dir    string
	client *clientv3.Client
	err    error

	mu     sync.Mutex
	loaded map[string]bool // prefixes written
}

// sharedBenchEtcd returns a client of the shared member, starting it on
// first use.
func sharedBenchEtcd(b *testing.B) *clientv3.Client {
	b.Helper()
	s := &benchServer
	s.once.Do(func() {
		if s.dir, s.err = os.MkdirTemp("", "mirror-bench-etcd-"); s.err != nil {
			return
		}
		cl, err := tryStartProcCluster(procTB{b, s.dir}, 1, 0)
		if err != nil {
			s.err = err
			return
		}
		s.member = cl.members[0]
		s.client, s.err = clientv3.New(clientv3.Config{
			Endpoints:   []string{s.member.Endpoint()},
			DialTimeout: 5 * time.Second,
			Logger:      zap.NewNop(),
		})
		s.loaded = make(map[string]bool)
	})
	if s.err != nil {
		b.Fatal(s.err)
	}
	return s.client
}

// stopBenchEtcd stops the shared member, if it was started.
func stopBenchEtcd() {
	s := &benchServer
	if s.client != nil {
		_ = s.client.Close()
	}
	if s.member != nil {
		_ = s.member.Kill()
	}
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
	}
}

// procTB starts the shared member from a benchmark without tying the
// member's life to that benchmark: Cleanup is ignored and TempDir is a
// directory of the run's (stopBenchEtcd kills the member and removes it).
type procTB struct {
	*testing.B
	dir string
}

func (procTB) Cleanup(func()) {}

func (p procTB) TempDir() string { return p.dir }

// syncPrefix returns the prefix holding n keys on the shared member,
// writing them the first time: keys prefix+%08d with values v0, v1...
func syncPrefix(b *testing.B, c *clientv3.Client, n int) string {
	return benchPrefix(b, c, "sync-"+sizeName(n)[len("keys="):], n)
}

// benchPrefix returns the prefix /bench/name/, holding n keys on the
// shared member, writing them the first time: keys prefix+%08d with
// values v0, v1...
func benchPrefix(b *testing.B, c *clientv3.Client, name string, n int) string {
	b.Helper()
	prefix := "/bench/" + name + "/"
	s := &benchServer
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.loaded[prefix] {
		putN(b, c, prefix, n)
		s.loaded[prefix] = true
	}
	return prefix
}

// cpuClock reads the CPU time this process has used, user and system.
// The server is another process: this is the client's alone.
func cpuClock() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuMeter sums the CPU time of a benchmark's timed parts.
type cpuMeter struct {
	total, since time.Duration
}

func (m *cpuMeter) start() { m.since = cpuClock() }
func (m *cpuMeter) stop()  { m.total += cpuClock() - m.since }

// report reports the CPU time per unit, in microseconds.
func (m *cpuMeter) report(b *testing.B, n int, unit string) {
	b.ReportMetric(float64(m.total.Microseconds())/float64(n), "cpu-us/"+unit)
}

// reportRate reports n units as a rate per second of the benchmark's
// timed parts.
func reportRate(b *testing.B, n int, unit string) {
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), unit)
}

// readMetric returns the value of one uint64 runtime metric.
func readMetric(name string) uint64 {
	s := []metrics.Sample{{Name: name}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

const (
	liveHeapMetric = "/gc/heap/live:bytes"
	allocsMetric   = "/gc/heap/allocs:objects"
)

// opMeter measures the ops of a sync or relist row: time is the
// benchmark's, CPU, allocations and heap are measured here. Between start
// and stop, a goroutine samples the live heap.
type opMeter struct {
	keys, ops         int
	cpu               cpuMeter
	allocs            uint64
	allocsSince       uint64
	base              uint64
	fixedBase         bool
	peakSum, heldSum  float64
	sampling, sampled chan struct{}
	peak              uint64
}

// fixBase makes the live heap now the base of every op's heap figures,
// for ops that work on state held across them (a relist against a full
// cache): peak-MB and held-MB then include that state. Without it, each
// op's base is the live heap just before it.
func (m *opMeter) fixBase() {
	runtime.GC()
	m.base = readMetric(liveHeapMetric)
	m.fixedBase = true
}

// start starts an op, outside the timed part: it collects the garbage of
// earlier ops, so that the live heap is the op's, and starts the timer.
func (m *opMeter) start(b *testing.B) {
	b.StopTimer()
	runtime.GC()
	if !m.fixedBase {
		m.base = readMetric(liveHeapMetric)
	}
	m.peak = readMetric(liveHeapMetric)
	m.sampling, m.sampled = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(m.sampled)
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			m.peak = max(m.peak, readMetric(liveHeapMetric))
			select {
			case <-m.sampling:
				return
			case <-t.C:
			}
		}
	}()
	m.allocsSince = readMetric(allocsMetric)
	m.cpu.start()
	b.StartTimer()
}

// stop ends an op of keys keys; the op's result must still be held. It
// stops the timer.
func (m *opMeter) stop(b *testing.B, keys int) {
	b.StopTimer()
	m.cpu.stop()
	m.allocs += readMetric(allocsMetric) - m.allocsSince
	close(m.sampling)
	<-m.sampled
	runtime.GC()
	held := readMetric(liveHeapMetric)
	// A GC during the op may not have come at its worst moment; the end
	// of the op, with everything held, is a candidate too.
	peak := max(m.peak, held)
	m.peakSum += float64(peak - min(peak, m.base))
	m.heldSum += float64(held - min(held, m.base))
	m.keys += keys
	m.ops++
	b.StartTimer()
}

// report reports the row's figures.
func (m *opMeter) report(b *testing.B) {
	if m.ops == 0 {
		return
	}
	reportRate(b, m.keys, "keys/s")
	m.cpu.report(b, m.keys, "key")
	b.ReportMetric(float64(m.allocs)/float64(m.keys), "allocs/key")
	peak, held := m.peakSum/float64(m.ops), m.heldSum/float64(m.ops)
	b.ReportMetric(peak/1e6, "peak-MB")
	b.ReportMetric(held/1e6, "held-MB")
	if held > 0 {
		b.ReportMetric(peak/held, "peak/held")
	}
}

// kvObject builds what the adapter's New makes of one key: the key as a
// string and the value as etcd's client returned it.
func kvObject(key, value []byte, create, mod, version, lease int64) etcdmirror.KV {
	return etcdmirror.KV{
		Key: string(key), Value: value,
		CreateRevision: create, ModRevision: mod, Version: version, Lease: lease,
	}
}

// rawStream reads every key under prefix with one GetStream into a map
// holding what the adapter's New makes of each key: the fastest list a
// user's own code can make with the same client.
func rawStream(ctx context.Context, c *clientv3.Client, prefix string) (map[string]etcdmirror.KV, error) {
	ch, err := c.GetStream(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	out := make(map[string]etcdmirror.KV)
	for resp := range ch {
		if err := resp.Err(); err != nil {
			return nil, err
		}
		for _, kv := range resp.Kvs {
			o := kvObject(kv.Key, kv.Value, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease)
			out[o.Key] = o
		}
	}
	return out, nil
}

// rawPaged reads every key under prefix in pages of limit keys, each page
// after the first at the first page's revision as the adapter reads them,
// into a map as rawStream does.
func rawPaged(ctx context.Context, c *clientv3.Client, prefix string, limit int64) (map[string]etcdmirror.KV, error) {
	end := clientv3.GetPrefixRangeEnd(prefix)
	resp, err := c.Get(ctx, prefix, clientv3.WithRange(end), clientv3.WithLimit(limit))
	if err != nil {
		return nil, err
	}
	rev := resp.Header.Revision
	// The first page counts the whole range, so the map never grows.
	out := make(map[string]etcdmirror.KV, resp.Count)
	for {
		for _, kv := range resp.Kvs {
			o := kvObject(kv.Key, kv.Value, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease)
			out[o.Key] = o
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return out, nil
		}
		next := string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
		resp, err = c.Get(ctx, next, clientv3.WithRange(end), clientv3.WithLimit(limit),
			clientv3.WithRev(rev), clientv3.WithSerializable())
		if err != nil {
			return nil, err
		}
	}
}
