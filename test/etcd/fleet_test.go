package etcd

// The fleet measurement (bench/FLEET.md): many mirrors of one prefix on a
// 3-member cluster, connected to the members directly or through one etcd
// gRPC proxy. The members and the proxy run in child processes, so their
// CPU time and memory are read from /proc apart from the mirrors', which
// run as goroutines of this process. Run with -fleet (see bench/fleet.sh).

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/listwatch/mirror"
	etcdmirror "github.com/listwatch/mirror/adapters/etcd"
)

var (
	fleetRun     = flag.Bool("fleet", false, "run the fleet measurement (TestFleet)")
	fleetSizes   = flag.String("fleet.mirrors", "100,500", "fleet: numbers of mirrors, comma-separated")
	fleetKeys    = flag.Int("fleet.keys", 3000, "fleet: keys under the mirrored prefix")
	fleetRate    = flag.Int("fleet.rate", 100, "fleet: puts per second during the measurement")
	fleetSeconds = flag.Int("fleet.seconds", 20, "fleet: length of the steady-state window")
)

// TestFleet measures, for each number of mirrors and each way of
// connecting them (direct, proxy): the watchers and watch streams the
// members hold, the members' (and the proxy's) CPU time and memory over a
// steady-state window under a steady write rate, the time until every
// mirror is current after a rolling restart of the members, and after a
// restart of every mirror with and without checkpoints, with the lists
// those restarts sent.
func TestFleet(t *testing.T) {
	if !*fleetRun {
		t.Skip("the fleet measurement runs with -fleet")
	}
	var sizes []int
	for _, s := range strings.Split(*fleetSizes, ",") {
		n, err := strconv.Atoi(s)
		require.NoError(t, err)
		sizes = append(sizes, n)
	}
	t.Logf("| mirrors | via | server watchers | watch streams | members CPU ms/s, writes only | with mirrors | per mirror µs/s | proxy CPU ms/s | members RSS MB | proxy RSS MB | current after rolling member restart | lists | mirror restart: current, lists (no checkpoint) | (checkpoint) |")
	t.Logf("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, n := range sizes {
		for _, via := range []string{"direct", "proxy"} {
			t.Run(fmt.Sprintf("mirrors=%d/via=%s", n, via), func(t *testing.T) { runFleet(t, n, via) })
		}
	}
}

// fleetMirror is one mirror of the fleet.
type fleetMirror struct {
	lw     *etcdmirror.ListWatcher[[]byte]
	inf    *etcdInformer[[]byte]
	cancel context.CancelFunc
	done   chan error
}

func startFleetMirror(c *clientv3.Client, prefix, checkpoint string) *fleetMirror {
	m := &fleetMirror{lw: etcdmirror.New(c, prefix, etcdmirror.Options{}), done: make(chan error, 1)}
	m.inf = etcdmirror.NewInformer(m.lw, etcdmirror.InformerOptions[[]byte]{
		Logger:       quiet,
		ErrorHandler: func(error) {},
		Checkpoint:   mirror.CheckpointOptions[etcdmirror.KV]{Path: checkpoint},
	})
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	go func() { m.done <- m.inf.Run(ctx) }()
	return m
}

func (m *fleetMirror) stop() error {
	m.cancel()
	return <-m.done
}

// fleetCurrent waits until every mirror has applied revision rev and
// returns how long that took.
func fleetCurrent(t *testing.T, mirrors []*fleetMirror, rev int64) time.Duration {
	start := time.Now()
	require.Eventually(t, func() bool {
		for _, m := range mirrors {
			if informerRev(m.inf) < rev {
				return false
			}
		}
		return true
	}, 5*time.Minute, 5*time.Millisecond)
	return time.Since(start)
}

func runFleet(t *testing.T, n int, via string) {
	cl := startProcCluster(t, 3)
	direct := newClient(t, cl.endpoints()...)
	prefix := "/fleet/"
	putN(t, direct, prefix, *fleetKeys)
	var pp *procProxy
	endpoints := cl.endpoints()
	if via == "proxy" {
		pp = startGRPCProxyProc(t, cl.endpoints()...)
		endpoints = []string{pp.Endpoint()}
	}
	// A steady write rate, to random keys of the prefix.
	wctx, stopWrites := context.WithCancel(context.Background())
	var writes sync.WaitGroup
	writes.Go(func() {
		tick := time.NewTicker(time.Second / time.Duration(*fleetRate))
		defer tick.Stop()
		for wctx.Err() == nil {
			select {
			case <-tick.C:
			case <-wctx.Done():
				return
			}
			ctx, cancel := context.WithTimeout(wctx, time.Second)
			_, _ = direct.Put(ctx, nthKey(prefix, rand.IntN(*fleetKeys)), strconv.Itoa(rand.Int()))
			cancel()
		}
	})
	defer func() { stopWrites(); writes.Wait() }()

	var pids []int
	for _, m := range cl.members {
		pids = append(pids, m.PID())
	}
	window := time.Duration(*fleetSeconds) * time.Second
	// The members' CPU under the writes alone, before any mirror.
	time.Sleep(2 * time.Second) // let the write rate settle before measuring
	cpu0 := cpuTicks(t, pids...)
	time.Sleep(window) // the baseline window: CPU is read before and after
	baseCPU := (cpuTicks(t, pids...) - cpu0) * 10 / window.Seconds()

	c := newClient(t, endpoints...)
	dir := t.TempDir()
	mirrors := make([]*fleetMirror, n)
	for i := range mirrors {
		mirrors[i] = startFleetMirror(c, prefix, filepath.Join(dir, fmt.Sprintf("m%d", i)))
	}
	stopAll := func() {
		var wg sync.WaitGroup
		for _, m := range mirrors {
			wg.Go(func() { require.NoError(t, m.stop()) })
		}
		wg.Wait()
	}
	defer func() { stopAll() }()
	fleetCurrent(t, mirrors, currentRev(t, direct))

	// Steady state.
	time.Sleep(2 * time.Second) // let the write rate settle before measuring
	cpu0, proxy0 := cpuTicks(t, pids...), 0.0
	if pp != nil {
		proxy0 = cpuTicks(t, pp.PID())
	}
	time.Sleep(window) // the measurement window: CPU is read before and after
	secs := window.Seconds()
	membersCPU := (cpuTicks(t, pids...) - cpu0) * 10 / secs // ms per second (100 ticks/s)
	proxyCPU := 0.0
	if pp != nil {
		proxyCPU = (cpuTicks(t, pp.PID()) - proxy0) * 10 / secs
	}
	var watchers, streams float64
	for _, m := range cl.members {
		w, s := scrapeWatchers(t, m.Endpoint())
		watchers += w
		streams += s
	}
	membersRSS := rssMB(t, pids...)
	proxyRSS := 0.0
	if pp != nil {
		proxyRSS = rssMB(t, pp.PID())
	}

	// A rolling restart of the members.
	lists0 := fleetLists(mirrors)
	for _, m := range cl.members {
		require.NoError(t, m.Stop())
		require.NoError(t, m.Restart())
	}
	rollingCurrent := fleetCurrent(t, mirrors, currentRev(t, direct))
	rollingLists := fleetLists(mirrors) - lists0

	// A restart of every mirror, without then with checkpoints.
	restart := func(checkpoints bool) (time.Duration, int64) {
		stopAll()
		if !checkpoints {
			// Each mirror writes a checkpoint as it stops: this start
			// uses other paths, where none is yet.
			dir = t.TempDir()
		}
		start := time.Now()
		for i := range mirrors {
			mirrors[i] = startFleetMirror(c, prefix, filepath.Join(dir, fmt.Sprintf("m%d", i)))
		}
		fleetCurrent(t, mirrors, currentRev(t, direct))
		return time.Since(start), fleetLists(mirrors)
	}
	plainTook, plainLists := restart(false)
	cpTook, cpLists := restart(true)

	t.Logf("| %d | %s | %.0f | %.0f | %.0f | %.0f | %.1f | %.0f | %.0f | %.0f | %v | %d | %v, %d | %v, %d |",
		n, via, watchers, streams, baseCPU, membersCPU, (membersCPU-baseCPU)*1000/float64(n), proxyCPU, membersRSS, proxyRSS,
		rollingCurrent.Round(time.Millisecond), rollingLists,
		plainTook.Round(time.Millisecond), plainLists, cpTook.Round(time.Millisecond), cpLists)
}

// fleetLists returns the lists the mirrors asked etcd for.
func fleetLists(mirrors []*fleetMirror) int64 {
	var n int64
	for _, m := range mirrors {
		n += m.lw.Stats().Lists
	}
	return n
}

// cpuTicks returns the CPU time, user and system, of processes pids, in
// clock ticks (/proc/<pid>/stat).
func cpuTicks(t *testing.T, pids ...int) float64 {
	var sum float64
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		require.NoError(t, err)
		// The fields after the command, which is in parentheses.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
		utime, err := strconv.ParseFloat(f[11], 64)
		require.NoError(t, err)
		stime, err := strconv.ParseFloat(f[12], 64)
		require.NoError(t, err)
		sum += utime + stime
	}
	return sum
}

// rssMB returns the resident memory of processes pids, in MB
// (/proc/<pid>/status, VmRSS).
func rssMB(t *testing.T, pids ...int) float64 {
	var kb float64
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		require.NoError(t, err)
		for line := range strings.Lines(string(b)) {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
				v, err := strconv.ParseFloat(f[1], 64)
				require.NoError(t, err)
				kb += v
			}
		}
	}
	return kb / 1000
}

// scrapeWatchers returns the watchers and watch streams the member at
// endpoint holds, from its metrics.
func scrapeWatchers(t *testing.T, endpoint string) (watchers, streams float64) {
	resp, err := http.Get(endpoint + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 {
			continue
		}
		v, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "etcd_debugging_mvcc_watcher_total":
			watchers = v
		case "etcd_debugging_mvcc_watch_stream_total":
			streams = v
		}
	}
	require.NoError(t, sc.Err())
	return watchers, streams
}
