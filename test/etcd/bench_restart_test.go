package etcd

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/listwatch/mirror"
	etcdmirror "github.com/listwatch/mirror/adapters/etcd"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// BenchmarkRestart measures the restart of an informer from
// etcd.NewInformer over a prefix of n keys, after changes made while it
// was down: without a checkpoint (impl=relist: a full list, what every
// restart costs without checkpoints; the base benchstat -col /impl
// compares the others with), from its checkpoint (impl=checkpoint: it
// loads the file and watches from the checkpoint's revision), and from a
// checkpoint whose revision etcd has compacted meanwhile
// (impl=checkpoint-compacted: it loads the file, finds the revision gone,
// and relists against what it loaded). The 1M-key rows need -etcd.1m.
// One op is one restart, timed until the changes-only handler is given
// the last change made while it was down (a key that sorts after every
// other, put last), i.e. until it is current: "time to current". Each
// informer has two handlers, one replaying (handed the checkpoint's
// objects first) and one with HandlerOptions.ChangesOnly.
//
// Off the clock, before each op, restartChanges updates 100 keys and puts
// the marker key; after it, the informer stops, which writes the next
// op's checkpoint. Besides opMeter's figures, each row reports:
//
//	lists/op       lists the start asked etcd for (the adapter's Stats)
//	list-req/op    Range and RangeStream requests those lists sent
//	list-MB/op     bytes of keys and values they read
//	replay-notes/op   notifications the replaying handler was given
//	changes-notes/op  notifications the changes-only handler was given
//	file-MB        the checkpoint file's size (checkpoint rows)
//	synced-ms/op   how long after the start HasSynced turned true: for a
//	               resumed informer, once the checkpoint is loaded and the
//	               watch from its revision open (the changes since come
//	               after); for a relist, once the list is applied
//	stop-ms/op     how long Run took to return on stop, the final
//	               checkpoint's write included (not in time to current)
func BenchmarkRestart(b *testing.B) {
	c := sharedBenchEtcd(b)
	for _, n := range benchSizes() {
		prefix := benchPrefix(b, c, "restart-"+sizeName(n)[len("keys="):], n)
		b.Run(sizeName(n), func(b *testing.B) {
			for _, impl := range []string{restartRelist, restartCheckpoint, restartCompacted} {
				b.Run("impl="+impl, func(b *testing.B) { benchRestart(b, c, prefix, n, impl) })
			}
		})
	}
}

const (
	restartCheckpoint = "checkpoint"
	restartRelist     = "relist"
	restartCompacted  = "checkpoint-compacted"
	// restartUpdates is how many keys change while the informer is down.
	restartUpdates = 100
)

// restartedInformer is one start of the benchmark's informer.
type restartedInformer struct {
	lw              *etcdmirror.ListWatcher[[]byte]
	inf             *etcdInformer[[]byte]
	replay, changes atomic.Int64 // notifications each handler was given
	// current is closed once the changes-only handler is given the
	// marker at the awaited value, replayed once the replaying handler
	// is, and synced once the informer has synced.
	current, replayed chan struct{}
	synced            chan time.Duration
	cancel            context.CancelFunc
	done              chan error
}

// startRestarted starts, at start, an informer of prefix, with a
// checkpoint at path unless path is "", that awaits the marker at value.
func startRestarted(b *testing.B, c *clientv3.Client, prefix, path, value string, start time.Time) *restartedInformer {
	r := &restartedInformer{
		lw:      etcdmirror.New(c, prefix, etcdmirror.Options{}),
		current: make(chan struct{}), replayed: make(chan struct{}),
		synced: make(chan time.Duration, 1), done: make(chan error, 1),
	}
	r.inf = etcdmirror.NewInformer(r.lw, etcdmirror.InformerOptions[[]byte]{
		// The compacted rows' expired watch is expected.
		ErrorHandler: func(error) {},
		Checkpoint:   mirror.CheckpointOptions[etcdmirror.KV]{Path: path},
	})
	count := func(n *atomic.Int64, reached chan struct{}) mirror.Handler[etcdmirror.KV] {
		// A handler is called by one goroutine at a time: done needs
		// no lock.
		done := false
		seen := func(o etcdmirror.KV) {
			n.Add(1)
			if !done && o.Key == prefix+restartMarker && string(o.Value) == value {
				done = true
				close(reached)
			}
		}
		return mirror.HandlerFuncs[etcdmirror.KV]{
			AddFunc:    func(o etcdmirror.KV, _ bool) { seen(o) },
			UpdateFunc: func(_, o etcdmirror.KV) { seen(o) },
			DeleteFunc: func(etcdmirror.KV, bool) { n.Add(1) },
		}
	}
	if _, err := r.inf.AddEventHandler(count(&r.replay, r.replayed), mirror.HandlerOptions{}); err != nil {
		b.Fatal(err)
	}
	if _, err := r.inf.AddEventHandler(count(&r.changes, r.current), mirror.HandlerOptions{ChangesOnly: true}); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- r.inf.Run(ctx) }()
	go func() {
		if mirror.WaitForCacheSync(ctx, r.inf) == nil {
			r.synced <- time.Since(start)
		}
	}()
	return r
}

// restartMarker is the key restartChanges puts last; it sorts after the
// keys putN writes.
const restartMarker = "~marker"

// awaitCurrent waits until r's changes-only handler has been given the
// marker at the awaited value: the informer is then current, as the marker
// was the last change, and its cache holds it, as a handler is told of a
// change once it is cached. It returns how long after start the informer
// said it had synced (for a resumed informer, once its watch from the
// checkpoint's revision is open).
func (r *restartedInformer) awaitCurrent(b *testing.B) (synced time.Duration) {
	select {
	case <-r.current:
	case <-time.After(10 * time.Minute):
		b.Fatal("the informer did not reach the marker")
	}
	// Synced no later than current.
	return <-r.synced
}

// awaitReplay waits until the replaying handler has been given the marker
// at the awaited value: it has then been given everything the start
// delivers.
func (r *restartedInformer) awaitReplay(b *testing.B) {
	select {
	case <-r.replayed:
	case <-time.After(10 * time.Minute):
		b.Fatal("the replaying handler did not reach the marker")
	}
}

// stop stops r and returns how long Run took to return.
func (r *restartedInformer) stop(b *testing.B) time.Duration {
	start := time.Now()
	r.cancel()
	if err := <-r.done; err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

// restartChanges updates restartUpdates keys of the n under prefix, in
// one transaction, then puts the marker at a new value, which it returns
// with the revision of the put.
func restartChanges(b *testing.B, c *clientv3.Client, prefix string, n, op int) (string, int64) {
	ops := make([]clientv3.Op, 0, restartUpdates)
	for i := range restartUpdates {
		k := (op*restartUpdates + i*(n/restartUpdates)) % n
		ops = append(ops, clientv3.OpPut(nthKey(prefix, k), "op"+strconv.Itoa(op)))
	}
	if _, err := c.Txn(context.Background()).Then(ops...).Commit(); err != nil {
		b.Fatal(err)
	}
	value := "op" + strconv.Itoa(op)
	resp, err := c.Put(context.Background(), prefix+restartMarker, value)
	if err != nil {
		b.Fatal(err)
	}
	return value, resp.Header.Revision
}

func benchRestart(b *testing.B, c *clientv3.Client, prefix string, n int, impl string) {
	path := ""
	if impl != restartRelist {
		path = filepath.Join(b.TempDir(), "checkpoint")
		// The first checkpoint: a start without one, stopped once current.
		value, _ := restartChanges(b, c, prefix, n, -1)
		r := startRestarted(b, c, prefix, path, value, time.Now())
		r.awaitCurrent(b)
		r.awaitReplay(b)
		r.stop(b)
	}
	var (
		m                                   opMeter
		lists, listReqs, listBytes          int64
		replayNotes, changesNotes, fileSize int64
		synced, stopped                     time.Duration
	)
	b.ReportAllocs()
	for op := 0; b.Loop(); op++ {
		b.StopTimer()
		value, rev := restartChanges(b, c, prefix, n, op)
		if impl == restartCompacted {
			if _, err := c.Compact(context.Background(), rev, clientv3.WithCompactPhysical()); err != nil {
				b.Fatal(err)
			}
		}
		if path != "" {
			fi, err := os.Stat(path)
			if err != nil {
				b.Fatal(err)
			}
			fileSize += fi.Size()
		}
		m.start(b)
		start := time.Now()
		r := startRestarted(b, c, prefix, path, value, start)
		synced += r.awaitCurrent(b)
		m.stop(b, n)
		b.StopTimer()
		r.awaitReplay(b)
		st := r.lw.Stats()
		lists += st.Lists
		listReqs += st.ListRequests
		listBytes += st.ListBytes
		replayNotes += r.replay.Load()
		changesNotes += r.changes.Load()
		stopped += r.stop(b)
		b.StartTimer()
	}
	m.report(b)
	ops := float64(m.ops)
	if ops == 0 {
		return
	}
	b.ReportMetric(float64(lists)/ops, "lists/op")
	b.ReportMetric(float64(listReqs)/ops, "list-req/op")
	b.ReportMetric(float64(listBytes)/ops/1e6, "list-MB/op")
	b.ReportMetric(float64(replayNotes)/ops, "replay-notes/op")
	b.ReportMetric(float64(changesNotes)/ops, "changes-notes/op")
	b.ReportMetric(float64(synced.Milliseconds())/ops, "synced-ms/op")
	b.ReportMetric(float64(stopped.Milliseconds())/ops, "stop-ms/op")
	if path != "" {
		b.ReportMetric(float64(fileSize)/ops/1e6, "file-MB")
	}
}
