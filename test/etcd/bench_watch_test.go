package etcd

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/listwatch/mirror"
	etcdmirror "github.com/listwatch/mirror/adapters/etcd"
	"github.com/listwatch/mirror/source"
	clientv3 "go.etcd.io/etcd/client/v3"
)

const (
	// watchPuts is how many puts one op of BenchmarkWatchApply writes, one
	// to each of watchPuts existing keys, in transactions of watchTxnOps
	// puts with watchWriters transactions in flight.
	watchPuts    = 10_000
	watchTxnOps  = 100
	watchWriters = 4
)

// BenchmarkWatchApply measures how fast puts reach a mirror of watchPuts
// keys that is already synced: an informer whose handler sees each put,
// against a raw clientv3 Watch loop that applies each event to a map. The
// puts are written by this process, the same for every side, and count in
// its CPU time. One op is
// watchPuts puts, from the first write until the mirror has applied the
// last; puts/s is the domain unit, and p50-ms and p99-ms are the
// put-to-handler latencies (from the start of the transaction holding a
// put until the handler or the raw loop has it).
//
// Each side makes etcd do the same: one watch of the prefix from the
// revision after its list, without previous values (the adapter's
// default, Options.PrevValues off). The raw loop turns each put into the
// Object the adapter's New makes (key copied to a string, value as the
// client decoded it) and stores it in a map under its key; the informer
// does that through the adapter, its queue and its cache, then hands it
// to the handler on the handler's goroutine. A third side, adapter,
// applies the adapter's watch events to a map by hand, as the raw loop
// does: it splits the informer's gap into what the adapter costs and
// what the core costs. The timed part holds puts only. (Asking for
// previous values makes etcd read each event's previous value from its
// store: measured with the server in this process, that alone took a raw
// loop from 12.2 to 15.5 cpu-us/put and from 77k to 55k puts/s.)
func BenchmarkWatchApply(b *testing.B) {
	c := sharedBenchEtcd(b)
	// The keys the ops update; their values do not parse as sequence
	// numbers.
	prefix := benchPrefix(b, c, "watch", watchPuts)
	var seq int // sequence number of the next put, over every side

	b.Run("impl=informer", func(b *testing.B) {
		var cur atomic.Pointer[applyRecorder]
		apply := func(o etcdmirror.KV) {
			if r := cur.Load(); r != nil {
				r.applied(o.Value)
			}
		}
		inf := mirror.NewInformer(etcdmirror.New(c, prefix, etcdmirror.Options{}), mirror.InformerOptions[string, etcdmirror.KV]{
			KeyFunc:      etcdmirror.KeyOf[[]byte],
			Logger:       quiet,
			ErrorHandler: func(err error) { b.Error(err) },
		})
		_, err := inf.AddEventHandler(mirror.HandlerFuncs[etcdmirror.KV]{
			AddFunc:    func(o etcdmirror.KV, _ bool) { apply(o) },
			UpdateFunc: func(_, o etcdmirror.KV) { apply(o) },
		}, mirror.HandlerOptions{})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(b.Context())
		done := make(chan error, 1)
		go func() { done <- inf.Run(ctx) }()
		defer func() {
			cancel()
			if err := <-done; err != nil {
				b.Error(err)
			}
		}()
		if err := mirror.WaitForCacheSync(b.Context(), inf); err != nil {
			b.Fatal(err)
		}
		runWatchApply(b, c, prefix, &seq, &cur)
	})

	// The adapter's watch alone, applied to a map by hand as the raw loop
	// does: what separates it from raw is the adapter, from informer the
	// core.
	b.Run("impl=adapter", func(b *testing.B) {
		var cur atomic.Pointer[applyRecorder]
		ctx, cancel := context.WithCancel(b.Context())
		var wg sync.WaitGroup
		defer func() {
			cancel()
			wg.Wait()
		}()
		lw := etcdmirror.New(c, prefix, etcdmirror.Options{})
		list, err := lw.List(ctx, source.ListOptions{})
		if err != nil {
			b.Fatal(err)
		}
		mirrored := make(map[string]etcdmirror.KV, len(list.Items))
		for _, o := range list.Items {
			mirrored[o.Key] = o
		}
		w, err := lw.Watch(ctx, source.WatchOptions{ResourceVersion: list.ResourceVersion, AllowBookmarks: true})
		if err != nil {
			b.Fatal(err)
		}
		wg.Go(func() {
			defer w.Stop()
			for {
				ev, err := w.Next(ctx)
				if err != nil {
					if ctx.Err() == nil {
						b.Error(err)
					}
					return
				}
				switch ev.Type {
				case source.Deleted:
					delete(mirrored, ev.Object.Key)
				case source.Added, source.Updated:
					mirrored[ev.Object.Key] = ev.Object
					if r := cur.Load(); r != nil {
						r.applied(ev.Object.Value)
					}
				}
			}
		})
		runWatchApply(b, c, prefix, &seq, &cur)
	})

	b.Run("impl=raw", func(b *testing.B) {
		var cur atomic.Pointer[applyRecorder]
		ctx, cancel := context.WithCancel(b.Context())
		var wg sync.WaitGroup
		defer func() {
			cancel()
			wg.Wait()
		}()
		resp, err := c.Get(ctx, prefix, clientv3.WithPrefix())
		if err != nil {
			b.Fatal(err)
		}
		mirrored := make(map[string]etcdmirror.KV, len(resp.Kvs))
		for _, kv := range resp.Kvs {
			mirrored[string(kv.Key)] = kvObject(kv.Key, kv.Value, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease)
		}
		ch := c.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
		wg.Go(func() {
			for resp := range ch {
				if err := resp.Err(); err != nil {
					if ctx.Err() == nil {
						b.Error(err)
					}
					return
				}
				for _, ev := range resp.Events {
					kv := ev.Kv
					if ev.Type == clientv3.EventTypeDelete {
						delete(mirrored, string(kv.Key))
						continue
					}
					o := kvObject(kv.Key, kv.Value, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease)
					mirrored[o.Key] = o
					if r := cur.Load(); r != nil {
						r.applied(o.Value)
					}
				}
			}
		})
		runWatchApply(b, c, prefix, &seq, &cur)
	})
}

// runWatchApply is the timed part of BenchmarkWatchApply: each op installs
// a recorder in cur, for the mirror's apply function to report to, writes
// watchPuts puts and waits until the recorder has seen them all.
func runWatchApply(b *testing.B, c *clientv3.Client, prefix string, seq *int, cur *atomic.Pointer[applyRecorder]) {
	var latencies []time.Duration
	puts := 0
	var cpu cpuMeter
	b.ReportAllocs()
	for b.Loop() {
		cpu.start()
		r := newApplyRecorder(*seq, watchPuts)
		*seq += watchPuts
		cur.Store(r)
		if err := writePuts(b.Context(), c, prefix, r); err != nil {
			b.Fatal(err)
		}
		select {
		case <-r.done:
		case <-time.After(time.Minute):
			b.Fatalf("the mirror did not apply %d puts in a minute", watchPuts)
		}
		cpu.stop()
		puts += watchPuts
		b.StopTimer()
		for i := range watchPuts {
			latencies = append(latencies, r.recv[i]-r.sent[i])
		}
		b.StartTimer()
	}
	cur.Store(nil)
	reportRate(b, puts, "puts/s")
	cpu.report(b, puts, "put")
	slices.Sort(latencies)
	b.ReportMetric(percentile(latencies, 50).Seconds()*1e3, "p50-ms")
	b.ReportMetric(percentile(latencies, 99).Seconds()*1e3, "p99-ms")
}

// applyRecorder follows one op of BenchmarkWatchApply: put i (counted from
// the op's first) writes the sequence number base+i, as its value, to key
// i, at sent[i]; the mirror applied it at recv[i]. Times are measured from
// start.
type applyRecorder struct {
	start time.Time
	base  int
	sent  []time.Duration
	recv  []time.Duration
	// n counts the puts applied; done is closed when all have been. Both
	// belong to the one goroutine that calls applied.
	n    int
	done chan struct{}
}

func newApplyRecorder(base, puts int) *applyRecorder {
	return &applyRecorder{
		start: time.Now(),
		base:  base,
		sent:  make([]time.Duration, puts),
		recv:  make([]time.Duration, puts),
		done:  make(chan struct{}),
	}
}

// applied notes that the mirror has applied a put with value. Values that
// are not a sequence number of this op are ignored. It must be called from
// one goroutine only.
func (r *applyRecorder) applied(value []byte) {
	s, err := strconv.Atoi(string(value))
	i := s - r.base
	if err != nil || i < 0 || i >= len(r.recv) || r.recv[i] != 0 {
		return
	}
	r.recv[i] = time.Since(r.start)
	r.n++
	if r.n == len(r.recv) {
		close(r.done)
	}
}

// writePuts writes r's puts in transactions of watchTxnOps puts, with
// watchWriters transactions in flight, and notes when each was sent.
func writePuts(ctx context.Context, c *clientv3.Client, prefix string, r *applyRecorder) error {
	var next atomic.Int64 // first put of the next transaction
	errs := make([]error, watchWriters)
	var wg sync.WaitGroup
	for w := range watchWriters {
		wg.Go(func() {
			ops := make([]clientv3.Op, 0, watchTxnOps)
			for {
				first := int(next.Add(watchTxnOps)) - watchTxnOps
				if first >= len(r.sent) {
					return
				}
				ops = ops[:0]
				for i := first; i < min(first+watchTxnOps, len(r.sent)); i++ {
					ops = append(ops, clientv3.OpPut(nthKey(prefix, i), strconv.Itoa(r.base+i)))
				}
				sent := time.Since(r.start)
				for i := first; i < first+len(ops); i++ {
					r.sent[i] = sent
				}
				if _, err := c.Txn(ctx).Then(ops...).Commit(); err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// percentile returns the p-th percentile of sorted, or 0 if it is empty.
func percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, len(sorted)*p/100)]
}
