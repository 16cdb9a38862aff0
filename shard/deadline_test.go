package shard

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// stuckBackend is a Memory backend whose Expire calls hang until their
// context ends, as calls to a backend that does not answer do.
type stuckBackend struct{ *Memory }

func (b stuckBackend) Join(ctx context.Context, id string, ttl time.Duration) (Lease, error) {
	l, err := b.Memory.Join(ctx, id, ttl)
	if err != nil {
		return nil, err
	}
	return stuckLease{l}, nil
}

type stuckLease struct{ Lease }

func (l stuckLease) Expire(ctx context.Context, m Record) error {
	<-ctx.Done()
	return ctx.Err()
}

func TestMember_EndsWorkAtItsDeadlineWhileItsLoopWaitsOnTheBackend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := NewMemory(MemoryOptions{ObserverExpiry: true})
		// Members that never renew: once their TTL has passed (before
		// the member's deadline), the member's loop spends a RetryPeriod
		// on each one's Expire, past its deadline.
		for i := range 10 {
			_, err := b.Join(t.Context(), fmt.Sprintf("ghost-%d", i), time.Second)
			require.NoError(t, err)
		}
		opts := testOpts("a")
		a := start(t, stuckBackend{b}, opts)
		time.Sleep(500 * time.Millisecond) // joined and claimed; the ghosts not yet judged ended
		synctest.Wait()
		held := a.Held()
		require.NotEmpty(t, held)
		ctx, done, ok := a.Hold(t.Context(), hashIn(held[0], DefaultShards))
		require.True(t, ok)
		defer done()

		cutAt := time.Now()
		b.Cut(a.ID(), true)
		var ended time.Time
		context.AfterFunc(ctx, func() { ended = time.Now() })
		time.Sleep(20 * time.Second)
		synctest.Wait()
		require.False(t, ended.IsZero(), "the work's context ended")
		assert.False(t, ended.After(cutAt.Add(opts.RenewDeadline)),
			"the work ended at %v after the cut, past the %v deadline", ended.Sub(cutAt), opts.RenewDeadline)
	})
}
