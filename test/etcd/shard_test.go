package etcd

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/listwatch/mirror"
	etcdmirror "github.com/listwatch/mirror/adapters/etcd"
	"github.com/listwatch/mirror/shard"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// groupOptions are the options of the test groups' members: short leases,
// so that a test waits a few seconds for one to end, with room for a
// loaded machine under the race detector, where one request to etcd may
// take a good part of a second.
func groupOptions(name string) shard.MemberOptions {
	return shard.MemberOptions{
		Name:          name,
		TTL:           3 * time.Second,
		RenewDeadline: 1500 * time.Millisecond,
		RetryPeriod:   500 * time.Millisecond,
		ErrorHandler:  func(error) {}, // the cut-off and killed members fail by design
		Logger:        slog.New(slog.DiscardHandler),
	}
}

// splitTimeout bounds the wait for members to split the shards: a member
// claims them one request at a time.
const splitTimeout = 3 * eventTimeout

// runningMember is a shard.Member whose Run goroutine the test started.
type runningMember struct {
	*shard.Member
	cancel context.CancelFunc
	done   chan struct{}
	err    error // Run's, once done is closed
	once   sync.Once
}

// startMember runs a member of the group b keeps, and stops it when the
// test ends.
func startMember(t *testing.T, b shard.Backend, opts shard.MemberOptions) *runningMember {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &runningMember{Member: shard.NewMember(b, opts), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.err = r.Run(ctx)
	}()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop ends the member's Run and returns its error.
func (r *runningMember) stop(t *testing.T) error {
	t.Helper()
	r.once.Do(r.cancel)
	select {
	case <-r.done:
	case <-time.After(eventTimeout):
		t.Fatalf("member %s: Run did not return after its context ended", r.ID())
	}
	return r.err
}

// holds reports whether the member holds every shard of want, and none
// other.
func (r *runningMember) holdsExactly(want []int) bool { return slices.Equal(r.Held(), want) }

// groupClaims returns the claims etcd holds under prefix: the holder's ID
// by shard, and each claim's CreateRevision.
func groupClaims(t *testing.T, c *clientv3.Client, prefix string) (holders map[int]string, created map[int]int64) {
	t.Helper()
	resp, err := c.Get(context.Background(), prefix+"shards/", clientv3.WithPrefix())
	require.NoError(t, err)
	holders, created = map[int]string{}, map[int]int64{}
	for _, kv := range resp.Kvs {
		digits := strings.TrimPrefix(string(kv.Key), prefix+"shards/")
		s, err := strconv.Atoi(digits)
		if err != nil || len(digits) != 5 {
			continue // not a claim
		}
		holders[s], created[s] = string(kv.Value), kv.CreateRevision
	}
	return holders, created
}

// shardsOf returns, in order, the shards holders gives member id.
func shardsOf(holders map[int]string, id string) []int {
	var out []int
	for s, h := range holders {
		if h == id {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

// splitEvenly waits until members hold all of the group's shards between
// them, each shard once, as etcd's claims say and as each member's Held
// says.
func splitEvenly(t *testing.T, c *clientv3.Client, prefix string, members ...*runningMember) map[int]string {
	t.Helper()
	var holders map[int]string
	defer func() {
		if t.Failed() {
			h, _ := groupClaims(t, c, prefix)
			for _, m := range members {
				t.Logf("member %s: holds %d, etcd says %d", m.ID(), len(m.Held()), len(shardsOf(h, m.ID())))
				for _, s := range m.Held() {
					if h[s] != m.ID() {
						t.Logf("shard %d (and maybe more) held by %s, etcd says %q", s, m.ID(), h[s])
						break
					}
				}
			}
			t.Logf("etcd claims: %d", len(h))
		}
	}()
	require.Eventually(t, func() bool {
		holders, _ = groupClaims(t, c, prefix)
		if len(holders) != shard.DefaultShards {
			return false
		}
		seen := map[int]bool{}
		for _, m := range members {
			held := m.Held()
			if len(held) == 0 || !slices.Equal(held, shardsOf(holders, m.ID())) {
				return false
			}
			for _, s := range held {
				if seen[s] {
					return false
				}
				seen[s] = true
			}
		}
		return len(seen) == shard.DefaultShards
	}, splitTimeout, 50*time.Millisecond, "members never split the shards")
	return holders
}

func TestShardBackend_MembersSplitEveryShardOnce(t *testing.T) {
	t.Parallel()
	e := startEtcd(t)
	c := newClient(t, e.endpoint())
	const prefix = "/group/"
	// Keys that are not records are skipped and reported, not fatal.
	_, err := c.Put(context.Background(), prefix+"junk", "x")
	require.NoError(t, err)
	_, err = c.Put(context.Background(), prefix+"shards/7", "x")
	require.NoError(t, err)

	var logs lockedBuffer
	b := etcdmirror.NewShardBackend(c, prefix, etcdmirror.Options{})
	var ms []*runningMember
	for i := range 3 {
		opts := groupOptions(fmt.Sprintf("m%d", i))
		opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		ms = append(ms, startMember(t, b, opts))
	}
	holders := splitEvenly(t, c, prefix, ms...)
	for _, m := range ms {
		assert.NotEmpty(t, shardsOf(holders, m.ID()), "member %s holds no shard", m.ID())
	}
	for _, bad := range []string{prefix + "junk", prefix + "shards/7"} {
		assert.Contains(t, logs.String(), bad, "bad key not reported")
	}
	assert.Contains(t, logs.String(), etcdmirror.ErrShardRecord.Error())
}

func TestShardBackend_GracefulStopHandsOverAtOnce(t *testing.T) {
	t.Parallel()
	e := startEtcd(t)
	c := newClient(t, e.endpoint())
	const prefix = "/group/"
	b := etcdmirror.NewShardBackend(c, prefix, etcdmirror.Options{})
	// A lease far longer than the test waits: a hand-over that waited
	// for it would fail the test.
	opts := func(name string) shard.MemberOptions {
		o := groupOptions(name)
		o.TTL, o.RenewDeadline = 5*time.Minute, 4*time.Minute
		return o
	}
	a, other := startMember(t, b, opts("a")), startMember(t, b, opts("b"))
	splitEvenly(t, c, prefix, a, other)
	aID := a.ID()

	require.NoError(t, a.stop(t))
	// Once Run returned, etcd holds nothing of a's: its lease is revoked.
	resp, err := c.Get(context.Background(), prefix, clientv3.WithPrefix())
	require.NoError(t, err)
	var left []string
	for _, kv := range resp.Kvs {
		if string(kv.Value) == aID {
			left = append(left, string(kv.Key))
		}
	}
	assert.Empty(t, left, "keys left after a graceful stop")
	all := make([]int, shard.DefaultShards)
	for i := range all {
		all[i] = i
	}
	require.Eventually(t, func() bool { return other.holdsExactly(all) }, splitTimeout, 50*time.Millisecond)
}

func TestShardBackend_KilledMembersShardsTakenOnceItsLeaseEnds(t *testing.T) {
	t.Parallel()
	e := startEtcd(t)
	c := newClient(t, e.endpoint())
	const prefix = "/group/"
	killedClient := newClient(t, e.endpoint())
	killed := startMember(t, etcdmirror.NewShardBackend(killedClient, prefix, etcdmirror.Options{}), groupOptions("killed"))
	other := startMember(t, etcdmirror.NewShardBackend(c, prefix, etcdmirror.Options{}), groupOptions("other"))
	holders := splitEvenly(t, c, prefix, killed, other)
	killedID := killed.ID()
	itsShards := shardsOf(holders, killedID)

	// Watch for etcd ending the killed member's lease: its record goes.
	wctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ended := make(chan int64, 1)
	wch := c.Watch(wctx, prefix+"members/"+killedID)
	go func() {
		for resp := range wch {
			for _, ev := range resp.Events {
				if ev.Type == clientv3.EventTypeDelete {
					ended <- ev.Kv.ModRevision
					return
				}
			}
		}
	}()
	// As kill -9 would: the connection ends, nothing is revoked.
	require.NoError(t, killedClient.Close())

	var endRev int64
	select {
	case endRev = <-ended:
	case <-time.After(eventTimeout):
		t.Fatal("the killed member's lease never ended")
	}
	require.Eventually(t, func() bool {
		h, _ := groupClaims(t, c, prefix)
		return len(shardsOf(h, other.ID())) == shard.DefaultShards
	}, splitTimeout, 50*time.Millisecond)
	_, created := groupClaims(t, c, prefix)
	for _, s := range itsShards {
		assert.Greater(t, created[s], endRev, "shard %d claimed before the killed member's lease ended", s)
	}
}

func TestShardBackend_CutOffMemberStopsBeforeOthersClaim(t *testing.T) {
	t.Parallel()
	e := startEtcd(t)
	c := newClient(t, e.endpoint())
	const prefix = "/group/"
	p := newProxy(t, e.cliURL.Host)
	cutOff := startMember(t, etcdmirror.NewShardBackend(newClient(t, p.endpoint()), prefix, etcdmirror.Options{}), groupOptions("cut"))
	other := startMember(t, etcdmirror.NewShardBackend(c, prefix, etcdmirror.Options{}), groupOptions("other"))
	holders := splitEvenly(t, c, prefix, cutOff, other)
	s := shardsOf(holders, cutOff.ID())[0]
	h := shard.RangeOf(s, shard.DefaultShards).First

	grant, done, ok := cutOff.Hold(context.Background(), h)
	require.True(t, ok, "no grant on a held shard")
	defer done()
	tok, ok := shard.TokenFrom(grant)
	require.True(t, ok, "the grant carries no token")
	assert.Equal(t, prefix+fmt.Sprintf("shards/%05d", s), tok.Record)

	// When the other member's claim of s shows in etcd, the cut-off
	// member must have stopped already.
	type seen struct{ grantEnded, granting bool }
	observed := make(chan seen, 1)
	wctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wch := c.Watch(wctx, tok.Record)
	go func() {
		for resp := range wch {
			for _, ev := range resp.Events {
				if ev.Type == clientv3.EventTypePut && string(ev.Kv.Value) == other.ID() {
					_, release, granting := cutOff.Hold(context.Background(), h)
					if granting {
						release()
					}
					observed <- seen{grantEnded: grant.Err() != nil, granting: granting}
					return
				}
			}
		}
	}()
	p.Cut()

	select {
	case got := <-observed:
		assert.True(t, got.grantEnded, "the cut-off member's grant was live when another claimed its shard")
		assert.False(t, got.granting, "the cut-off member granted work after another claimed its shard")
	case <-time.After(eventTimeout):
		t.Fatal("the other member never claimed the cut-off member's shard")
	}
}

func TestFencedPut_RefusesAStaleHolder(t *testing.T) {
	t.Parallel()
	e := startEtcd(t)
	c := newClient(t, e.endpoint())
	const prefix = "/group/"
	p := newProxy(t, e.cliURL.Host)
	staleClient := newClient(t, p.endpoint())
	stale := startMember(t, etcdmirror.NewShardBackend(staleClient, prefix, etcdmirror.Options{}), groupOptions("stale"))
	current := startMember(t, etcdmirror.NewShardBackend(c, prefix, etcdmirror.Options{}), groupOptions("current"))
	holders := splitEvenly(t, c, prefix, stale, current)
	s := shardsOf(holders, stale.ID())[0]
	h := shard.RangeOf(s, shard.DefaultShards).First
	staleGrant, staleDone, ok := stale.Hold(context.Background(), h)
	require.True(t, ok)
	defer staleDone()

	// The stale member freezes, as under SIGSTOP, and its shard moves.
	p.Pause()
	require.Eventually(t, func() bool { return slices.Contains(current.Held(), s) }, eventTimeout, 50*time.Millisecond)
	grant, done, ok := current.Hold(context.Background(), h)
	require.True(t, ok)
	defer done()
	_, err := etcdmirror.FencedPut(grant, c, "/data/k", "current")
	require.NoError(t, err, "the current holder's write")

	// It resumes and, ignoring its ended context, writes.
	p.Resume()
	_, err = etcdmirror.FencedPut(context.WithoutCancel(staleGrant), staleClient, "/data/k", "stale")
	require.ErrorIs(t, err, shard.ErrFenced, "the stale holder's write")
	resp, err := c.Get(context.Background(), "/data/k")
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1)
	assert.Equal(t, "current", string(resp.Kvs[0].Value))
}

func TestFencedTxn_RefusesOnlyASupersededToken(t *testing.T) {
	t.Parallel()
	e := startEtcd(t)
	c := newClient(t, e.endpoint())
	ctx := context.Background()
	const claimKey = "/group/shards/00003"
	put, err := c.Put(ctx, claimKey, "holder")
	require.NoError(t, err)
	first := shard.Token{Shard: 3, Record: claimKey, Value: put.Header.Revision}
	_, err = c.Put(ctx, "/data/guard", "g")
	require.NoError(t, err)
	guardHolds := clientv3.Compare(clientv3.Value("/data/guard"), "=", "g")
	guardFails := clientv3.Compare(clientv3.Value("/data/guard"), "=", "other")

	for _, tc := range []struct {
		name      string
		ctx       context.Context
		before    func(t *testing.T) // run before the write
		cmp       clientv3.Cmp
		fenced    bool
		succeeded bool
	}{
		{name: "current claim", ctx: shard.WithToken(ctx, first), cmp: guardHolds, succeeded: true},
		{name: "current claim, the caller's comparison fails", ctx: shard.WithToken(ctx, first), cmp: guardFails},
		{name: "claim put over", ctx: shard.WithToken(ctx, first), cmp: guardHolds, succeeded: true, before: func(t *testing.T) {
			// A put over the key keeps its CreateRevision: the same claim.
			_, err := c.Put(ctx, claimKey, "holder")
			require.NoError(t, err)
		}},
		{name: "claim released", ctx: shard.WithToken(ctx, first), cmp: guardHolds, fenced: true, before: func(t *testing.T) {
			_, err := c.Delete(ctx, claimKey)
			require.NoError(t, err)
		}},
		{name: "shard claimed again", ctx: shard.WithToken(ctx, first), cmp: guardFails, fenced: true, before: func(t *testing.T) {
			_, err := c.Put(ctx, claimKey, "next")
			require.NoError(t, err)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.before != nil {
				tc.before(t)
			}
			resp, err := etcdmirror.FencedTxn(tc.ctx, c, []clientv3.Cmp{tc.cmp}, clientv3.OpPut("/data/k", tc.name))
			if tc.fenced {
				require.ErrorIs(t, err, shard.ErrFenced)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.succeeded, resp.Succeeded)
		})
	}
	t.Run("no token", func(t *testing.T) {
		_, err := etcdmirror.FencedPut(ctx, c, "/data/k", "v")
		require.ErrorIs(t, err, etcdmirror.ErrNoToken)
	})
}

func TestShardBackend_RefusalIsPermanent(t *testing.T) {
	t.Parallel()
	e := startEtcd(t)
	enableAuth(t, e)
	root := newUserClient(t, e, "root", "rootpw")
	ctx := context.Background()
	// A user who may read the group's prefix but not write it.
	for _, step := range []func() error{
		func() error { _, err := root.RoleAdd(ctx, "group-reader"); return err },
		func() error {
			_, err := root.RoleGrantPermission(ctx, "group-reader", "/group/", clientv3.GetPrefixRangeEnd("/group/"), clientv3.PermissionType(clientv3.PermRead))
			return err
		},
		func() error { _, err := root.UserAdd(ctx, "group-reader", "pw"); return err },
		func() error { _, err := root.UserGrantRole(ctx, "group-reader", "group-reader"); return err },
	} {
		require.NoError(t, step())
	}
	for _, tc := range []struct{ name, user string }{
		{"no permission on the prefix", "reader"},
		{"no write permission", "group-reader"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := etcdmirror.NewShardBackend(newUserClient(t, e, tc.user, "pw"), "/group/", etcdmirror.Options{})
			m := startMember(t, b, groupOptions(tc.user))
			select {
			case <-m.done:
			case <-time.After(eventTimeout):
				t.Fatal("a refused member kept running")
			}
			require.ErrorIs(t, m.err, mirror.ErrPermanent)
			assert.Empty(t, m.Held())
		})
	}
}
