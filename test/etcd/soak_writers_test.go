package etcd

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// startWriters starts the phase's writers; the returned function waits
// for them to end, once ctx has ended or they have made plan.maxOps
// operations, and adds up what they did.
func (s *soak) startWriters(ctx context.Context, phase int, plan soakPlan) (wait func()) {
	const writers = 4
	var ops atomic.Int64
	var wg sync.WaitGroup
	stats := make([]soakStats, writers)
	for i := range writers {
		rng := rand.New(rand.NewPCG(s.seed, uint64(1+phase*writers+i)))
		st := &stats[i]
		wg.Go(func() {
			tick := time.NewTicker(time.Second * writers / time.Duration(plan.opsPerSec))
			defer tick.Stop()
			for ops.Add(1) <= int64(plan.maxOps) {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				s.write(ctx, rng, st)
			}
		})
	}
	return func() {
		wg.Wait()
		for _, st := range stats {
			s.stats.ops += st.ops
			s.stats.puts += st.puts
			s.stats.deletes += st.deletes
			s.stats.txns += st.txns
			s.stats.badValues += st.badValues
			s.stats.writeErrs += st.writeErrs
		}
	}
}

// write makes one random change: a put, a deletion, or a transaction of
// several of them on distinct keys.
func (s *soak) write(ctx context.Context, rng *rand.Rand, st *soakStats) {
	key := func() string {
		if rng.IntN(10) < 8 {
			return soakKey(rng.IntN(soakHotKeys))
		}
		return soakKey(rng.IntN(soakKeys))
	}
	op := func(k string) clientv3.Op {
		if rng.IntN(10) < 3 {
			st.deletes++
			return clientv3.OpDelete(k)
		}
		st.puts++
		v := fmt.Sprintf("v-%d", rng.Uint32())
		if rng.IntN(100) < 4 {
			v = fmt.Sprintf("%s-%d", soakBad, rng.Uint32())
			st.badValues++
		}
		return clientv3.OpPut(k, v)
	}
	var ops []clientv3.Op
	if rng.IntN(4) == 0 {
		st.txns++
		seen := make(map[string]bool)
		for range 2 + rng.IntN(7) {
			if k := key(); !seen[k] { // etcd refuses a key twice in a transaction
				seen[k] = true
				ops = append(ops, op(k))
			}
		}
	} else {
		ops = append(ops, op(key()))
	}
	st.ops++
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := s.all.Txn(rctx).Then(ops...).Commit(); err != nil {
		st.writeErrs++
	}
}
