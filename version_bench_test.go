package mirror_test

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/memsource"
)

// BenchmarkWaitForVersion_Wake measures how soon a reader waiting for a
// version is woken: one op is a Put to a memsource while a goroutine
// waits in WaitForVersion for the Put's revision, timed from the Put's
// call to the wait's return. That covers the Put, the watch's delivery,
// the queue and the apply, so it bounds the time from the apply to the
// wake from above. Reported: p50-us, p99-us, p99.9-us.
func BenchmarkWaitForVersion_Wake(b *testing.B) {
	src := memsource.New(itemKey, memsource.Options{})
	inf := mirror.NewInformer(src, mirror.InformerOptions[string, item]{
		KeyFunc: itemKey,
		Logger:  slog.New(slog.DiscardHandler),
	})
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
	lat := make([]time.Duration, 0, b.N)
	woken := make(chan time.Time)
	b.ReportAllocs()
	for b.Loop() {
		want := revString(src.Revision() + 1)
		go func() {
			if err := inf.WaitForVersion(ctx, want); err != nil {
				panic(err)
			}
			woken <- time.Now()
		}()
		put := time.Now()
		if _, err := src.Put(item{Name: "k", Val: 1}); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, (<-woken).Sub(put))
	}
	slices.Sort(lat)
	at := func(q float64) float64 {
		return float64(lat[min(len(lat)-1, int(float64(len(lat))*q))].Nanoseconds()) / 1e3
	}
	b.ReportMetric(at(0.50), "p50-us")
	b.ReportMetric(at(0.99), "p99-us")
	b.ReportMetric(at(0.999), "p99.9-us")
}
