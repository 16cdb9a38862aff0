package etcd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/require"
)

// failoverResult is what one outage of the three-member measurement
// measured; durations are negative where nothing was observed.
type failoverResult struct {
	outage
	member string // the member that failed: the one both watchers used
	// detect and detectFresh are as in outageResult.
	detect, detectFresh time.Duration
	// put is how long the marker's put took, from the fault: the other
	// members may have to elect a leader first.
	put time.Duration
	// From the fault to each watcher's sight of the marker; late says it
	// came only after the member was back.
	mirror, raw         time.Duration
	mirrorLate, rawLate bool
	// unavailable counts the mirror's errors wrapping ErrUnavailable
	// from the fault until it saw the marker.
	unavailable int
}

// failoverColumns lays out the three-member table.
const failoverColumns = "%-2s %-5s %6s %6s | %7s %8s | %6s %6s %6s %6s | %5s"

var failoverHeader = fmt.Sprintf(failoverColumns, "#", "kind", "outage", "member",
	"detect", "freshErr", "put", "mirror", "raw", "diff", "unav.")

func (r failoverResult) row(i int) string {
	return fmt.Sprintf(failoverColumns, fmt.Sprint(i), r.kind, fmt.Sprintf("%.0f", r.d.Seconds()), r.member,
		secs(r.detect), secs(r.detectFresh), secs(r.put), late(r.mirror, r.mirrorLate), late(r.raw, r.rawLate), diff(r.mirror, r.raw),
		fmt.Sprint(r.unavailable))
}

// On a cluster of three members in child processes, the mirror's client
// knows every member's endpoint, and each outage of the plan (see
// TestOutage_Measure) takes down the member its watch uses: it measures
// how long after the fault the mirror reports that member unavailable and
// is current again through another, against a raw clientv3 watch on a
// client of the same configuration whose watch used the same member. The
// marker is put through the other members right after the fault; the
// member comes back after the outage's duration, before the next. Nothing
// is asserted of the times.
//
//	go test -run 'TestOutage_MeasureFailover$' -outage -v -timeout 60m ./test/etcd/
func TestOutage_MeasureFailover(t *testing.T) {
	if !*outageFlag {
		t.Skip("a measurement of about ten minutes: run with -outage -v")
	}
	plan := outagePlan(t)
	cl := startProcCluster(t, 3)
	var results []failoverResult
	for i, o := range plan {
		r := measureFailover(t, cl, i, o)
		t.Logf("outage done: %s", r.row(i))
		results = append(results, r)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "three members; every client knows all three endpoints, %s; seconds from the fault\n", outageClientConfig())
	b.WriteString(failoverHeader + "\n")
	for i, r := range results {
		b.WriteString(r.row(i) + "\n")
	}
	t.Log("\n" + b.String())
}

// late formats d, marked with a * if it ended only after the member was
// back.
func late(d time.Duration, after bool) string {
	if after {
		return secs(d) + "*"
	}
	return secs(d)
}

// measureFailover runs the i-th outage o of the member that a new mirror
// and raw watch of cl both use, and measures it.
func measureFailover(t *testing.T, cl *procCluster, i int, o outage) failoverResult {
	t.Helper()
	eps := cl.endpoints()
	res := failoverResult{outage: o, detect: -1, detectFresh: -1}
	res.mirror, res.raw = -1, -1

	// Nothing else watches the cluster: once the watchers of the last
	// outage are gone, a member whose count grows holds the new watch.
	base := make([]int, len(eps))
	settleWatchers(t, eps, base)
	fresh := startMirrorWatch(t, outagePrefix, eps...)
	defer fresh.stop(t)
	idx := grownMember(t, eps, base)
	base[idx]++
	// A raw watch picks a member as it likes: start it again until it
	// picks the mirror's.
	var raw *rawWatch
	for attempt := 0; ; attempt++ {
		require.Less(t, attempt, 30, "no raw watch landed on the mirror's member")
		settleWatchers(t, eps, base)
		raw = startRawWatch(t, outagePrefix, eps...)
		if grownMember(t, eps, base) == idx {
			break
		}
		raw.stop()
	}
	defer raw.stop()
	m := cl.members[idx]
	res.member = m.name

	pre := fmt.Sprintf("%sfo-pre/%02d", outagePrefix, i)
	putMarker(t, pre, eps...)
	for _, s := range []*sightings{fresh.seen, raw.seen} {
		select {
		case <-s.seen(pre):
		case <-time.After(convergeTimeout):
			t.Fatalf("outage %d: a watcher did not see %s before the fault", i, pre)
		}
	}

	fault := time.Now()
	if o.kind == "kill" {
		require.NoError(t, m.Kill())
	} else {
		require.NoError(t, m.Pause())
	}
	// The member comes back after the outage's length, whether or not
	// the watchers have failed over by then.
	type restored struct {
		at  time.Time
		err error
	}
	back := make(chan restored, 1)
	go func() {
		err := endOutage(m, o)
		back <- restored{time.Now(), err}
	}()
	others := slices.Delete(slices.Clone(eps), idx, idx+1)
	marker := fmt.Sprintf("%sfo-marker/%02d", outagePrefix, i)
	putMarker(t, marker, others...)
	res.put = time.Since(fault)
	var seen []time.Time
	for _, s := range []*sightings{fresh.seen, raw.seen} {
		select {
		case <-s.seen(marker):
		case <-time.After(outageCatchUp - time.Since(fault)):
		}
		at, _ := s.when(marker)
		seen = append(seen, at)
	}
	r := <-back
	require.NoError(t, r.err)
	since := func(at time.Time) (time.Duration, bool) {
		if at.IsZero() {
			return -1, false
		}
		return at.Sub(fault), at.After(r.at)
	}
	res.mirror, res.mirrorLate = since(seen[0])
	res.raw, res.rawLate = since(seen[1])

	if at, ok := fresh.log.firstErr(fault, source.ErrUnavailable); ok {
		res.detect = at.Sub(fault)
	}
	if at, ok := fresh.freshnessChange(fault, true); ok {
		res.detectFresh = at.Sub(fault)
	}
	for _, e := range fresh.log.errsSince(fault) {
		if (res.mirror < 0 || e.at.Sub(fault) < res.mirror) && errors.Is(e.err, source.ErrUnavailable) {
			res.unavailable++
		}
	}
	t.Logf("outage %d (%s %v of %s): the mirror's timeline (seconds from the fault), stats %+v:\n%s",
		i, o.kind, o.d, m.name, fresh.inf.Stats().Reflector,
		strings.Join(fresh.log.since(fault.Add(-time.Second), fault), "\n"))

	return res
}

// watcherCount returns the member's count of watchers, from its
// etcd_debugging_mvcc_watcher_total gauge.
func watcherCount(ep string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ep+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "etcd_debugging_mvcc_watcher_total "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return int(f), err
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("%s/metrics: no etcd_debugging_mvcc_watcher_total", ep)
}

// settleWatchers waits until the members count want watchers.
func settleWatchers(t *testing.T, eps []string, want []int) {
	t.Helper()
	require.Eventually(t, func() bool {
		for i, ep := range eps {
			if n, err := watcherCount(ep); err != nil || n != want[i] {
				return false
			}
		}
		return true
	}, convergeTimeout, 20*time.Millisecond, "the members count %v watchers", want)
}

// grownMember waits until one member counts more watchers than in base,
// and returns its index.
func grownMember(t *testing.T, eps []string, base []int) int {
	t.Helper()
	grown := -1
	require.Eventually(t, func() bool {
		for i, ep := range eps {
			if n, err := watcherCount(ep); err == nil && n > base[i] {
				grown = i
				return true
			}
		}
		return false
	}, convergeTimeout, 20*time.Millisecond, "a new watch shows in a member's watcher count")
	return grown
}
