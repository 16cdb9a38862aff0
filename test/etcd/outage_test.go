package etcd

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

var (
	outageFlag = flag.Bool("outage", false,
		"run TestOutage_Measure and TestOutage_MeasureFailover: outages of a member in a child process, about ten minutes each with the default plan (use -v to see the tables)")
	outageDurationsFlag = flag.String("outage.durations", "5s,11s,17s,23s,29s,36s,42s,48s,54s,60s",
		"TestOutage_Measure*: comma-separated outage durations, in order")
	outageFirstFlag = flag.String("outage.first", "kill",
		"TestOutage_Measure*: kind of the first outage, kill or pause; the kinds alternate")
	outageFastDialFlag = flag.Bool("outage.fastdial", false,
		"TestOutage_Measure*: every client reconnects within a second (gRPC backoff 50 ms to 1 s) instead of gRPC's default (1 s growing by 1.6 to 120 s)")
	outageKeepAliveFlag = flag.Duration("outage.keepalive", 0,
		"TestOutage_Measure*: every client's DialKeepAliveTime and DialKeepAliveTimeout (0: none, clientv3's default)")
)

const (
	outagePrefix = "/outage/"
	// outageCatchUp bounds the wait for a watcher to see a key.
	outageCatchUp = 3 * time.Minute
)

// outage is one fault of the plan.
type outage struct {
	kind string // "kill" or "pause"
	d    time.Duration
}

// outagePlan reads the plan from the flags.
func outagePlan(t *testing.T) []outage {
	t.Helper()
	kinds := []string{"kill", "pause"}
	switch *outageFirstFlag {
	case "kill":
	case "pause":
		kinds[0], kinds[1] = kinds[1], kinds[0]
	default:
		t.Fatalf("-outage.first=%q: want kill or pause", *outageFirstFlag)
	}
	var plan []outage
	for i, s := range strings.Split(*outageDurationsFlag, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(s))
		require.NoError(t, err, "-outage.durations")
		plan = append(plan, outage{kind: kinds[i%2], d: d})
	}
	return plan
}

// outageResult is what one outage measured. Durations are negative where
// nothing was observed.
type outageResult struct {
	outage
	// down is how long the member served nothing: from the signal to
	// the end of the restart (kill) or to SIGCONT (pause); restart is
	// how long the restart took, until the member served.
	down, restart time.Duration
	// detect is, for the fresh mirror, the time from the fault to the
	// first error wrapping source.ErrUnavailable given to its error
	// handler; detectFresh to Freshness.Err holding one. detectedLate
	// says it came after the member was back.
	detect, detectFresh time.Duration
	detectedLate        bool
	// put is how long the marker's put took, from the member's return.
	put time.Duration
	// From the member's return to each watcher's sight of the marker:
	// the fresh mirror and raw watch started for this outage, and the
	// long ones started before the first.
	mirror, raw, longMirror, longRaw time.Duration
	// From the member's return to each watcher's client being connected
	// again (0 if its connection stayed up): gRPC's reconnection, which
	// the watchers wait for alike, with jitter of their own.
	mirrorConn, rawConn, longMirrorConn, longRawConn time.Duration
	// reopen is, for the fresh mirror, the time from the member's return
	// to Freshness.Err clearing (a watch was accepted).
	reopen time.Duration
}

// Over a plan of outages of a single member running in a child process
// (by default ten, of 5 to 60 s, alternating SIGKILL then restart from its
// data directory, and SIGSTOP then SIGCONT), it measures how long after
// the member's return a mirror is current again, against a raw clientv3
// watch on a client of the same configuration and the same (only)
// endpoint, and how long after the fault the mirror reports the member
// unavailable. "Current" is made measurable by a marker key put right
// after the member is back: a watcher is current once it has seen it.
//
// Each outage has a fresh mirror and raw watch, started (and seen current)
// just before the fault; a long-lived mirror and raw watch, started before
// the first outage, are measured alongside, to show what earlier faults
// leave behind. The fault comes right after every watcher has seen a key
// put before it, so detection measures the full silence a watch waits
// (two ProgressIntervals and up to a quarter more). The table is logged;
// nothing is asserted of the times.
//
//	go test -run 'TestOutage_Measure$' -outage -v -timeout 60m ./test/etcd/
func TestOutage_Measure(t *testing.T) {
	if !*outageFlag {
		t.Skip("a measurement of about ten minutes: run with -outage -v")
	}
	plan := outagePlan(t)
	m := startEtcdProc(t)
	ep := m.Endpoint()
	long := startMirrorWatch(t, outagePrefix, ep)
	longRaw := startRawWatch(t, outagePrefix, ep)
	defer longRaw.stop()
	defer long.stop(t)

	var results []outageResult
	for i, o := range plan {
		r := measureOutage(t, m, i, o, long, longRaw)
		t.Logf("outage done: %s", r.row(i))
		results = append(results, r)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "one member; every client: %s; mirror: etcd.NewInformer(etcd.New(c, %q, etcd.Options{}), {}); seconds\n",
		outageClientConfig(), outagePrefix)
	b.WriteString(outageHeader + "\n")
	for i, r := range results {
		b.WriteString(r.row(i) + "\n")
	}
	t.Log("\n" + b.String())
}

// outageColumns lays out the table: header and rows share it.
const outageColumns = "%-2s %-5s %6s %6s %7s | %7s %8s | %6s %6s %6s | %6s %6s %6s %6s | %6s %6s %6s %6s %6s"

var outageHeader = fmt.Sprintf(outageColumns, "#", "kind", "outage", "down", "restart",
	"detect", "freshErr", "mirror", "raw", "diff", "m.conn", "r.conn", "m.own", "r.own",
	"long.m", "long.r", "diff", "l.m.own", "l.r.own")

func secs(d time.Duration) string {
	if d < 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", d.Seconds())
}

func diff(a, b time.Duration) string {
	if a < 0 || b < 0 {
		return "-"
	}
	return fmt.Sprintf("%+.2f", (a - b).Seconds())
}

// own is how long after its client connected a watcher saw the marker.
func own(sight, conn time.Duration) string {
	if sight < 0 || conn < 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", (sight - conn).Seconds())
}

func (r outageResult) row(i int) string {
	detect := secs(r.detect)
	if r.detectedLate {
		detect += "*" // only after the member was back
	}
	return fmt.Sprintf(outageColumns, fmt.Sprint(i), r.kind, fmt.Sprintf("%.0f", r.d.Seconds()), secs(r.down), secs(r.restart),
		detect, secs(r.detectFresh),
		secs(r.mirror), secs(r.raw), diff(r.mirror, r.raw),
		secs(r.mirrorConn), secs(r.rawConn), own(r.mirror, r.mirrorConn), own(r.raw, r.rawConn),
		secs(r.longMirror), secs(r.longRaw), diff(r.longMirror, r.longRaw),
		own(r.longMirror, r.longMirrorConn), own(r.longRaw, r.longRawConn))
}

// measureOutage runs the i-th outage o of m and measures it.
func measureOutage(t *testing.T, m *procMember, i int, o outage, long *mirrorWatch, longRaw *rawWatch) outageResult {
	t.Helper()
	ep := m.Endpoint()
	res := outageResult{outage: o, detect: -1, detectFresh: -1, restart: -1}
	fresh := startMirrorWatch(t, outagePrefix, ep)
	defer fresh.stop(t)
	freshRaw := startRawWatch(t, outagePrefix, ep)
	defer freshRaw.stop()

	// Every watcher is current before the fault.
	pre := fmt.Sprintf("%spre/%02d", outagePrefix, i)
	putMarker(t, pre, ep)
	for _, s := range []*sightings{fresh.seen, freshRaw.seen, long.seen, longRaw.seen} {
		select {
		case <-s.seen(pre):
		case <-time.After(convergeTimeout):
			t.Fatalf("outage %d: a watcher did not see %s before the fault", i, pre)
		}
	}

	fault := time.Now()
	switch o.kind {
	case "kill":
		require.NoError(t, m.Kill())
	default:
		require.NoError(t, m.Pause())
	}
	require.NoError(t, endOutage(m, o))
	back := time.Now()
	if o.kind == "kill" {
		res.restart = back.Sub(fault) - o.d
	}
	res.down = back.Sub(fault)

	marker := fmt.Sprintf("%smarker/%02d", outagePrefix, i)
	putMarker(t, marker, ep)
	res.put = time.Since(back)
	wait := func(s *sightings) time.Duration {
		select {
		case <-s.seen(marker):
		case <-time.After(outageCatchUp - time.Since(back)):
			return -1
		}
		at, _ := s.when(marker)
		return at.Sub(back)
	}
	res.mirror, res.raw = wait(fresh.seen), wait(freshRaw.seen)
	res.longMirror, res.longRaw = wait(long.seen), wait(longRaw.seen)
	res.mirrorConn, res.rawConn = fresh.conn.readyAfter(back), freshRaw.conn.readyAfter(back)
	res.longMirrorConn, res.longRawConn = long.conn.readyAfter(back), longRaw.conn.readyAfter(back)

	if at, ok := fresh.log.firstErr(fault, source.ErrUnavailable); ok {
		res.detect, res.detectedLate = at.Sub(fault), at.After(back)
	}
	if at, ok := fresh.freshnessChange(fault, true); ok {
		res.detectFresh = at.Sub(fault)
	}
	res.reopen = -1 // also when it never failed
	if _, failed := fresh.freshnessChange(fault, true); failed {
		if at, ok := fresh.freshnessChange(back, false); ok {
			res.reopen = at.Sub(back)
		}
	}

	t.Logf("outage %d: marker put in %v; fresh mirror's watch accepted %v after the return", i, res.put, res.reopen)
	// The fresh mirror's timeline, and the long-lived one's if it came
	// back more than a second after its raw peer: errors, logs and
	// Freshness from the fault on.
	for _, p := range []struct {
		name     string
		mirror   *mirrorWatch
		mir, raw time.Duration
	}{{"fresh", fresh, res.mirror, res.raw}, {"long-lived", long, res.longMirror, res.longRaw}} {
		if p.mirror == long && p.mir >= 0 && p.raw >= 0 && p.mir-p.raw <= time.Second {
			continue
		}
		t.Logf("outage %d (%s %v): the %s mirror came back %v after its raw watch; its client connected %v after the return; its timeline (seconds from the fault; back at %+.3fs, stats %+v):\n%s",
			i, o.kind, o.d, p.name, p.mir-p.raw, p.mirror.conn.readyAfter(back), back.Sub(fault).Seconds(), p.mirror.inf.Stats().Reflector,
			strings.Join(p.mirror.log.since(fault.Add(-time.Second), fault), "\n"))
	}
	return res
}

// outageCheck is how long endOutage gives a member to answer, to make
// sure it does not.
const outageCheck = 500 * time.Millisecond

// endOutage waits out o, which began with m's fault, makes sure that m does
// not answer, then restarts (kill) or resumes (pause) it and returns once
// it serves. The outage's length is the experiment, not a wait for
// something.
func endOutage(m *procMember, o outage) error {
	time.Sleep(o.d - outageCheck)
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{m.Endpoint()}, DialTimeout: outageCheck, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), outageCheck)
	_, err = c.Get(ctx, "/outage-check")
	cancel()
	_ = c.Close()
	if err == nil {
		return fmt.Errorf("etcd member %s answered during its outage", m.name)
	}
	if o.kind == "kill" {
		return m.Restart()
	}
	return m.Resume()
}

// putMarker puts key through a new client of eps, so that the put does not
// wait on a client's reconnection, and tries again while the put fails (a
// cluster that lost its leader refuses writes until it has elected one).
func putMarker(t *testing.T, key string, eps ...string) {
	t.Helper()
	c := newOutageClient(t, eps...)
	defer c.Close()
	deadline := time.Now().Add(convergeTimeout)
	for {
		// Short attempts: a put sent to a cluster electing a new leader
		// fails only after etcd's own request timeout.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.Put(ctx, key, "x")
		cancel()
		if err == nil {
			return
		}
		require.True(t, time.Now().Before(deadline), "put %s: %v", key, err)
	}
}
