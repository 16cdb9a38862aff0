package etcd_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/adapters/etcd"
	"github.com/listwatch/mirror/memsource"
	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type obj = etcd.Object[string]

// relistAfterCut runs an informer made by etcd.NewInformer(src, opts) over
// four keys, then, while its watch is cut, leaves /a as it is, changes
// /b, deletes and re-creates /c and deletes /d, compacts the history so
// that the informer must relist, and returns what its handler was told
// from then on, up to the creation of a key made after the relist.
//
// An in-memory source stands in for etcd: what is pinned here is how
// NewInformer wires the informer, which does not depend on the server.
// test/etcd runs the same story against a real one.
func relistAfterCut(t *testing.T, opts etcd.InformerOptions[string]) []string {
	t.Helper()
	src := memsource.New(etcd.KeyOf[string], memsource.Options{})
	put := func(key, value string, create int64) {
		t.Helper()
		mod := src.Revision() + 1
		if create == 0 {
			create = mod
		}
		_, err := src.Put(obj{Key: key, Value: value, CreateRevision: create, ModRevision: mod})
		require.NoError(t, err)
	}
	for _, k := range []string{"/a", "/b", "/c", "/d"} {
		put(k, "v1", 0)
	}
	created := map[string]int64{}
	for k, o := range src.Snapshot() {
		created[k] = o.CreateRevision
	}

	opts.ListWatch.InitialBackoff, opts.ListWatch.MaxBackoff = time.Millisecond, 10*time.Millisecond
	opts.ErrorHandler = func(error) {} // the cut and the compaction, expected
	inf := etcd.NewInformer(src, opts)
	notes := make(chan string, 100)
	reg, err := inf.AddEventHandler(mirror.HandlerFuncs[obj]{
		AddFunc:    func(o obj, initial bool) { notes <- fmt.Sprintf("add %s %s", o.Key, o.Value) },
		UpdateFunc: func(old, o obj) { notes <- fmt.Sprintf("update %s %s->%s", o.Key, old.Value, o.Value) },
		DeleteFunc: func(o obj, unknown bool) { notes <- fmt.Sprintf("delete %s %s unknown=%t", o.Key, o.Value, unknown) },
	}, mirror.HandlerOptions{})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()
	require.NoError(t, mirror.WaitForCacheSync(ctx, reg))
	for range 4 {
		<-notes // the initial adds
	}

	// Every list and watch fails until the changes are made and
	// compacted: the informer can learn of them only by a relist.
	src.FailNext(1<<30, fmt.Errorf("cut: %w", source.ErrUnavailable))
	src.CutWatches()
	put("/b", "v2", created["/b"])
	_, ok := src.Delete("/c")
	require.True(t, ok)
	put("/c", "v2", 0)
	_, ok = src.Delete("/d")
	require.True(t, ok)
	src.Compact(src.Revision())
	src.FailNext(0, nil)

	var got []string
	next := func() string {
		select {
		case n := <-notes:
			return n
		case <-time.After(30 * time.Second):
			require.FailNow(t, "no notification", "got so far: %q", got)
			return ""
		}
	}
	// The relist's notifications come together, its deletions last; /z
	// is created after them, so any notification about /a comes before
	// its add.
	for len(got) == 0 || got[len(got)-1] != "delete /d v1 unknown=true" {
		got = append(got, next())
	}
	put("/z", "v1", 0)
	for n := next(); n != "add /z v1"; n = next() {
		got = append(got, n)
	}
	return got
}

func TestNewInformer_RelistReportsOnlyChangesAndARecreatedKeyAsDeleteThenAdd(t *testing.T) {
	got := relistAfterCut(t, etcd.InformerOptions[string]{})
	assert.ElementsMatch(t, []string{
		"update /b v1->v2",
		"delete /c v1 unknown=true", // the first /c: its deletion was not seen
		"add /c v2",
		"delete /d v1 unknown=true",
	}, got, "nothing about /a, which did not change")
	assert.Less(t, slices.Index(got, "delete /c v1 unknown=true"), slices.Index(got, "add /c v2"), "/c: delete, then add")
}

func TestNewInformer_KeepsTheCallersFunctions(t *testing.T) {
	got := relistAfterCut(t, etcd.InformerOptions[string]{
		// A caller who wants a re-created key reported as an update.
		SameObject: func(_, _ obj) bool { return true },
	})
	assert.ElementsMatch(t, []string{
		"update /b v1->v2",
		"update /c v1->v2",
		"delete /d v1 unknown=true",
	}, got)
}
