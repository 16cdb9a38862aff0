package etcd

import (
	"fmt"
	"testing"

	"github.com/listwatch/mirror/source"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// BenchmarkWatcher_Next measures the adapter's own cost per watch event:
// taking it from a response and converting it, without a server.
func BenchmarkWatcher_Next(b *testing.B) {
	const perResponse = 100
	template := make([]*clientv3.Event, perResponse)
	for i := range template {
		rev := int64(1000 + i)
		template[i] = put(fmt.Sprintf("/p/key-%03d", i), "value", rev, rev, 2)
	}
	buf := make([]*clientv3.Event, perResponse)

	fw := &fakeWatcher{}
	w, err := New(fakeClient(nil, fw), "/p/", Options{}).Watch(b.Context(), source.WatchOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	ch := fw.watch(0).ch

	b.ReportAllocs()
	n := 0
	for b.Loop() {
		if n%perResponse == 0 {
			// The watcher is done with buf: it clears each event as it
			// hands it out and asks for a new response only after the
			// last.
			copy(buf, template)
			ch <- clientv3.WatchResponse{Header: header(1100), Events: buf}
		}
		if _, err := w.Next(b.Context()); err != nil {
			b.Fatal(err)
		}
		n++
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkList_Page measures the adapter's own cost per listed key: turning
// a page that etcd returned into a ListResult, without a server.
func BenchmarkList_Page(b *testing.B) {
	const pageSize = 500
	keys := make([]string, pageSize)
	for i := range keys {
		keys[i] = fmt.Sprintf("/p/key-%05d", i)
	}
	resp := &clientv3.GetResponse{Header: header(10), Kvs: kvs(keys...)}
	kv := &fakeKV{}
	lw := New(fakeClient(kv, nil), "/p/", Options{})

	b.ReportAllocs()
	pages := 0
	for b.Loop() {
		kv.answers = append(kv.answers[:0], fakeGet{resp: resp})
		kv.ops = kv.ops[:0]
		if _, err := lw.List(b.Context(), source.ListOptions{Limit: pageSize}); err != nil {
			b.Fatal(err)
		}
		pages++
	}
	b.ReportMetric(float64(pages*pageSize)/b.Elapsed().Seconds(), "keys/s")
}
