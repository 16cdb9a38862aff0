package mirror

import (
	"context"
	"testing"
)

// BenchmarkListener_Deliver measures what a listener adds to each handler
// call: one op is one notification distributed to the feed, published and
// handed to a handler that does nothing, in batches of 4096 that the
// handler drains before the next is distributed.
func BenchmarkListener_Deliver(b *testing.B) {
	const batch = 4096
	drained := make(chan struct{})
	var got, want int
	h := HandlerFuncs[string]{AddFunc: func(string, bool) {
		if got++; got == want {
			drained <- struct{}{}
		}
	}}
	p := &processor[string, string]{report: func(error) {}}
	l := newListener[string](h, nil, 0, 0, func(error) {}, func() bool { return true })
	if err := p.add(l, func() { l.follow(&p.feed) }); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go l.run(ctx)
	n := notification[string, string]{kind: notifyAdd, key: "k", obj: "v"}
	b.ReportAllocs()
	for done := 0; done < b.N; {
		k := min(batch, b.N-done)
		want += k // read by the handler only after publish hands it the batch
		for range k {
			p.distribute(n, false)
		}
		p.publish()
		<-drained
		done += k
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
	cancel()
	<-l.done
}
