package shard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/source"
)

// testOpts is a short lease: 3 s, trusted for 2 s, renewed every 0.5 s.
func testOpts(name string) MemberOptions {
	return MemberOptions{
		Name:          name,
		TTL:           3 * time.Second,
		RenewDeadline: 2 * time.Second,
		RetryPeriod:   500 * time.Millisecond,
		DrainTimeout:  time.Second,
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
		ErrorHandler:  func(error) {},
	}
}

// running is a member running in a test.
type running struct {
	*Member
	stop func()
	err  chan error
}

func start(t *testing.T, b Backend, opts MemberOptions) *running {
	t.Helper()
	m := NewMember(b, opts)
	ctx, cancel := context.WithCancel(t.Context())
	r := &running{Member: m, err: make(chan error, 1)}
	go func() { r.err <- m.Run(ctx) }()
	var once sync.Once
	r.stop = func() {
		once.Do(func() {
			cancel()
			assert.NoError(t, <-r.err)
		})
	}
	t.Cleanup(r.stop)
	return r
}

// hashIn returns a hash in shard s of n.
func hashIn(s, n int) uint64 { return RangeOf(s, n).First }

// union checks that ms hold every shard once, and returns who holds each.
func requireCover(t *testing.T, n int, ms ...*running) map[int]string {
	t.Helper()
	owner := map[int]string{}
	for _, m := range ms {
		for _, s := range m.Held() {
			require.NotContains(t, owner, s, "shard %d held by %s and %s", s, owner[s], m.ID())
			owner[s] = m.ID()
		}
	}
	require.Len(t, owner, n)
	return owner
}

func modes() []MemoryOptions {
	return []MemoryOptions{{}, {ObserverExpiry: true}}
}

func modeName(o MemoryOptions) string {
	if o.ObserverExpiry {
		return "observer expiry"
	}
	return "backend expiry"
}

func TestMember_AloneHoldsEveryShard(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := start(t, NewMemory(MemoryOptions{}), testOpts("a"))
		time.Sleep(time.Second)
		synctest.Wait()
		requireCover(t, DefaultShards, m)
		ctx, done, ok := m.Hold(t.Context(), 12345)
		require.True(t, ok)
		tok, ok := TokenFrom(ctx)
		require.True(t, ok)
		assert.Equal(t, Of(12345, DefaultShards), tok.Shard)
		assert.Positive(t, tok.Value)
		done()
		done() // a second call does nothing
	})
}

func TestMembers_SplitTheShardsAsAssignSays(t *testing.T) {
	for _, mode := range modes() {
		t.Run(modeName(mode), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := NewMemory(mode)
				var ms []*running
				for _, name := range []string{"a", "b", "c"} {
					ms = append(ms, start(t, b, testOpts(name)))
				}
				time.Sleep(5 * time.Second)
				synctest.Wait()
				owner := requireCover(t, DefaultShards, ms...)
				want := Assign([]string{ms[0].ID(), ms[1].ID(), ms[2].ID()}, DefaultShards)
				for s, id := range want {
					assert.Equal(t, id, owner[s], "shard %d", s)
				}
			})
		})
	}
}

func TestMember_GracefulLeaveHandsOverBeforeTheTTL(t *testing.T) {
	for _, mode := range modes() {
		t.Run(modeName(mode), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := NewMemory(mode)
				a, c := start(t, b, testOpts("a")), start(t, b, testOpts("c"))
				time.Sleep(5 * time.Second)
				synctest.Wait()
				requireCover(t, DefaultShards, a, c)
				require.NotEmpty(t, a.Held())
				a.stop()
				// Well within one TTL (3 s): the leave released the
				// shards, no lease had to end.
				time.Sleep(500 * time.Millisecond)
				synctest.Wait()
				requireCover(t, DefaultShards, c)
			})
		})
	}
}

func TestMember_CutOffStopsWorkBeforeAnotherClaims(t *testing.T) {
	for _, mode := range modes() {
		t.Run(modeName(mode), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := NewMemory(mode)
				a := start(t, b, testOpts("a"))
				time.Sleep(time.Second)
				synctest.Wait()
				s := 7
				ctx, done, ok := a.Hold(t.Context(), hashIn(s, DefaultShards))
				require.True(t, ok)
				defer done()

				var mu sync.Mutex
				var workEnded, claimed time.Time
				context.AfterFunc(ctx, func() {
					mu.Lock()
					workEnded = time.Now()
					mu.Unlock()
				})
				c := start(t, b, testOpts("c"))
				c.Subscribe(func(gained, _ []int) {
					mu.Lock()
					defer mu.Unlock()
					if slices.Contains(gained, s) && claimed.IsZero() {
						claimed = time.Now()
					}
				})
				b.Cut(a.ID(), true)
				time.Sleep(10 * time.Second)
				synctest.Wait()

				_, _, ok = a.Hold(t.Context(), hashIn(s, DefaultShards))
				assert.False(t, ok, "a member past its deadline grants no work")
				mu.Lock()
				defer mu.Unlock()
				require.False(t, workEnded.IsZero(), "the work's context ended")
				require.False(t, claimed.IsZero(), "another member claimed the shard")
				assert.True(t, workEnded.Before(claimed), "work ended at %v, the shard was claimed at %v", workEnded, claimed)
				requireCover(t, DefaultShards, c)
				assert.Error(t, b.CheckFence(mustToken(t, ctx)), "the cut-off member's token is superseded")
			})
		})
	}
}

func mustToken(t *testing.T, ctx context.Context) Token {
	t.Helper()
	tok, ok := TokenFrom(ctx)
	require.True(t, ok)
	return tok
}

func TestMember_RejoinsAfterItsLeaseEnded(t *testing.T) {
	for _, mode := range modes() {
		t.Run(modeName(mode), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := NewMemory(mode)
				a, c := start(t, b, testOpts("a")), start(t, b, testOpts("c"))
				time.Sleep(5 * time.Second)
				synctest.Wait()
				old := a.ID()
				b.Cut(old, true)
				time.Sleep(10 * time.Second)
				synctest.Wait()
				requireCover(t, DefaultShards, c)
				assert.Empty(t, a.Held())
				b.Cut(old, false)
				time.Sleep(10 * time.Second)
				synctest.Wait()
				assert.NotEqual(t, old, a.ID(), "a member joins again under a new ID")
				requireCover(t, DefaultShards, a, c)
				assert.NotEmpty(t, a.Held())
			})
		})
	}
}

func TestMember_HandOverWaitsForWorkInProgress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := NewMemory(MemoryOptions{})
		opts := testOpts("a")
		opts.DrainTimeout = time.Minute
		a := start(t, b, opts)
		time.Sleep(time.Second)
		synctest.Wait()

		// Hold work on every shard, so that whichever moves is busy.
		var dones []func()
		var ctxs []context.Context
		for s := range DefaultShards {
			ctx, done, ok := a.Hold(t.Context(), hashIn(s, DefaultShards))
			require.True(t, ok)
			dones, ctxs = append(dones, done), append(ctxs, ctx)
		}
		c := start(t, b, testOpts("c"))
		time.Sleep(30 * time.Second)
		synctest.Wait()
		assert.Empty(t, c.Held(), "no shard is released while its work runs")
		moving := DefaultShards - len(a.Held())
		require.Positive(t, moving, "some shards are being handed over")
		for s := range DefaultShards {
			if !slices.Contains(a.Held(), s) {
				_, _, ok := a.Hold(t.Context(), hashIn(s, DefaultShards))
				assert.False(t, ok, "shard %d being handed over grants no work", s)
				assert.NoError(t, ctxs[s].Err(), "its work goes on until DrainTimeout")
			}
		}
		for _, done := range dones {
			done()
		}
		time.Sleep(time.Second)
		synctest.Wait()
		requireCover(t, DefaultShards, a, c)
		assert.Len(t, c.Held(), moving)
	})
}

func TestMember_DrainTimeoutEndsTheWorkThenReleases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := NewMemory(MemoryOptions{})
		a := start(t, b, testOpts("a")) // DrainTimeout 1 s
		time.Sleep(time.Second)
		synctest.Wait()
		ctx, done, ok := a.Hold(t.Context(), hashIn(0, DefaultShards))
		require.True(t, ok)
		c := start(t, b, testOpts("c"))
		var s0 string
		for range 10 {
			time.Sleep(time.Second)
			synctest.Wait()
			if !slices.Contains(a.Held(), 0) {
				s0 = "moving"
				break
			}
		}
		if s0 == "" {
			done()
			t.Skip("shard 0 stays with a in this assignment")
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		assert.ErrorIs(t, ctx.Err(), context.Canceled, "the work's context ended after DrainTimeout")
		assert.NotContains(t, c.Held(), 0, "the shard is not released before its work returned")
		done()
		time.Sleep(time.Second)
		synctest.Wait()
		assert.Contains(t, c.Held(), 0)
	})
}

func TestMember_RefusedForGoodFailsLoudly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := NewMemory(MemoryOptions{})
		b.Deny(fmt.Errorf("no permission on the lease records: %w", mirror.ErrPermanent))
		err := NewMember(b, testOpts("a")).Run(t.Context())
		require.ErrorIs(t, err, mirror.ErrPermanent)
	})
}

func TestMember_InvalidOptions(t *testing.T) {
	for name, o := range map[string]MemberOptions{
		"deadline not under TTL":   {TTL: time.Second, RenewDeadline: time.Second},
		"retry not under deadline": {TTL: 3 * time.Second, RenewDeadline: time.Second, RetryPeriod: time.Second},
		"negative shards":          {Shards: -1},
	} {
		t.Run(name, func(t *testing.T) {
			err := NewMember(NewMemory(MemoryOptions{}), o).Run(t.Context())
			require.ErrorIs(t, err, ErrOptions)
		})
	}
}

func TestMember_RunsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := start(t, NewMemory(MemoryOptions{}), testOpts("a"))
		time.Sleep(time.Second)
		synctest.Wait()
		require.NotEmpty(t, a.Held())
		assert.ErrorIs(t, a.Run(t.Context()), ErrStarted)
	})
}

func TestMember_SubscribeTellsWhatIsHeldThenChanges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := NewMemory(MemoryOptions{})
		a := start(t, b, testOpts("a"))
		time.Sleep(time.Second)
		synctest.Wait()
		var mu sync.Mutex
		held := map[int]bool{}
		a.Subscribe(func(gained, lost []int) {
			mu.Lock()
			defer mu.Unlock()
			for _, s := range gained {
				assert.False(t, held[s], "shard %d gained twice", s)
				held[s] = true
			}
			for _, s := range lost {
				assert.True(t, held[s], "shard %d lost before gained", s)
				delete(held, s)
			}
		})
		time.Sleep(time.Second)
		synctest.Wait()
		mu.Lock()
		assert.Len(t, held, DefaultShards)
		mu.Unlock()
		start(t, b, testOpts("c"))
		time.Sleep(5 * time.Second)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		var got []int
		for s := range held {
			got = append(got, s)
		}
		slices.Sort(got)
		assert.Equal(t, a.Held(), got)
	})
}

func TestMember_ErrorsNameTheMember(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := NewMemory(MemoryOptions{})
		var mu sync.Mutex
		var errs []error
		opts := testOpts("a")
		opts.ErrorHandler = func(err error) {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
		a := start(t, b, opts)
		time.Sleep(time.Second)
		synctest.Wait()
		b.Cut(a.ID(), true)
		time.Sleep(time.Second)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		require.NotEmpty(t, errs)
		assert.True(t, errors.Is(errs[0], source.ErrUnavailable), "%v", errs[0])
		assert.Contains(t, errs[0].Error(), a.ID())
	})
}
