package k8s

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/adapters/k8s"
	"github.com/listwatch/mirror/shard"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// shardTTL is the lease of the member that stops renewing, and of the
// member that expires it: short, so that the test does not wait long, yet
// long enough for a renewal to get through a loaded machine. The other
// tests' members have the default lease.
const shardTTL = 5 * time.Second

// shardGroup is the group the tests' members join, in a namespace of
// their own. It is not a valid Lease name, so the backend hashes it.
const shardGroup = "Test Group/1"

// shardMember is a shard.Member running until its test ends, or until
// stop.
type shardMember struct {
	*shard.Member
	cancel context.CancelFunc
	done   chan error
	errs   *errorLog
}

// startMember runs a member of the group whose records b keeps.
func startMember(t *testing.T, b shard.Backend, name string, opts shard.MemberOptions) *shardMember {
	t.Helper()
	opts.Name = name
	if opts.Shards == 0 {
		opts.Shards = 8
	}
	log := &errorLog{}
	opts.ErrorHandler = log.add
	opts.Logger = slog.New(slog.DiscardHandler)
	m := &shardMember{Member: shard.NewMember(b, opts), done: make(chan error, 1), errs: log}
	var ctx context.Context
	ctx, m.cancel = context.WithCancel(context.Background())
	go func() { m.done <- m.Run(ctx) }()
	t.Cleanup(func() {
		_ = m.stop(t)
		if t.Failed() {
			errs := m.errs.all()
			t.Logf("member %s: %d errors reported; the last: %v", name, len(errs), errs[max(0, len(errs)-5):])
		}
	})
	return m
}

// stop ends the member's Run and returns its error; later calls return
// nil.
func (m *shardMember) stop(t *testing.T) error {
	t.Helper()
	m.cancel()
	select {
	case err, ok := <-m.done:
		if ok {
			close(m.done)
		}
		return err
	case <-time.After(convergeTimeout):
		t.Fatalf("member %s did not stop", m.ID())
		return nil
	}
}

// requireSplit waits until the members hold every one of n shards between
// them, none twice, as the group's claim Leases on the server say too.
// It returns the holder of each shard.
func requireSplit(t *testing.T, cs kubernetes.Interface, ns string, n int, members ...*shardMember) map[int]*shardMember {
	t.Helper()
	var owner map[int]*shardMember
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		owner = map[int]*shardMember{}
		for _, m := range members {
			for _, s := range m.Held() {
				if prev, ok := owner[s]; ok {
					c.Errorf("shard %d held by %s and %s", s, prev.ID(), m.ID())
				}
				owner[s] = m
			}
		}
		assert.Len(c, owner, n, "shards held")
		// Settled: each holds what Assign gives it, not one member
		// everything while the others are joining.
		ids := make([]string, len(members))
		for i, m := range members {
			ids[i] = m.ID()
		}
		for s, id := range shard.Assign(ids, n) {
			if m := owner[s]; m != nil {
				assert.Equal(c, id, m.ID(), "holder of shard %d", s)
			}
		}
		holders := claimHolders(c, cs, ns)
		for s, m := range owner {
			assert.Equal(c, m.ID(), holders[s], "holder of shard %d's Lease", s)
		}
	}, convergeTimeout, 20*time.Millisecond)
	return owner
}

// claimHolders returns the holder of each shard's claim Lease in ns.
func claimHolders(c assert.TestingT, cs kubernetes.Interface, ns string) map[int]string {
	list, err := cs.CoordinationV1().Leases(ns).List(context.Background(), metav1.ListOptions{LabelSelector: k8s.ShardKindLabel + "=claim"})
	if !assert.NoError(c, err) {
		return nil
	}
	out := map[int]string{}
	for _, l := range list.Items {
		var s int
		_, err := fmt.Sscan(l.Labels[k8s.ShardLabel], &s)
		assert.NoError(c, err, "shard label of %s", l.Name)
		out[s] = *l.Spec.HolderIdentity
	}
	return out
}

func TestShardBackend_MembersSplitAllShardsNoneHeldTwice(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t)
	ns := c.namespace(t)
	b := k8s.NewShardBackend(c.client, ns, shardGroup)
	// Names that are no valid Lease names: the backend hashes them.
	a := startMember(t, b, "Replica A/ä", shard.MemberOptions{})
	bb := startMember(t, b, "replica_b", shard.MemberOptions{})
	cc := startMember(t, b, "replica-c", shard.MemberOptions{})
	owner := requireSplit(t, c.client, ns, 8, a, bb, cc)
	for _, m := range []*shardMember{a, bb, cc} {
		assert.Contains(t, slices.Collect(maps.Values(owner)), m, "%s holds no shard", m.ID())
	}

	leases, err := c.client.CoordinationV1().Leases(ns).List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	ids := map[string]bool{}
	for _, l := range leases.Items {
		assert.Empty(t, validation.IsDNS1123Subdomain(l.Name), "lease name %q", l.Name)
		if l.Labels[k8s.ShardKindLabel] == "member" {
			ids[*l.Spec.HolderIdentity] = true
			assert.Equal(t, int32(shard.DefaultTTL/time.Second), *l.Spec.LeaseDurationSeconds, "lease %s", l.Name)
		}
	}
	assert.Equal(t, map[string]bool{a.ID(): true, bb.ID(): true, cc.ID(): true}, ids, "member Leases' holders")
}

func TestShardBackend_GracefulLeaveHandsOverWithoutWaitingForTheTTL(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t)
	ns := c.namespace(t)
	b := k8s.NewShardBackend(c.client, ns, shardGroup)
	// A lease far longer than the wait below: only a release lets the
	// other member take the shards in time.
	long := shard.MemberOptions{TTL: 10 * convergeTimeout}
	a := startMember(t, b, "a", long)
	bb := startMember(t, b, "b", long)
	owner := requireSplit(t, c.client, ns, 8, a, bb)
	var left []int
	for s, m := range owner {
		if m == a {
			left = append(left, s)
		}
	}
	require.NotEmpty(t, left)

	aID := a.ID()
	require.NoError(t, a.stop(t))
	// Run returned: a's Lease is gone and its claims released.
	_, err := c.client.CoordinationV1().Leases(ns).Get(context.Background(), b.MemberLeaseName(aID), metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "a's member Lease: %v", err)
	holders := claimHolders(t, c.client, ns)
	for _, s := range left {
		assert.NotEqual(t, aID, holders[s], "shard %d still held by a", s)
	}
	requireSplit(t, c.client, ns, 8, bb)
}

func TestShardBackend_MemberThatStopsRenewingLosesItsShardsOnlyAfterItsGrantsStopped(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t)
	ns := c.namespace(t)
	// a reaches the server through a proxy of its own, which the test
	// cuts: a stops renewing without leaving.
	p, err := newProxy()
	require.NoError(t, err)
	t.Cleanup(p.close)
	require.NoError(t, p.up(c.proxy.addr))
	config := rest.CopyConfig(c.config)
	config.Host = "https://" + p.addr
	config.Timeout = time.Second
	cut, err := kubernetes.NewForConfig(config)
	require.NoError(t, err)

	short := shard.MemberOptions{TTL: shardTTL, RenewDeadline: shardTTL * 3 / 5, RetryPeriod: shardTTL / 5}
	a := startMember(t, k8s.NewShardBackend(cut, ns, shardGroup), "a", short)
	var mu sync.Mutex
	gainedAt := map[int]time.Time{}
	bb := startMember(t, k8s.NewShardBackend(c.client, ns, shardGroup), "b", short)
	stopWatching := bb.Subscribe(func(gained, _ []int) {
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		for _, s := range gained {
			gainedAt[s] = now
		}
	})
	defer stopWatching()
	owner := requireSplit(t, c.client, ns, 8, a, bb)
	var aShards []int
	for s, m := range owner {
		if m == a {
			aShards = append(aShards, s)
		}
	}
	require.NotEmpty(t, aShards)

	mu.Lock()
	clear(gainedAt)
	mu.Unlock()

	// Work a grants on one of its shards, in progress when it is cut off.
	work, done, ok := a.Hold(context.Background(), shard.RangeOf(aShards[0], 8).First)
	require.True(t, ok, "a grants work on its shard %d", aShards[0])
	defer done()
	endedAt := make(chan time.Time, 1)
	context.AfterFunc(work, func() { endedAt <- time.Now() })
	aID := a.ID()
	p.down()

	requireSplit(t, c.client, ns, 8, bb)
	var ended time.Time
	select {
	case ended = <-endedAt:
	default:
		t.Fatal("the work a granted goes on after b took a's shards")
	}
	_, _, stillGranted := a.Hold(context.Background(), shard.RangeOf(aShards[0], 8).First)
	assert.False(t, stillGranted, "a grants work after its renewal deadline")
	mu.Lock()
	defer mu.Unlock()
	for _, s := range aShards {
		require.Contains(t, gainedAt, s)
		assert.True(t, ended.Before(gainedAt[s]), "b gained shard %d before a's work ended", s)
	}
	// b expired a: its member Lease is gone, though it never left.
	_, err = c.client.CoordinationV1().Leases(ns).Get(context.Background(), k8s.NewShardBackend(c.client, ns, shardGroup).MemberLeaseName(aID), metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "a's member Lease: %v", err)
}

func TestShardBackend_MemberRefusedByRBACFailsWithErrPermanent(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t)
	nobody := c.clientWithToken(t, nobodyToken)
	for _, tc := range []struct {
		name  string
		verbs []string // on leases, granted to nobodyUser
	}{
		{"no permission", nil},
		{"read only", []string{"get", "list", "watch"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ns := c.namespace(t)
			if tc.verbs != nil {
				grantLeases(t, c.client, ns, tc.verbs)
			}
			m := startMember(t, k8s.NewShardBackend(nobody, ns, shardGroup), "refused", shard.MemberOptions{})
			select {
			case err := <-m.done:
				close(m.done)
				require.ErrorIs(t, err, mirror.ErrPermanent)
				assert.True(t, apierrors.IsForbidden(err), "the server's status: %v", err)
			case <-time.After(convergeTimeout):
				t.Fatalf("Run goes on, refused: %v", m.errs.all())
			}
		})
	}
}

// grantLeases lets nobodyUser use verbs on the Leases of ns.
func grantLeases(t *testing.T, cs kubernetes.Interface, ns string, verbs []string) {
	t.Helper()
	ctx := context.Background()
	_, err := cs.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "leases"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{coordinationv1.GroupName}, Resources: []string{"leases"}, Verbs: verbs}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "leases"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "leases"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: nobodyUser}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
}

// changeLog keeps the changes a handler was told, and the keys they
// leave it knowing of. A handler is told after the cache has changed, so
// a test that waited on the cache waits on the view too before it takes.
type changeLog struct {
	mu      sync.Mutex
	changes []mirror.Change[k8s.Key, *corev1.ConfigMap]
	view    map[k8s.Key]bool
}

func (l *changeLog) add(c mirror.Change[k8s.Key, *corev1.ConfigMap]) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.changes = append(l.changes, c)
	if l.view == nil {
		l.view = map[k8s.Key]bool{}
	}
	if c.Type == mirror.Deleted {
		delete(l.view, c.Key)
	} else {
		l.view[c.Key] = true
	}
}

// known returns a copy of the keys the handler knows of.
func (l *changeLog) known() map[k8s.Key]bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.view)
}

// take returns the changes told since the last take.
func (l *changeLog) take() []mirror.Change[k8s.Key, *corev1.ConfigMap] {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.changes
	l.changes = nil
	return out
}

// shardedCache is a member with an informer of the ConfigMaps of its
// shards.
type shardedCache struct {
	*shardMember
	lw  *k8s.ShardedListWatcher[*corev1.ConfigMap]
	inf *mirror.Informer[k8s.Key, *corev1.ConfigMap]
	log *changeLog
}

func startShardedCache(t *testing.T, c *cluster, ns string, s scope, name string) *shardedCache {
	t.Helper()
	m := startMember(t, k8s.NewShardBackend(c.client, ns, shardGroup), name, shard.MemberOptions{})
	sc := &shardedCache{shardMember: m, lw: k8s.NewSharded(configMaps.lw(c.client, s.options())), log: &changeLog{}}
	t.Cleanup(sc.lw.Follow(m.Member))
	sc.inf = k8s.NewInformer(sc.lw, k8s.InformerOptions[*corev1.ConfigMap]{
		ListWatch: mirror.ListWatchOptions{InitialBackoff: 20 * time.Millisecond, MaxBackoff: 500 * time.Millisecond},
		// A rebalance ends the watch with an expiry; that is no failure.
		ErrorHandler: func(error) {},
	})
	_, err := sc.inf.AddChangeHandler(sc.log.add, mirror.HandlerOptions{})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sc.inf.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		assert.NoError(t, <-done)
	})
	return sc
}

// requireHolds waits until the cache, and its handler's view, hold
// exactly the objects of want whose UIDs hash into the member's shards.
func (sc *shardedCache) requireHolds(t *testing.T, want []*corev1.ConfigMap) map[k8s.Key]bool {
	t.Helper()
	var mine map[k8s.Key]bool
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		mine = map[k8s.Key]bool{}
		for _, obj := range want {
			if sc.Owns(k8s.ShardHash(obj)) {
				mine[key(obj)] = true
			}
		}
		cached := map[k8s.Key]bool{}
		for _, obj := range sc.inf.All() {
			cached[key(obj)] = true
		}
		assert.Equal(c, mine, cached, "%s's cache", sc.ID())
		known := sc.log.known()
		if known == nil {
			known = map[k8s.Key]bool{}
		}
		assert.Equal(c, mine, known, "%s's handler", sc.ID())
	}, convergeTimeout, 20*time.Millisecond)
	return mine
}

func TestShardedListWatcher_CacheHoldsOnlyItsShardsAndFollowsARebalance(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t)
	s := c.scope(t)
	ns := c.namespace(t) // the Leases'
	var all []*corev1.ConfigMap
	for i := range 40 {
		all = append(all, configMaps.create(t, c.client, s.ns, fmt.Sprintf("o%d", i), s.labels))
	}

	a := startShardedCache(t, c, ns, s, "a")
	requireSplit(t, c.client, ns, 8, a.shardMember)
	a.requireHolds(t, all)
	a.log.take()

	// b joins: a hands over about half of the shards, and its cache lets
	// their objects go; b's holds them.
	bc := startShardedCache(t, c, ns, s, "b")
	requireSplit(t, c.client, ns, 8, a.shardMember, bc.shardMember)
	mineA := a.requireHolds(t, all)
	mineB := bc.requireHolds(t, all)
	assert.NotEmpty(t, mineA)
	assert.NotEmpty(t, mineB)
	for k := range mineA {
		assert.NotContains(t, mineB, k, "held by both")
	}
	assert.Len(t, all, len(mineA)+len(mineB))

	// The server sent only the objects of a's ranges.
	list, err := c.client.CoreV1().ConfigMaps(s.ns).List(context.Background(), metav1.ListOptions{
		LabelSelector: s.selector, ShardSelector: k8s.ShardSelector(a.lw.Ranges()),
	})
	require.NoError(t, err)
	assert.Len(t, list.Items, len(mineA), "objects the server lists for a's ranges")

	// What a's handler saw of the objects that left: deletions of unknown
	// final state, not live, that a's ListWatcher no longer selects.
	var moved []k8s.Key
	for _, ch := range a.log.take() {
		require.Equal(t, mirror.Deleted, ch.Type, "change of %v", ch.Key)
		assert.True(t, ch.FinalStateUnknown, "deletion of %v", ch.Key)
		assert.Equal(t, mirror.OriginRelist, ch.Origin, "deletion of %v", ch.Key)
		assert.False(t, a.lw.Selects(ch.Object), "deletion of %v", ch.Key)
		moved = append(moved, ch.Key)
	}
	assert.ElementsMatch(t, slices.Collect(maps.Keys(mineB)), moved, "objects that left a")

	// A deletion at the source in a's shards: live, and selected.
	var gone *corev1.ConfigMap
	for _, obj := range all {
		if mineA[key(obj)] {
			gone = obj
			break
		}
	}
	configMaps.delete(t, c.client, key(gone))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, ok := a.inf.GetByKey(key(gone))
		assert.False(c, ok)
		assert.NotContains(c, a.log.known(), key(gone), "a's handler")
	}, convergeTimeout, 20*time.Millisecond)
	changes := a.log.take()
	require.Len(t, changes, 1)
	assert.Equal(t, mirror.Deleted, changes[0].Type)
	assert.Equal(t, mirror.OriginLive, changes[0].Origin)
	assert.True(t, a.lw.Selects(changes[0].Object))
	all = slices.DeleteFunc(all, func(obj *corev1.ConfigMap) bool { return obj == gone })

	// b leaves: a takes its shards back, and its handler is told of their
	// objects as added by a relist.
	require.NoError(t, bc.stop(t))
	requireSplit(t, c.client, ns, 8, a.shardMember)
	a.requireHolds(t, all)
	var back []k8s.Key
	for _, ch := range a.log.take() {
		if ch.Origin == mirror.OriginResync {
			continue
		}
		require.Equal(t, mirror.Added, ch.Type, "change of %v", ch.Key)
		assert.Equal(t, mirror.OriginRelist, ch.Origin, "addition of %v", ch.Key)
		back = append(back, ch.Key)
	}
	assert.ElementsMatch(t, slices.Collect(maps.Keys(mineB)), back, "objects that came back to a")
}
