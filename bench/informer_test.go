package bench

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"testing"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/memsource"
	"github.com/listwatch/mirror/source"
	"k8s.io/client-go/tools/cache"
)

// handlerSpec is one event handler, the same on both sides.
type handlerSpec struct {
	add    func(o *Obj)
	update func(old, o *Obj)
	// maxBacklog bounds mirror's buffer for the handler
	// (mirror.HandlerOptions.MaxBacklog); client-go has no such bound.
	maxBacklog int
}

// startInformer starts an informer of one implementation over lw with
// the handlers, and returns the function that stops it and waits until it
// has.
type startInformer func(lw source.ListWatcher[*Obj], hs []handlerSpec) (stop func())

// informerImpls are the implementations the informer benchmarks compare:
// mirror.Informer with its default queue (in order, atomic relists), and
// client-go's SharedIndexInformer with its defaults in v0.37.1 (RealFIFO,
// atomic events, unlocked while processing, batched pops).
var informerImpls = []struct {
	name  string
	start startInformer
}{
	{"mirror", startMirror},
	{"clientgo", startClientGo},
}

func startMirror(lw source.ListWatcher[*Obj], hs []handlerSpec) func() {
	// Logs would land in the middle of the benchmark's result lines: a
	// nil Logger means slog.Default().
	inf := mirror.NewInformer(lw, mirror.InformerOptions[Key, *Obj]{KeyFunc: KeyOf, Logger: slog.New(slog.DiscardHandler)})
	for _, h := range hs {
		_, err := inf.AddEventHandler(mirror.HandlerFuncs[*Obj]{
			AddFunc:    func(o *Obj, _ bool) { h.add(o) },
			UpdateFunc: h.update,
		}, mirror.HandlerOptions{MaxBacklog: h.maxBacklog})
		if err != nil {
			panic(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = inf.Run(ctx)
	}()
	return func() { cancel(); <-done }
}

func startClientGo(lw source.ListWatcher[*Obj], hs []handlerSpec) func() {
	inf := cache.NewSharedIndexInformerWithOptions(ListerWatcher{lw}, &Obj{}, cache.SharedIndexInformerOptions{})
	for _, h := range hs {
		_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { h.add(o.(*Obj)) },
			UpdateFunc: func(old, o any) { h.update(old.(*Obj), o.(*Obj)) },
		})
		if err != nil {
			panic(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		inf.RunWithContext(ctx)
	}()
	return func() { cancel(); <-done }
}

// countTo returns a handler that counts the notifications it gets and
// calls reached(n) when the count reaches each n of at, in order.
func countTo(reached func(n int), at ...int) handlerSpec {
	seen := 0
	count := func() {
		seen++
		if len(at) > 0 && seen == at[0] {
			at = at[1:]
			reached(seen)
		}
	}
	return handlerSpec{
		add:    func(*Obj) { count() },
		update: func(_, _ *Obj) { count() },
	}
}

const e2eKeys = 10_000

// e2eEvents is 1M, or 100k with -short (CI's smoke run).
func e2eEvents() int { return scaled(1_000_000) }

// scaled returns n, or n/10 in short mode, which .ci/run uses to check
// that every benchmark still runs without paying for a full iteration.
func scaled(n int) int {
	if testing.Short() {
		return n / 10
	}
	return n
}

// BenchmarkInformer_EndToEnd1M measures the whole path of 1M changes to
// 10k objects: put into a memsource.Source, watched, queued, applied to
// the informer's cache and handed to every handler (1 or 16 of them). One
// op is the 1M changes, from the first put until the last handler has
// counted the last change; events/s is changes per second. The informer
// is built and synced with the initial 10k objects off the clock.
func BenchmarkInformer_EndToEnd1M(b *testing.B) {
	ns := names(e2eKeys)
	initial := make([]*Obj, e2eKeys)
	for i, n := range ns {
		initial[i] = &Obj{Namespace: namespace, Name: n, ResourceVersion: strconv.Itoa(i + 2)} // a new source is at 1
	}
	// The changes, made in advance with the versions the source will
	// give them (client-go reads an event's version from its object).
	events := make([]*Obj, e2eEvents())
	for i := range events {
		events[i] = &Obj{Namespace: namespace, Name: ns[i%e2eKeys], ResourceVersion: strconv.Itoa(e2eKeys + i + 2), Value: int64(i)}
	}
	for _, handlers := range []int{1, 16} {
		b.Run("handlers="+strconv.Itoa(handlers), func(b *testing.B) {
			for _, im := range informerImpls {
				b.Run("impl="+im.name, func(b *testing.B) {
					b.ReportAllocs()
					m0 := mallocs()
					var cpu cpuClock
					b.StopTimer()
					for range b.N {
						src := memsource.New(SourceKey, memsource.Options{HistoryLimit: e2eKeys + e2eEvents()})
						for _, o := range initial {
							src.Put(o)
						}
						var synced, done sync.WaitGroup
						hs := make([]handlerSpec, handlers)
						for i := range hs {
							synced.Add(1)
							done.Add(1)
							hs[i] = countTo(func(n int) {
								if n == e2eKeys {
									synced.Done()
								} else {
									done.Done()
								}
							}, e2eKeys, e2eKeys+e2eEvents())
						}
						stop := im.start(src, hs)
						synced.Wait()
						b.StartTimer()
						cpu.start()
						for _, o := range events {
							src.Put(o)
						}
						done.Wait()
						b.StopTimer()
						cpu.stop()
						stop()
					}
					cpu.report(b, "event", e2eEvents())
					reportPer(b, "event", e2eEvents(), m0)
				})
			}
		})
	}
}
