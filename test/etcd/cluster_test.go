package etcd

import (
	"context"
	"testing"
	"time"

	etcdmirror "github.com/listwatch/mirror/adapters/etcd"
	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

func TestCluster_StoppedMemberEndsWatchAndOthersServe(t *testing.T) {
	t.Parallel() // mostly waits for elections and reconnections
	cl := startCluster(t, 3)
	m0, m1, m2 := cl.members[0], cl.members[1], cl.members[2]
	ctx := context.Background()
	opts := etcdmirror.Options{ProgressInterval: 100 * time.Millisecond, RequestTimeout: 2 * time.Second}

	// The client talks to m0 only.
	c0 := newClient(t, m0.endpoint())
	lw0 := etcdmirror.New(c0, "/k/", opts)
	w := watch(t, lw0, source.WatchOptions{ResourceVersion: rvOf(currentRev(t, c0))})
	_, err := c0.Put(ctx, "/k/before", "1")
	require.NoError(t, err)
	last := next(t, w)

	m0.close()
	_, err = nextErr(w)
	require.ErrorIs(t, err, source.ErrUnavailable, "the watch ends instead of hanging")

	// A client of the other members watches on from where the first
	// stopped and misses nothing.
	c12 := newClient(t, m1.endpoint(), m2.endpoint())
	_, err = c12.Put(ctx, "/k/after", "2")
	require.NoError(t, err)
	w12 := watch(t, etcdmirror.New(c12, "/k/", opts), source.WatchOptions{ResourceVersion: last.ResourceVersion})
	ev := next(t, w12)
	assert.Equal(t, source.Added, ev.Type)
	assert.Equal(t, "/k/after", ev.Object.Key)

	// m0, restarted from its data directory, catches up and serves its
	// client again.
	m0.restart(t)
	w = watchRetrying(t, lw0, source.WatchOptions{ResourceVersion: last.ResourceVersion})
	ev = next(t, w)
	assert.Equal(t, "/k/after", ev.Object.Key)
	res, err := lw0.List(ctx, source.ListOptions{})
	require.NoError(t, err)
	assert.Len(t, res.Items, 2)
}

func TestCluster_MemberThatLosesItsLeaderEndsWatch(t *testing.T) {
	t.Parallel() // mostly waits for elections and reconnections
	cl := startCluster(t, 3)
	c := newClient(t, cl.members[2].endpoint())
	// Progress requests off: the member itself must end the watch.
	lw := etcdmirror.New(c, "/l/", etcdmirror.Options{ProgressInterval: -1})
	w := watch(t, lw, source.WatchOptions{ResourceVersion: rvOf(currentRev(t, c))})

	cl.members[0].close()
	cl.members[1].close()
	_, err := nextErr(w)
	require.ErrorIs(t, err, source.ErrUnavailable)
	require.ErrorIs(t, err, rpctypes.ErrNoLeader)
}
