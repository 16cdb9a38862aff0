package memsource_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/listwatch/mirror/memsource"
	"github.com/listwatch/mirror/source"
)

// BenchmarkPut measures Put while watchers drain every change, from the
// first Put until every watcher has delivered the last change. The writer
// never runs more than half the history ahead of the slowest watcher, so
// the figure is the sustained throughput of the pair, not of Put alone.
func BenchmarkPut(b *testing.B) {
	for _, watchers := range []int{1, 16} {
		b.Run(fmt.Sprintf("watchers=%d", watchers), func(b *testing.B) {
			const keys, history = 1024, 1 << 16
			objs := make([]obj, keys)
			for i := range objs {
				objs[i] = obj{Key: fmt.Sprintf("key-%04d", i)}
			}
			s := newSource(memsource.Options{HistoryLimit: history})
			for _, o := range objs {
				s.Put(o)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()

			var wg sync.WaitGroup
			progress := make([]atomic.Int64, watchers) // the last Val each watcher saw
			for i := range watchers {
				w, err := s.Watch(ctx, source.WatchOptions{})
				if err != nil {
					b.Fatal(err)
				}
				wg.Go(func() {
					defer w.Stop()
					for {
						ev, err := w.Next(ctx)
						if err != nil {
							b.Error(err)
							return
						}
						if ev.Object.Key == "stop" {
							return
						}
						progress[i].Store(int64(ev.Object.Val))
					}
				})
			}
			behind := func(n int) bool {
				for i := range progress {
					if int64(n)-progress[i].Load() > history/2 {
						return true
					}
				}
				return false
			}

			b.ReportAllocs()
			start := time.Now()
			n := 0
			for b.Loop() {
				if n%1024 == 0 {
					for behind(n) {
						runtime.Gosched()
					}
				}
				o := objs[n%keys]
				o.Val = n
				s.Put(o)
				n++
			}
			s.Put(obj{Key: "stop"})
			wg.Wait()
			b.ReportMetric(float64(n*watchers)/time.Since(start).Seconds(), "events/s")
		})
	}
}

// BenchmarkList measures a paged list of 100k objects, 500 a page.
func BenchmarkList(b *testing.B) {
	const objects, pageSize = 100_000, 500
	s := newSource(memsource.Options{})
	for i := range objects {
		s.Put(obj{Key: fmt.Sprintf("key-%06d", i)})
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		opts := source.ListOptions{Limit: pageSize}
		for {
			page, err := s.List(ctx, opts)
			if err != nil {
				b.Fatal(err)
			}
			if page.Continue == "" {
				break
			}
			opts.Continue = page.Continue
		}
	}
	b.ReportMetric(float64(objects*b.N)/b.Elapsed().Seconds(), "objects/s")
}
