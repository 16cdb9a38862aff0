package shard_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/memsource"
	"github.com/listwatch/mirror/reconcile"
	"github.com/listwatch/mirror/shard"
)

// quiet keeps the examples' output to what they print.
var quiet = slog.New(slog.DiscardHandler)

// member runs a member of the group b keeps until ctx ends; held is sent
// the number of shards it holds at each change.
func member(ctx context.Context, wg *sync.WaitGroup, b shard.Backend, opts shard.MemberOptions, held chan<- int) *shard.Member {
	opts.Logger = quiet
	m := shard.NewMember(b, opts)
	n := 0
	m.Subscribe(func(gained, lost []int) {
		n += len(gained) - len(lost)
		held <- n
	})
	wg.Go(func() { _ = m.Run(ctx) })
	return m
}

// With one shard, a group elects a leader: the member that holds the
// shard. Work is done under a grant of Hold, whose context carries the
// claim's fencing token and ends if the leader must stop. A leader that
// stops hands over at once: the standby leads without waiting for a
// lease to end. Leadership is not sticky: a member that joins may be
// assigned the shard (Assign decides, by member ID), and the leader then
// hands it over once its work in progress is done.
func ExampleMember_leaderElection() {
	b := shard.NewMemory(shard.MemoryOptions{}) // an etcd.ShardBackend in production
	opts := shard.MemberOptions{Shards: 1}

	actx, stopA := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	aHeld := make(chan int, 4)
	opts.Name = "a"
	a := member(actx, &wg, b, opts, aHeld)
	fmt.Println("a leads:", <-aHeld == 1)

	// The leader's work, fenced by its token.
	ctx, done, ok := a.Hold(context.Background(), 0)
	if ok {
		tok, _ := shard.TokenFrom(ctx)
		fmt.Println("a works on shard", tok.Shard)
	}

	// b joins, a standby: while a's work goes on, b may do none, even if
	// the group assigns b the shard (a hands it over once its work is
	// done).
	bctx, stopB := context.WithCancel(context.Background())
	bHeld := make(chan int, 4)
	opts.Name = "b"
	standby := member(bctx, &wg, b, opts, bHeld)
	_, bDone, bOK := standby.Hold(context.Background(), 0)
	if bOK {
		bDone()
	}
	fmt.Println("b may work while a does:", bOK)
	if ok {
		done()
	}

	stopA() // a leaves: it releases the shard
	fmt.Println("b leads:", <-bHeld == 1)
	stopB()
	wg.Wait()
	// Output:
	// a leads: true
	// a works on shard 0
	// b may work while a does: false
	// b leads: true
}

type item struct{ Name string }

func itemKey(i item) (string, error) { return i.Name, nil }

// A sharded reconcile loop (reconcile.Options.Shards): each replica of a
// controller mirrors every key, but reconciles only the keys of the
// shards its member holds, so the replicas share the keys, each
// reconciled by one of them.
func ExampleMember_shardedLoop() {
	src := memsource.New(itemKey, memsource.Options{}) // the controller's source
	b := shard.NewMemory(shard.MemoryOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup

	const keys = 100
	var mu sync.Mutex
	by := map[string]map[string]bool{} // key → the replicas that reconciled it
	done := make(chan struct{})
	replica := func(name string, held chan<- int) *shard.Member {
		inf := mirror.NewInformer(src, mirror.InformerOptions[string, item]{KeyFunc: itemKey, Logger: quiet})
		m := member(ctx, &wg, b, shard.MemberOptions{Name: name}, held)
		loop := reconcile.New(reconcile.Func[string](func(ctx context.Context, key string) (reconcile.Result, error) {
			mu.Lock()
			defer mu.Unlock()
			if by[key] == nil {
				by[key] = map[string]bool{}
				if len(by) == keys {
					close(done)
				}
			}
			by[key][name] = true
			return reconcile.Result{}, nil
		}), reconcile.Options{Name: name, Shards: m, Logger: quiet})
		if _, err := reconcile.Watch(loop, inf, mirror.HandlerOptions{}); err != nil {
			panic(err)
		}
		wg.Go(func() { _ = inf.Run(ctx) })
		wg.Go(func() { _ = loop.Run(ctx) })
		return m
	}

	// Two replicas; the keys come once each holds what the group assigns
	// it. (While the group settles, a shard may move once more, and a key
	// be reconciled by one replica, then by the next.)
	aHeld, bHeld := make(chan int, 64), make(chan int, 64)
	ma, mb := replica("a", aHeld), replica("b", bHeld)
	settled := func(na, nb int) bool {
		if na == 0 || nb == 0 {
			return false // not both joined
		}
		share := map[string]int{}
		for _, id := range shard.Assign([]string{ma.ID(), mb.ID()}, shard.DefaultShards) {
			share[id]++
		}
		return na == share[ma.ID()] && nb == share[mb.ID()]
	}
	for na, nb := 0, 0; !settled(na, nb); {
		select {
		case na = <-aHeld:
		case nb = <-bHeld:
		}
	}
	for i := range keys {
		src.Put(item{Name: fmt.Sprintf("key-%03d", i)})
	}
	<-done
	cancel()
	wg.Wait()
	perReplica, once := map[string]int{}, true
	for _, names := range by {
		once = once && len(names) == 1
		for name := range names {
			perReplica[name]++
		}
	}
	fmt.Println("keys reconciled:", len(by))
	fmt.Println("each by one replica:", once)
	fmt.Println("both replicas worked:", perReplica["a"] > 0 && perReplica["b"] > 0)
	// Output:
	// keys reconciled: 100
	// each by one replica: true
	// both replicas worked: true
}
