package bench

import (
	"context"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/listwatch/mirror/workqueue"
	cgworkqueue "k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
)

// The workqueue benchmarks (workqueue_*_test.go) run the same workloads on
// three queues of int keys, as sub-benchmarks impl=mirror (our
// workqueue.Queue), impl=client-go (client-go's typed rate-limiting queue
// with its default controller rate limiter) and impl=controller-runtime
// (controller-runtime's priority queue with its defaults). wqueue is the
// little they have in common that the workloads use.
type wqueue interface {
	// add adds a key at the queue's live (default) priority.
	add(k int)
	// addBackground adds a key as an initial list would: ours at
	// PriorityBackground, controller-runtime's at its low priority,
	// client-go's (which has none) as add does.
	addBackground(k int)
	addRateLimited(k int)
	get() (int, bool)
	done(k int)
	forget(k int)
	length() int
	shutDown()
}

// wqImpl makes a fresh queue of one implementation. maxWait is our
// queue's aging bound (zero: the default); the peers have none.
type wqImpl struct {
	name string
	make func(maxWait time.Duration) wqueue
}

var wqImpls = []wqImpl{
	{"mirror", func(maxWait time.Duration) wqueue {
		return mirrorQ{workqueue.New[int](workqueue.Options{MaxWait: maxWait})}
	}},
	{"client-go", func(time.Duration) wqueue {
		return clientgoQ{cgworkqueue.NewTypedRateLimitingQueue(cgworkqueue.DefaultTypedControllerRateLimiter[int]())}
	}},
	{"controller-runtime", func(time.Duration) wqueue {
		// An empty name turns its metrics off, as ours and client-go's
		// are off.
		return crQ{priorityqueue.New[int]("")}
	}},
}

// runWQ runs body as one sub-benchmark per queue implementation.
func runWQ(b *testing.B, body func(b *testing.B, im wqImpl)) {
	for _, im := range wqImpls {
		b.Run("impl="+im.name, func(b *testing.B) { body(b, im) })
	}
}

type mirrorQ struct{ q *workqueue.Queue[int] }

func (m mirrorQ) add(k int)            { m.q.Add(k) }
func (m mirrorQ) addBackground(k int)  { m.q.AddWithPriority(k, workqueue.PriorityBackground) }
func (m mirrorQ) addRateLimited(k int) { m.q.AddRateLimited(k) }
func (m mirrorQ) done(k int)           { m.q.Done(k) }
func (m mirrorQ) forget(k int)         { m.q.Forget(k) }
func (m mirrorQ) length() int          { return m.q.Len() }
func (m mirrorQ) shutDown()            { m.q.ShutDown() }
func (m mirrorQ) get() (int, bool) {
	k, err := m.q.Get(context.Background())
	return k, err == nil
}

type clientgoQ struct {
	q cgworkqueue.TypedRateLimitingInterface[int]
}

func (c clientgoQ) add(k int)            { c.q.Add(k) }
func (c clientgoQ) addBackground(k int)  { c.q.Add(k) }
func (c clientgoQ) addRateLimited(k int) { c.q.AddRateLimited(k) }
func (c clientgoQ) done(k int)           { c.q.Done(k) }
func (c clientgoQ) forget(k int)         { c.q.Forget(k) }
func (c clientgoQ) length() int          { return c.q.Len() }
func (c clientgoQ) shutDown()            { c.q.ShutDown() }
func (c clientgoQ) get() (int, bool) {
	k, shutdown := c.q.Get()
	return k, !shutdown
}

// crLowPriority is the priority controller-runtime's handlers give the
// items of an initial list (handler.LowPriority).
var crLowPriority = -100

type crQ struct {
	q priorityqueue.PriorityQueue[int]
}

func (c crQ) add(k int) { c.q.Add(k) }
func (c crQ) addBackground(k int) {
	c.q.AddWithOpts(priorityqueue.AddOpts{Priority: &crLowPriority}, k)
}
func (c crQ) addRateLimited(k int) { c.q.AddRateLimited(k) }
func (c crQ) done(k int)           { c.q.Done(k) }
func (c crQ) forget(k int)         { c.q.Forget(k) }
func (c crQ) length() int          { return c.q.Len() }
func (c crQ) shutDown()            { c.q.ShutDown() }
func (c crQ) get() (int, bool) {
	k, shutdown := c.q.Get()
	return k, !shutdown
}

// workers runs n goroutines that get keys from q and hand each to work,
// then Done it, until q shuts down. stop shuts q down and waits for them.
func workers(q wqueue, n int, work func(k int)) (stop func()) {
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for {
				k, ok := q.get()
				if !ok {
					return
				}
				work(k)
				q.done(k)
			}
		})
	}
	return func() {
		q.shutDown()
		wg.Wait()
	}
}

// percentile returns the p-th percentile (0 < p ≤ 1) of ds, sorting it.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	i := int(float64(len(ds))*p+0.5) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}

// wqScaled returns full, or short in -short mode (CI's smoke run, which
// must take seconds).
func wqScaled[T any](full, short T) T {
	if testing.Short() {
		return short
	}
	return full
}
