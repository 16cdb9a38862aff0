package nats_test

// Benchmarks of the mirror against a raw JetStream KV watcher, the
// fastest thing a user's own code can do with the same client, with the
// server in a child process (natsproc_test.go). bench/NATS.md has the
// results and the commands.

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/listwatch/mirror"
	natsmirror "github.com/listwatch/mirror/adapters/nats"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// quiet is the benchmarks' informers' logger.
var quiet = slog.New(slog.DiscardHandler)

// benchValue is every benchmark key's value: 100 bytes.
var benchValue = make([]byte, 100)

// connectBench connects to url without the tests' helpers' options.
func connectBench(b *testing.B, url string) jetstream.JetStream {
	b.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	return js
}

// fill puts n keys, key(i) for i in [from, from+n), into bucket, publishing
// asynchronously, and waits until the server has stored them all.
func fill(js jetstream.JetStream, bucket string, from, n int, key func(int) string) error {
	for i := from; i < from+n; i++ {
		if _, err := js.PublishAsync("$KV."+bucket+"."+key(i), benchValue); err != nil {
			return err
		}
		if i%1024 == 1023 {
			<-js.PublishAsyncComplete()
		}
	}
	select {
	case <-js.PublishAsyncComplete():
		return nil
	case <-time.After(time.Minute):
		return fmt.Errorf("publishes not acknowledged in a minute")
	}
}

// BenchmarkNATSInitialSync measures the initial sync of a bucket of N keys:
// a raw watcher's initial values collected into a map, against a mirror's
// informer (list, cache) until it has synced.
func BenchmarkNATSInitialSync(b *testing.B) {
	url := startServerProc(b)
	js := connectBench(b, url)
	ctx := b.Context()
	sizes := []int{10_000, 100_000}
	if testing.Short() {
		sizes = sizes[:1] // CI's run of every benchmark once
	}
	for _, n := range sizes {
		bucket := fmt.Sprintf("sync%d", n)
		kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket})
		if err != nil {
			b.Fatal(err)
		}
		if err := fill(js, bucket, 0, n, func(i int) string { return fmt.Sprintf("key.%07d", i) }); err != nil {
			b.Fatal(err)
		}
		size := fmt.Sprintf("keys=%dk", n/1000)

		b.Run(size+"/impl=raw", func(b *testing.B) {
			b.ReportAllocs()
			cpu := processCPU()
			for b.Loop() {
				w, err := kv.WatchAll(ctx)
				if err != nil {
					b.Fatal(err)
				}
				m := make(map[string][]byte)
				for e := range w.Updates() {
					if e == nil {
						break
					}
					m[e.Key()] = e.Value()
				}
				_ = w.Stop()
				if len(m) != n {
					b.Fatalf("got %d keys, want %d", len(m), n)
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "keys/s")
			b.ReportMetric(float64(processCPU()-cpu)/float64(time.Microsecond)/float64(n*b.N), "cpu-µs/key")
		})
		b.Run(size+"/impl=mirror", func(b *testing.B) {
			b.ReportAllocs()
			cpu := processCPU()
			for b.Loop() {
				lw := natsmirror.New(js, bucket, natsmirror.Options{})
				inf := natsmirror.NewInformer(lw, natsmirror.InformerOptions[[]byte]{Logger: quiet})
				ictx, cancel := context.WithCancel(ctx)
				done := make(chan error, 1)
				go func() { done <- inf.Run(ictx) }()
				if err := inf.WaitForSync(ictx); err != nil {
					b.Fatal(err)
				}
				if inf.Len() != n {
					b.Fatalf("got %d keys, want %d", inf.Len(), n)
				}
				cancel()
				if err := <-done; err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "keys/s")
			b.ReportMetric(float64(processCPU()-cpu)/float64(time.Microsecond)/float64(n*b.N), "cpu-µs/key")
		})
	}
}

// watchKeys is the number of keys the watch benchmark writes to, in turn.
// The bucket keeps 64 revisions per key, so no revision is dropped before
// a watch that lags by less than 640,000 revisions delivers it.
const watchKeys = 10_000

// BenchmarkNATSWatch measures watch throughput: b.N puts published
// asynchronously, each an event, until the watcher has delivered the
// last; a raw watcher's loop against a synced mirror's handler.
func BenchmarkNATSWatch(b *testing.B) {
	url := startServerProc(b)
	js := connectBench(b, url)
	writer := connectBench(b, url)
	ctx := b.Context()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "watch", History: 64})
	if err != nil {
		b.Fatal(err)
	}
	key := func(i int) string { return fmt.Sprintf("key.%05d", i%watchKeys) }
	next := 0 // the next key to write, across runs
	// publish writes n puts, and returns a channel that has the error
	// that stopped it, if any.
	publish := func(n int) <-chan error {
		from := next
		next += n
		failed := make(chan error, 1)
		go func() {
			if err := fill(writer, "watch", from, n, key); err != nil {
				failed <- err
			}
		}()
		return failed
	}

	b.Run("impl=raw", func(b *testing.B) {
		b.ReportAllocs()
		w, err := kv.WatchAll(ctx, jetstream.UpdatesOnly())
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = w.Stop() }()
		seen := 0
		b.ResetTimer()
		cpu := processCPU()
		failed := publish(b.N)
		for seen < b.N {
			select {
			case e := <-w.Updates():
				if e != nil {
					seen++
				}
			case err := <-failed:
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
		b.ReportMetric(float64(processCPU()-cpu)/float64(time.Microsecond)/float64(b.N), "cpu-µs/event")
	})
	b.Run("impl=mirror", func(b *testing.B) {
		b.ReportAllocs()
		lw := natsmirror.New(js, "watch", natsmirror.Options{})
		inf := natsmirror.NewInformer(lw, natsmirror.InformerOptions[[]byte]{Logger: quiet})
		var seen atomic.Int64
		target := int64(b.N)
		all := make(chan struct{})
		count := func() {
			if seen.Add(1) == target {
				close(all)
			}
		}
		reg, err := inf.AddEventHandler(mirror.HandlerFuncs[natsmirror.KV]{
			AddFunc:    func(natsmirror.KV, bool) { count() },
			UpdateFunc: func(natsmirror.KV, natsmirror.KV) { count() },
		}, mirror.HandlerOptions{ChangesOnly: true})
		if err != nil {
			b.Fatal(err)
		}
		ictx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- inf.Run(ictx) }()
		defer func() {
			cancel()
			<-done
		}()
		if err := mirror.WaitForCacheSync(ictx, reg); err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		cpu := processCPU()
		select {
		case <-all:
		case err := <-publish(b.N):
			b.Fatal(err)
		}
		b.StopTimer()
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
		b.ReportMetric(float64(processCPU()-cpu)/float64(time.Microsecond)/float64(b.N), "cpu-µs/event")
		if st := lw.Stats(); st.Lists != 1 || st.Expired != 0 {
			b.Fatalf("the mirror relisted: %+v", st)
		}
	})
}
