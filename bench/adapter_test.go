package bench

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/listwatch/mirror/memsource"
	"github.com/listwatch/mirror/source"
)

// TestInformers_SeeTheSameChanges runs both informers over one source and
// checks that each handler counts the same notifications and ends with the
// source's last value of every object: the benchmarks compare equal work.
func TestInformers_SeeTheSameChanges(t *testing.T) {
	const keys, changes = 50, 2_000
	ns := names(keys)
	src := memsource.New(SourceKey, memsource.Options{HistoryLimit: keys + changes})
	// Each object carries the revision the source gives it (see
	// ListerWatcher): a new source is at 1, its first change gets 2.
	put := func(o *Obj) {
		t.Helper()
		if rev, err := src.Put(o); err != nil || strconv.FormatInt(rev, 10) != o.ResourceVersion {
			t.Fatalf("put %s at revision %d, but it carries version %s", o.Name, rev, o.ResourceVersion)
		}
	}
	for i, n := range ns {
		put(&Obj{Namespace: namespace, Name: n, ResourceVersion: strconv.Itoa(i + 2)})
	}
	type result struct {
		mu    sync.Mutex
		count int
		last  map[string]int64
		// synced closes once the initial list is in, done once every
		// change is.
		synced, done chan struct{}
	}
	results := map[string]*result{}
	stops := []func(){}
	for _, im := range informerImpls {
		r := &result{last: map[string]int64{}, synced: make(chan struct{}), done: make(chan struct{})}
		results[im.name] = r
		record := func(o *Obj) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.count++
			r.last[o.Name] = o.Value
			switch r.count {
			case keys:
				close(r.synced)
			case keys + changes:
				close(r.done)
			}
		}
		stops = append(stops, im.start(src, []handlerSpec{{add: record, update: func(_, o *Obj) { record(o) }}}))
	}
	defer func() {
		for _, stop := range stops {
			stop()
		}
	}()
	for name, r := range results {
		select {
		case <-r.synced:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: not synced after 30s", name)
		}
	}
	for i := range changes {
		put(&Obj{Namespace: namespace, Name: ns[i%keys], ResourceVersion: strconv.Itoa(keys + i + 2), Value: int64(i)})
	}
	for name, r := range results {
		select {
		case <-r.done:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: timed out with %d notifications", name, r.count)
		}
		r.mu.Lock()
		for i, n := range ns {
			if want := int64(changes - keys + i); r.last[n] != want {
				t.Errorf("%s: %s ends at %d, want %d", name, n, r.last[n], want)
			}
		}
		r.mu.Unlock()
	}
}

// TestGenerator_ListsEveryNameOnceInPages checks the memory benchmark's
// source: pages follow each other and every object is fresh.
func TestGenerator_ListsEveryNameOnceInPages(t *testing.T) {
	g := &Generator{Namespace: namespace, Names: names(1234)}
	var got []*Obj
	opts := source.ListOptions{Limit: 500}
	for {
		res, err := g.List(context.Background(), opts)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, res.Items...)
		if res.Continue == "" {
			break
		}
		opts.Continue = res.Continue
	}
	if len(got) != len(g.Names) {
		t.Fatalf("listed %d objects, want %d", len(got), len(g.Names))
	}
	for i, o := range got {
		if o.Name != g.Names[i] {
			t.Fatalf("item %d is %s, want %s", i, o.Name, g.Names[i])
		}
	}
	again, _ := g.List(context.Background(), source.ListOptions{Limit: 1})
	if again.Items[0] == got[0] {
		t.Error("a second list returned the same object, not a fresh one")
	}
}
