package etcd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/listwatch/mirror"
	etcdmirror "github.com/listwatch/mirror/adapters/etcd"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// BenchmarkConsistentRead measures a read right after a write: one op is
// a Put, then a read that must see it, timed from the Put's return to the
// read's. impl=mirror reads through Informer.Consistent (learn etcd's
// revision, wait for the mirror to apply it, then GetByKey); impl=raw-get
// is a linearizable clientv3 Get of the key, what a program without a
// mirror does; impl=mirror-afterwrite, for the key written, records the
// Put's revision (Informer.RecordWrite) and reads with GetAfterWrite,
// which waits for that revision without asking etcd anything. The etcd
// server runs in its own process.
//
// write=prefix writes the key the mirror watches: its event brings the
// revision. write=elsewhere writes outside the mirror's prefix and reads
// a key of it: the mirror hears nothing, and only a progress request tells
// it that it is current; impl=mirror-noprogress shows that without them the mirror
// learns it only from the adapter's own silence probe (a progress request
// after 5 s of silence) or etcd's periodic notification (every 10
// minutes): that row runs with a 100 ms bound, and stale-errors/op counts
// the reads that ended in ErrNotCurrent.
//
// Reported: p50-ms, p99-ms, p99.9-ms of the latency, stale-errors/op, and
// the client's allocations. Run enough ops for p99.9 to mean something:
// -benchtime=3000x.
func BenchmarkConsistentRead(b *testing.B) {
	c := sharedBenchEtcd(b)
	prefix := benchPrefix(b, c, "consistent", 1000)
	key := nthKey(prefix, 7)
	other := "/bench/consistent-elsewhere/x"
	lw := etcdmirror.New(c, prefix, etcdmirror.Options{})
	inf := etcdmirror.NewInformer(lw, etcdmirror.InformerOptions[[]byte]{Name: "bench", Logger: quiet})
	ctx, cancel := context.WithCancel(b.Context())
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	if err := inf.WaitForSync(ctx); err != nil {
		b.Fatal(err)
	}

	for _, write := range []string{"prefix", "elsewhere"} {
		target := key
		if write == "elsewhere" {
			target = other
		}
		b.Run("write="+write, func(b *testing.B) {
			b.Run("impl=mirror", func(b *testing.B) {
				benchReadAfterWrite(b, c, target, func(ctx context.Context, _ int64) (bool, error) {
					r, err := inf.Consistent(ctx, mirror.ConsistentOptions{})
					if err != nil {
						return false, err
					}
					_, ok := r.GetByKey(key)
					return ok, nil
				})
			})
			b.Run("impl=mirror-noprogress", func(b *testing.B) {
				opts := mirror.ConsistentOptions{ProgressInterval: -1}
				if write == "elsewhere" {
					// Each read would wait out a 3 s bound.
					opts.Timeout = 100 * time.Millisecond
				}
				benchReadAfterWrite(b, c, target, func(ctx context.Context, _ int64) (bool, error) {
					r, err := inf.Consistent(ctx, opts)
					if err != nil {
						return false, err
					}
					_, ok := r.GetByKey(key)
					return ok, nil
				})
			})
			if write == "prefix" {
				b.Run("impl=mirror-afterwrite", func(b *testing.B) {
					benchReadAfterWrite(b, c, target, func(ctx context.Context, written int64) (bool, error) {
						if err := inf.RecordWrite(key, strconv.FormatInt(written, 10)); err != nil {
							return false, err
						}
						_, ok, err := inf.GetAfterWrite(ctx, key, mirror.ConsistentOptions{})
						return ok, err
					})
				})
			}
			b.Run("impl=raw-get", func(b *testing.B) {
				benchReadAfterWrite(b, c, target, func(ctx context.Context, _ int64) (bool, error) {
					resp, err := c.Get(ctx, key)
					if err != nil {
						return false, err
					}
					return len(resp.Kvs) == 1, nil
				})
			})
		})
	}
}

// benchReadAfterWrite times read after each Put of target, b.N times.
func benchReadAfterWrite(b *testing.B, c *clientv3.Client, target string, read func(ctx context.Context, written int64) (bool, error)) {
	ctx := b.Context()
	lat := make([]time.Duration, 0, b.N)
	var stale int
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		resp, err := c.Put(ctx, target, strconv.Itoa(i))
		if err != nil {
			b.Fatal(err)
		}
		i++
		start := time.Now()
		ok, err := read(ctx, resp.Header.Revision)
		lat = append(lat, time.Since(start))
		switch {
		case err != nil && ctx.Err() == nil && isNotCurrent(err):
			stale++
		case err != nil:
			b.Fatal(err)
		case !ok:
			b.Fatal("key not found")
		}
	}
	slices.Sort(lat)
	b.ReportMetric(quantile(lat, 0.50).Seconds()*1e3, "p50-ms")
	b.ReportMetric(quantile(lat, 0.99).Seconds()*1e3, "p99-ms")
	b.ReportMetric(quantile(lat, 0.999).Seconds()*1e3, "p99.9-ms")
	b.ReportMetric(float64(stale)/float64(len(lat)), "stale-errors/op")
}

func isNotCurrent(err error) bool { return errors.Is(err, mirror.ErrNotCurrent) }

// quantile returns the q-th quantile of sorted (0 < q < 1), or 0 if it is
// empty.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(float64(len(sorted))*q))]
}

// BenchmarkConsistentList measures a consistent list of a whole prefix of
// 100k keys (1M with -etcd.1m, 10k with -short): impl=mirror asks etcd
// for its revision, waits for the running mirror to have applied it
// (Informer.Consistent) and lists every key (Reader.List), against
// impl=raw-stream, which streams every key from etcd into a map with one
// GetStream: what a program without a mirror does for a consistent list.
// Before each op a key elsewhere is written, so that the mirror has to
// confirm it is current (a progress request) rather than find itself
// there already. keys/s counts the keys read.
func BenchmarkConsistentList(b *testing.B) {
	c := sharedBenchEtcd(b)
	for _, n := range benchSizes() {
		prefix := syncPrefix(b, c, n)
		b.Run(sizeName(n), func(b *testing.B) {
			b.Run("impl=mirror", func(b *testing.B) {
				lw := etcdmirror.New(c, prefix, etcdmirror.Options{})
				inf := etcdmirror.NewInformer(lw, etcdmirror.InformerOptions[[]byte]{Name: "bench", Logger: quiet})
				ctx, cancel := context.WithCancel(b.Context())
				done := make(chan error, 1)
				go func() { done <- inf.Run(ctx) }()
				defer func() {
					cancel()
					<-done
				}()
				if err := inf.WaitForSync(ctx); err != nil {
					b.Fatal(err)
				}
				benchConsistentList(b, c, n, func(ctx context.Context) (int, error) {
					r, err := inf.Consistent(ctx, mirror.ConsistentOptions{})
					if err != nil {
						return 0, err
					}
					list := r.List()
					if len(list) > 0 && len(list[0].Value) == 0 {
						return 0, errors.New("no values")
					}
					return len(list), nil
				})
			})
			b.Run("impl=raw-stream", func(b *testing.B) {
				benchConsistentList(b, c, n, func(ctx context.Context) (int, error) {
					m, err := rawStream(ctx, c, prefix)
					return len(m), err
				})
			})
		})
	}
}

func benchConsistentList(b *testing.B, c *clientv3.Client, n int, list func(context.Context) (int, error)) {
	ctx := b.Context()
	b.ReportAllocs()
	var cpu cpuMeter
	i := 0
	for b.Loop() {
		b.StopTimer()
		if _, err := c.Put(ctx, "/bench/consistent-elsewhere/list", fmt.Sprint(i)); err != nil {
			b.Fatal(err)
		}
		i++
		b.StartTimer()
		cpu.start()
		got, err := list(ctx)
		cpu.stop()
		if err != nil {
			b.Fatal(err)
		}
		if got < n {
			b.Fatalf("listed %d keys, want %d", got, n)
		}
	}
	reportRate(b, n*b.N, "keys/s")
	cpu.report(b, n*b.N, "key")
}
