package etcd

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/listwatch/mirror"
	etcdmirror "github.com/listwatch/mirror/adapters/etcd"
	"github.com/listwatch/mirror/source"
)

// defaultPageSize is the Reflector's default page size
// (ReflectorOptions.PageSize), which the raw paged loops use too.
const defaultPageSize = 5000

var benchLimits = flag.String("etcd.limits", "", "etcd benchmarks: comma-separated page sizes for BenchmarkPagedSync (default: the Reflector's)")

// BenchmarkInitialSync measures the initial sync of a prefix of small keys
// (values "v0", "v1"...): an informer over the adapter, with its defaults,
// run until it has synced, against a raw GetStream loop (the limit: etcd
// 3.7's RangeStream, one request answered in chunks) and a raw paged Get
// loop at the Reflector's default page size (what a list cost before
// RangeStream), each reading into a map. One op is one whole sync.
func BenchmarkInitialSync(b *testing.B) {
	c := sharedBenchEtcd(b)
	for _, n := range benchSizes() {
		prefix := syncPrefix(b, c, n)
		b.Run(sizeName(n), func(b *testing.B) {
			b.Run("impl=informer", func(b *testing.B) {
				benchInformerSync(b, etcdmirror.New(c, prefix, etcdmirror.Options{}), n, mirror.ListWatchOptions{})
			})
			b.Run("impl=raw-stream", func(b *testing.B) {
				benchRawSync(b, n, func(ctx context.Context) (map[string]etcdmirror.KV, error) {
					return rawStream(ctx, c, prefix)
				})
			})
			b.Run("impl=raw-paged", func(b *testing.B) {
				benchRawSync(b, n, func(ctx context.Context) (map[string]etcdmirror.KV, error) {
					return rawPaged(ctx, c, prefix, defaultPageSize)
				})
			})
		})
	}
}

// BenchmarkPagedSync measures the initial sync of 100k keys (10k with
// -short) by a source
// that can only page (an etcd older than 3.7, the gRPC proxy, any
// ListWatcher without ListChunks): an informer whose adapter is seen
// through List alone, against a raw paged Get loop, at the Reflector's
// default page size or at each size -etcd.limits names. etcd counts the
// rest of the range on every page, so a paged list costs the server time
// quadratic in the keys over the page size.
func BenchmarkPagedSync(b *testing.B) {
	c := sharedBenchEtcd(b)
	n := benchSizes()[0]
	prefix := syncPrefix(b, c, n)
	limits := []int64{defaultPageSize}
	if *benchLimits != "" {
		limits = nil
		for _, f := range strings.Split(*benchLimits, ",") {
			l, err := strconv.ParseInt(f, 10, 64)
			if err != nil {
				b.Fatalf("-etcd.limits: %v", err)
			}
			limits = append(limits, l)
		}
	}
	for _, limit := range limits {
		b.Run(fmt.Sprintf("%s/limit=%d", sizeName(n), limit), func(b *testing.B) {
			b.Run("impl=informer", func(b *testing.B) {
				lw := pagedOnly[etcdmirror.KV]{etcdmirror.New(c, prefix, etcdmirror.Options{})}
				benchInformerSync(b, lw, n, mirror.ListWatchOptions{PageSize: limit})
			})
			b.Run("impl=raw", func(b *testing.B) {
				benchRawSync(b, n, func(ctx context.Context) (map[string]etcdmirror.KV, error) {
					return rawPaged(ctx, c, prefix, limit)
				})
			})
		})
	}
}

// pagedOnly shows a ListWatcher through List and Watch alone, hiding
// ListChunks, so that a Reflector pages.
type pagedOnly[T any] struct{ source.ListWatcher[T] }

// benchInformerSync runs ops that each sync a new informer over lw, which
// lists n keys, and stops it once measured.
func benchInformerSync(b *testing.B, lw source.ListWatcher[etcdmirror.KV], n int, lwo mirror.ListWatchOptions) {
	var m opMeter
	b.ReportAllocs()
	for b.Loop() {
		m.start(b)
		inf := mirror.NewInformer(lw, mirror.InformerOptions[string, etcdmirror.KV]{
			KeyFunc:      etcdmirror.KeyOf[[]byte],
			Logger:       quiet,
			ListWatch:    lwo,
			ErrorHandler: func(err error) { b.Error(err) },
		})
		ctx, cancel := context.WithCancel(b.Context())
		done := make(chan error, 1)
		go func() { done <- inf.Run(ctx) }()
		if err := inf.WaitForSync(ctx); err != nil {
			b.Fatalf("not synced: %v", err)
		}
		m.stop(b, n)
		b.StopTimer()
		if got := inf.Len(); got != n {
			b.Fatalf("informer holds %d keys, want %d", got, n)
		}
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	m.report(b)
}

// benchRawSync runs ops that each call list, which must return n keys.
func benchRawSync(b *testing.B, n int, list func(context.Context) (map[string]etcdmirror.KV, error)) {
	var m opMeter
	b.ReportAllocs()
	for b.Loop() {
		m.start(b)
		got, err := list(b.Context())
		if err != nil {
			b.Fatal(err)
		}
		m.stop(b, n)
		if len(got) != n {
			b.Fatalf("read %d keys, want %d", len(got), n)
		}
	}
	m.report(b)
}
