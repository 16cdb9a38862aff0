package shard

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// work is one piece of work a member granted, as the history records it.
type work struct {
	member     string
	key        int
	start, end time.Time
}

// TestMembers_NeverOverlapUnderRandomFaults runs a group through random
// cuts, graceful leaves and joins, with workers that take grants on random
// keys and honour their context, and checks the whole history: no key
// worked on by two members at once, and every fenced write made while its
// grant stood accepted.
func TestMembers_NeverOverlapUnderRandomFaults(t *testing.T) {
	for _, mode := range modes() {
		for seed := range uint64(3) {
			t.Run(fmt.Sprintf("%s/seed %d", modeName(mode), seed), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					runFaults(t, mode, seed)
				})
			})
		}
	}
}

func runFaults(t *testing.T, mode MemoryOptions, seed uint64) {
	const keys = 64
	rng := rand.New(rand.NewPCG(seed, 42))
	b := NewMemory(mode)
	var mu sync.Mutex
	var history []work
	var refused []string

	type live struct {
		r    *running
		stop func() // ends the workers, then the member
	}
	begin := func(name string) live {
		r := start(t, b, testOpts(name))
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		for w := range 3 {
			wrng := rand.New(rand.NewPCG(seed, uint64(w)+uint64(len(name))*7))
			wg.Go(func() {
				for ctx.Err() == nil {
					key := wrng.IntN(keys)
					wctx, done, ok := r.Hold(ctx, KeyHash(fmt.Sprint(key)))
					if !ok {
						select {
						case <-time.After(100 * time.Millisecond):
						case <-ctx.Done():
						}
						continue
					}
					w := work{member: r.ID(), key: key, start: time.Now()}
					select {
					case <-time.After(time.Duration(wrng.IntN(1500)) * time.Millisecond):
					case <-wctx.Done():
					}
					if wctx.Err() == nil {
						if err := b.CheckFence(mustToken(t, wctx)); err != nil {
							mu.Lock()
							refused = append(refused, fmt.Sprintf("%s key %d: %v", w.member, key, err))
							mu.Unlock()
						}
					}
					w.end = time.Now()
					done()
					mu.Lock()
					history = append(history, w)
					mu.Unlock()
				}
			})
		}
		return live{r: r, stop: func() { cancel(); wg.Wait(); r.stop() }}
	}

	members := []live{begin("m0"), begin("m1"), begin("m2")}
	next := 3
	for range 40 {
		time.Sleep(time.Duration(500+rng.IntN(1500)) * time.Millisecond)
		i := rng.IntN(len(members))
		switch op := rng.IntN(10); {
		case op < 5: // cut off for a while, maybe past the TTL
			id := members[i].r.ID()
			b.Cut(id, true)
			d := time.Duration(500+rng.IntN(6000)) * time.Millisecond
			time.AfterFunc(d, func() { b.Cut(id, false) })
		case op < 7 && len(members) > 1: // leave
			members[i].stop()
			members = append(members[:i], members[i+1:]...)
		case op < 9 && len(members) < 5: // join
			members = append(members, begin(fmt.Sprintf("m%d", next)))
			next++
		}
	}
	time.Sleep(20 * time.Second) // every cut healed, every lease settled
	synctest.Wait()
	var rs []*running
	for _, m := range members {
		rs = append(rs, m.r)
	}
	requireCover(t, DefaultShards, rs...)
	for _, m := range members {
		m.stop()
	}

	mu.Lock()
	defer mu.Unlock()
	assert.Empty(t, refused, "fenced writes made while their grant stood")
	byKey := map[int][]work{}
	for _, w := range history {
		byKey[w.key] = append(byKey[w.key], w)
	}
	require.NotEmpty(t, history)
	for key, ws := range byKey {
		for i, a := range ws {
			for _, c := range ws[i+1:] {
				if a.member != c.member && a.start.Before(c.end) && c.start.Before(a.end) {
					t.Fatalf("key %d worked on at once by %s [%v, %v] and %s [%v, %v]", key, a.member, a.start, a.end, c.member, c.start, c.end)
				}
			}
		}
	}
}
