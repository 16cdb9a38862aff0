package etcd

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	etcdmirror "github.com/listwatch/mirror/adapters/etcd"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

var (
	soakFlag = flag.Duration("soak", 0,
		"how long TestSoak injects faults, instead of its short run of a few seconds (for example -soak=5m)")
	soakSeedFlag = flag.Uint64("soak.seed", 0,
		"seed of TestSoak's random choices; 0 picks one, which the test logs")
)

const (
	soakPrefix = "/soak/"
	// soakKeys is how many keys the writers use; soakHotKeys of them take
	// most writes, so that keys are deleted and created again while the
	// mirror is away.
	soakKeys    = 2000
	soakHotKeys = 200
	// soakBad starts the values soakDecode refuses.
	soakBad = "bad"
)

// errSoakUndecodable is what soakDecode refuses a value with.
var errSoakUndecodable = errors.New("undecodable soak value")

// soakDecode decodes a soak value: any value but one starting with soakBad.
func soakDecode(_ string, v []byte) (string, error) {
	if bytes.HasPrefix(v, []byte(soakBad)) {
		return "", fmt.Errorf("value %q: %w", v, errSoakUndecodable)
	}
	return string(v), nil
}

// soakPlan is how long and how hard a soak runs.
type soakPlan struct {
	// phases each inject faults for phase, then heal the cluster and
	// check the mirror.
	phases int
	phase  time.Duration
	// opsPerSec paces the writers; maxOps bounds their operations per
	// phase.
	opsPerSec, maxOps int
}

// soakPlanFromFlags is the short run, or, with -soak, the long one.
func soakPlanFromFlags() soakPlan {
	if d := *soakFlag; d > 0 {
		const phase = 30 * time.Second
		return soakPlan{phases: max(1, int((d+phase-1)/phase)), phase: min(d, phase), opsPerSec: 1000, maxOps: 1 << 30}
	}
	return soakPlan{phases: 2, phase: 3 * time.Second, opsPerSec: 300, maxOps: 2000}
}

// A randomized soak: writers put, delete and change keys in multi-key
// transactions, some with values the mirror cannot decode; members are
// closed and restarted from their data directories; the mirror's only
// member is cut off or paused while etcd compacts; the mirror is restarted
// on the same prefix. A raw watch of every member records etcd's history,
// against which every notification of every mirror is checked (see
// checkCalls), and at the end of each phase, with the faults healed, the
// cache and the handlers' views must equal a linearizable Get.
//
// go test -run TestSoak -soak=5m runs it long; -soak.seed replays a seed's
// choices (the timing of a run, and so its interleavings, differ).
func TestSoak_MirrorOfAFaultyClusterEndsExactAndNeverLiesOnTheWay(t *testing.T) {
	plan := soakPlanFromFlags()
	seed := *soakSeedFlag
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("seed %d (replay with -soak.seed=%d)", seed, seed)
	s := newSoak(t, seed)
	for phase := range plan.phases {
		s.runPhase(phase, plan)
		if t.Failed() {
			break
		}
	}
	s.logSummary()
}

// soak is the state of one soak run; its methods run on the test's
// goroutine.
type soak struct {
	t     *testing.T
	seed  uint64
	rng   *rand.Rand
	start time.Time

	cl    *cluster
	proxy *proxy           // in front of member 0, the mirror's only way in
	all   *clientv3.Client // of every member: writers, compactions, checks
	mc    *clientv3.Client // the mirror's: member 0 through proxy
	hist  *history
	epoch *soakEpoch

	down      int       // the member closed, or -1
	upAt      time.Time // when to start it again
	proxyMode string    // "", "cut" or "paused"
	healAt    time.Time // when to end the proxy's mode
	compacted int64     // the last revision compacted at

	stats soakStats
}

// soakStats is what a soak did, for its summary.
type soakStats struct {
	ops, puts, deletes, txns, badValues, writeErrs                    int64
	kills, cuts, pauses, compactions, mirrorRestarts, epochs, checked int
	lists, relists, watches, events                                   int64
	objectErrors                                                      int
	calls                                                             callCounts
}

func newSoak(t *testing.T, seed uint64) *soak {
	s := &soak{t: t, seed: seed, start: time.Now(), rng: rand.New(rand.NewPCG(seed, 0)), down: -1}
	s.cl = startCluster(t, 3)
	var endpoints []string
	for _, m := range s.cl.members {
		endpoints = append(endpoints, m.endpoint())
	}
	s.all = newSoakClient(t, endpoints...)
	s.proxy = newProxy(t, s.cl.members[0].cliURL.Host)
	s.mc = newSoakClient(t, s.proxy.endpoint())

	ctx, cancel := context.WithCancel(context.Background())
	var wait func()
	s.hist, wait = recordHistory(ctx, newSoakClient(t, endpoints...), soakPrefix, currentRev(t, s.all)+1)
	t.Cleanup(func() {
		cancel()
		wait()
	})
	t.Cleanup(func() { // before the clients close
		if s.epoch != nil {
			_ = s.epoch.run.stop()
		}
	})

	// Every key starts with a value, so that the first mirror knows them.
	var ops []clientv3.Op
	for i := range soakKeys {
		ops = append(ops, clientv3.OpPut(soakKey(i), fmt.Sprintf("v-initial-%d", i)))
		if len(ops) == 1000 || i == soakKeys-1 {
			_, err := s.all.Txn(context.Background()).Then(ops...).Commit()
			require.NoError(t, err)
			ops = ops[:0]
		}
	}
	s.startEpoch()
	return s
}

// newSoakClient is newClient, but reconnects within a second of a member's
// return: gRPC's own pause between attempts grows to two minutes, and the
// faults here come every second or so, which would leave the mirror away
// for most of a run.
func newSoakClient(t *testing.T, endpoints ...string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: time.Second,
		})},
		Logger: zap.NewNop(),
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func soakKey(i int) string { return fmt.Sprintf("%sk%04d", soakPrefix, i) }

// runPhase injects faults while writers run, then heals everything,
// checks the mirror against etcd and restarts it.
func (s *soak) runPhase(phase int, plan soakPlan) {
	t := s.t
	wctx, stopWriters := context.WithCancel(context.Background())
	writers := s.startWriters(wctx, phase, plan)
	end := time.Now().Add(plan.phase)
	for time.Now().Before(end) {
		s.idle(50*time.Millisecond, 400*time.Millisecond)
		s.fault()
	}
	// The finale: the mirror is away while the writers go on and etcd
	// compacts, so that every phase ends with a relist.
	if s.proxyMode == "" {
		s.awayMirror()
	}
	s.idle(300*time.Millisecond, time.Second)
	stopWriters()
	writers()
	s.compact()
	s.healProxy()
	if s.down >= 0 {
		s.restartMember()
	}
	want, rev := s.requireConverged()
	s.endEpoch(want, rev)
	t.Logf("phase %d: %+v", phase, s.stats)
	if phase+1 < plan.phases {
		s.startEpoch()
	}
}

// idle waits between lo and hi, picked at random: it paces the faults.
func (s *soak) idle(lo, hi time.Duration) {
	time.Sleep(s.duration(lo, hi))
}

// fault ends a fault that is due to end, or else maybe starts one.
func (s *soak) fault() {
	now := time.Now()
	switch {
	case s.down >= 0 && now.After(s.upAt):
		s.restartMember()
	case s.proxyMode != "" && now.After(s.healAt):
		// Compacting first makes the mirror relist rather than catch up.
		s.compact()
		s.healProxy()
	default:
		switch x := s.rng.IntN(100); {
		case x < 12 && s.down < 0:
			s.down = s.rng.IntN(len(s.cl.members))
			s.upAt = now.Add(s.duration(300*time.Millisecond, 2*time.Second))
			s.cl.members[s.down].close()
			s.stats.kills++
			s.logf("member %d closed", s.down)
		case x < 36 && s.proxyMode == "":
			s.awayMirror()
		case x < 50:
			s.compact()
		case x < 58:
			s.endEpoch(nil, 0)
			s.startEpoch()
			s.stats.mirrorRestarts++
		case x < 70 && len(s.epoch.handlers) == 1:
			s.addLateHandler()
		}
	}
}

// awayMirror cuts the mirror's member off or pauses it, until healAt.
func (s *soak) awayMirror() {
	if s.rng.IntN(2) == 0 {
		s.proxyMode, s.healAt = "cut", time.Now().Add(s.duration(200*time.Millisecond, 2*time.Second))
		s.proxy.Cut()
		s.stats.cuts++
	} else {
		s.proxyMode, s.healAt = "paused", time.Now().Add(s.duration(300*time.Millisecond, 3*time.Second))
		s.proxy.Pause()
		s.stats.pauses++
	}
	s.logf("proxy %s", s.proxyMode)
}

func (s *soak) duration(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(s.rng.Int64N(int64(hi-lo)))
}

func (s *soak) restartMember() {
	s.cl.members[s.down].restart(s.t)
	s.logf("member %d restarted", s.down)
	s.down = -1
}

func (s *soak) healProxy() {
	s.proxy.Resume()
	s.logf("proxy resumed")
	s.proxyMode = ""
}

// compact compacts etcd at the last revision the history has recorded,
// which the mirror, if it is away, has not seen.
func (s *soak) compact() {
	rev := s.hist.lastRev()
	if rev <= s.compacted {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := s.all.Compact(ctx, rev, clientv3.WithCompactPhysical()); err == nil {
		s.compacted = rev
		s.stats.compactions++
		s.logf("compacted at rev %d", rev)
	}
}

// requireConverged waits until the history has recorded every change and
// agrees with a linearizable Get, and the mirror's cache and its handler's
// view both equal what the Get read, values that do not decode left out.
// It returns that and the revision of the read. Each attempt reads again:
// a write that timed out may still be applied after its writer stopped.
func (s *soak) requireConverged() (map[string]etcdmirror.Object[string], int64) {
	t := s.t
	var want map[string]etcdmirror.Object[string]
	var rev int64
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		if !assert.NoError(c, s.hist.failure()) {
			return
		}
		var got map[string]change
		var err error
		got, want, rev, err = s.read()
		if !assert.NoError(c, err) {
			return
		}
		// Nothing else is written, so the last change under the prefix is
		// at the read's revision.
		if !assert.GreaterOrEqual(c, s.hist.lastRev(), rev, "the history reaches revision %d", rev) {
			return
		}
		assert.Equal(c, got, s.hist.state(), "the recorded history ends where etcd is at revision %d", rev)
		e := s.epoch
		assert.GreaterOrEqual(c, informerRev(e.run.inf), rev, "the informer reaches revision %d", rev)
		assert.Equal(c, want, cacheObjects(e.run.inf), "the cache equals etcd at revision %d", rev)
		for _, h := range e.handlers {
			assert.Equal(c, want, h.calls.view(), "the %s handler's view equals etcd at revision %d", h.name, rev)
		}
	}, convergeTimeout, 10*time.Millisecond)
	return want, rev
}

// read reads the prefix with a linearizable Get and returns what it holds,
// what of it a mirror holds (the values that decode) and the revision of
// the read.
func (s *soak) read() (map[string]change, map[string]etcdmirror.Object[string], int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := s.all.Get(ctx, soakPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, nil, 0, err
	}
	got := make(map[string]change)
	want := make(map[string]etcdmirror.Object[string])
	for _, kv := range resp.Kvs {
		k := string(kv.Key)
		c := change{rev: kv.ModRevision, createRev: kv.CreateRevision, version: kv.Version, lease: kv.Lease, value: string(kv.Value)}
		got[k] = c
		if o, good := c.object(k, soakDecode); good {
			want[k] = o
		}
	}
	return got, want, resp.Header.Revision, nil
}

// logf logs one step of the run, with the time since it started and the
// mirror's freshness, in verbose runs only: enough to follow a failure.
func (s *soak) logf(format string, args ...any) {
	if !testing.Verbose() {
		return
	}
	var fresh string
	if s.epoch != nil {
		fresh = fmt.Sprintf(" [mirror %d not synced]", s.epoch.n)
		if f := s.epoch.run.inf.Freshness(); !f.ConfirmedAt.IsZero() {
			fresh = fmt.Sprintf(" [mirror %d at rev %s, confirmed %v ago]", s.epoch.n, f.ResourceVersion, time.Since(f.ConfirmedAt).Round(time.Millisecond))
		}
	}
	s.t.Logf("%8v %s%s", time.Since(s.start).Round(time.Millisecond), fmt.Sprintf(format, args...), fresh)
}

func (s *soak) logSummary() {
	st := s.stats
	s.t.Logf("seed %d: %d writes (%d puts, %d deletes, %d transactions, %d undecodable values, %d failed); "+
		"faults: %d members closed and restarted, %d cuts, %d pauses, %d compactions, %d mirror restarts; "+
		"%d mirrors, %d checked against a Get; mirrors: %d lists (%d relists), %d watches, %d events; "+
		"calls checked: %d adds, %d updates, %d resyncs, %d observed deletes, %d unknown deletes (%d of them followed by the add of a re-created key); "+
		"%d undecodable values reported",
		s.seed, st.ops, st.puts, st.deletes, st.txns, st.badValues, st.writeErrs,
		st.kills, st.cuts, st.pauses, st.compactions, st.mirrorRestarts,
		st.epochs, st.checked, st.lists, st.relists, st.watches, st.events,
		st.calls.adds, st.calls.updates, st.calls.resyncs, st.calls.observedDeletes, st.calls.unknownDeletes, st.calls.replaced,
		st.objectErrors)
}
