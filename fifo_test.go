package mirror

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type fifoPop struct {
	key     string
	obj     obj
	initial bool
}

// popAllFIFO pops until the FIFO holds no value. It never blocks.
func popAllFIFO(t *testing.T, f *FIFO[string, obj]) []fifoPop {
	t.Helper()
	var out []fifoPop
	for f.Len() > 0 {
		require.NoError(t, f.Pop(context.Background(), func(key string, o obj, initial bool) error {
			out = append(out, fifoPop{key, o, initial})
			return nil
		}))
	}
	return out
}

// runFIFOOps applies space-separated ops such as "add a" to f, using the
// op's index as the object's version.
func runFIFOOps(t *testing.T, f *FIFO[string, obj], ops []string) {
	t.Helper()
	for i, op := range ops {
		fields := strings.Fields(op)
		var err error
		switch fields[0] {
		case "add":
			err = f.Add(obj{fields[1], i})
		case "update":
			err = f.Update(obj{fields[1], i})
		case "delete":
			err = f.Delete(obj{fields[1], i})
		case "addifnotpresent":
			err = f.AddIfNotPresent(obj{fields[1], i})
		case "resync":
			err = f.Resync()
		case "replace":
			var list []obj
			for _, name := range fields[1:] {
				list = append(list, obj{name, i})
			}
			err = f.Replace(list, "")
		default:
			t.Fatalf("unknown op %q", op)
		}
		require.NoError(t, err, op)
	}
}

// fifoCase is a sequence of operations and what popping everything
// afterwards must yield.
type fifoCase struct {
	name string
	ops  []string
	want []fifoPop // initial is ignored
}

// runFIFOCases checks, for each case, List, ListKeys, Len, All, GetByKey
// and finally the pops against want.
func runFIFOCases(t *testing.T, tests []fifoCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := NewFIFO(objKey)
			runFIFOOps(t, f, tt.ops)
			var keys []string
			var objs []obj
			for _, p := range tt.want {
				keys = append(keys, p.key)
				objs = append(objs, p.obj)
			}
			assert.Equal(t, keys, nilIfEmpty(f.ListKeys()))
			assert.Equal(t, objs, nilIfEmpty(f.List()))
			assert.Equal(t, len(tt.want), f.Len())
			all := maps.Collect(f.All())
			assert.Len(t, all, len(tt.want))
			for _, p := range tt.want {
				got, ok := f.GetByKey(p.key)
				assert.True(t, ok)
				assert.Equal(t, p.obj, got)
				assert.Equal(t, p.obj, all[p.key])
			}
			got := popAllFIFO(t, f)
			for i := range got {
				got[i].initial = false
			}
			assert.Equal(t, tt.want, nilIfEmpty(got))
		})
	}
}

func TestFIFO_KeepsLatestValuePerKey(t *testing.T) {
	runFIFOCases(t, []fifoCase{
		{
			name: "keeps the latest value per key, in order of first arrival",
			ops:  []string{"add a", "add b", "update a", "update a"},
			want: []fifoPop{{key: "a", obj: obj{"a", 3}}, {key: "b", obj: obj{"b", 1}}},
		},
	})
}

func TestFIFO_DeletedObjectsAreNeverPopped(t *testing.T) {
	runFIFOCases(t, []fifoCase{
		{
			name: "deleted objects are never popped",
			ops:  []string{"add a", "add b", "delete a"},
			want: []fifoPop{{key: "b", obj: obj{"b", 1}}},
		},
		{
			name: "a key deleted then added again keeps its place",
			ops:  []string{"add a", "add b", "delete a", "add a"},
			want: []fifoPop{{key: "a", obj: obj{"a", 3}}, {key: "b", obj: obj{"b", 1}}},
		},
		{
			name: "deleting an absent key does nothing",
			ops:  []string{"delete a", "add b"},
			want: []fifoPop{{key: "b", obj: obj{"b", 1}}},
		},
	})
}

func TestFIFO_AddIfNotPresentNeverOverwrites(t *testing.T) {
	runFIFOCases(t, []fifoCase{
		{
			name: "AddIfNotPresent never overwrites",
			ops:  []string{"add a", "addifnotpresent a", "addifnotpresent b"},
			want: []fifoPop{{key: "a", obj: obj{"a", 0}}, {key: "b", obj: obj{"b", 2}}},
		},
		{
			name: "AddIfNotPresent fills a deleted key",
			ops:  []string{"add a", "delete a", "addifnotpresent a"},
			want: []fifoPop{{key: "a", obj: obj{"a", 2}}},
		},
	})
}

func TestFIFO_ReplaceSwapsTheWholeContent(t *testing.T) {
	runFIFOCases(t, []fifoCase{
		{
			name: "Replace swaps the content; queued keys still listed keep their place",
			ops:  []string{"add a", "add b", "add c", "delete c", "replace d b c"},
			want: []fifoPop{{key: "b", obj: obj{"b", 4}}, {key: "c", obj: obj{"c", 4}}, {key: "d", obj: obj{"d", 4}}},
		},
		{
			name: "Replace with a key listed twice queues it once",
			ops:  []string{"replace a b a"},
			want: []fifoPop{{key: "a", obj: obj{"a", 0}}, {key: "b", obj: obj{"b", 0}}},
		},
	})
}

func TestFIFO_ResyncQueuesNothingTwice(t *testing.T) {
	runFIFOCases(t, []fifoCase{
		{
			name: "Resync queues nothing twice",
			ops:  []string{"add a", "add b", "resync", "resync"},
			want: []fifoPop{{key: "a", obj: obj{"a", 0}}, {key: "b", obj: obj{"b", 1}}},
		},
	})
}

func TestFIFO_PopRemovesTheItemBeforeProcess(t *testing.T) {
	f := NewFIFO(objKey)
	require.NoError(t, f.Add(obj{"a", 1}))
	var inQueue bool
	// process must not call the FIFO (it holds the lock), so look at
	// the state it leaves instead: a value stored during processing
	// would be lost if the item were removed after process.
	require.NoError(t, f.Pop(context.Background(), func(key string, o obj, _ bool) error {
		_, inQueue = f.q.find(key)
		return nil
	}))
	assert.False(t, inQueue)
	_, ok := f.GetByKey("a")
	assert.False(t, ok)
}

func TestFIFO_PopRequeue(t *testing.T) {
	f := NewFIFO(objKey)
	require.NoError(t, f.Add(obj{"a", 1}))
	require.NoError(t, f.Add(obj{"b", 1}))
	attempts := 0
	var seen []string
	process := func(key string, o obj, _ bool) error {
		seen = append(seen, key)
		if key == "a" {
			attempts++
			assert.Equal(t, obj{"a", 1}, o)
			if attempts <= 2 {
				return fmt.Errorf("try later: %w", ErrRequeue)
			}
		}
		return nil
	}
	require.ErrorIs(t, f.Pop(context.Background(), process), ErrRequeue)
	assert.Equal(t, []string{"b", "a"}, f.ListKeys(), "requeued at the back")
	require.NoError(t, f.Pop(context.Background(), process))
	require.ErrorIs(t, f.Pop(context.Background(), process), ErrRequeue)
	require.NoError(t, f.Pop(context.Background(), process))
	assert.Equal(t, []string{"a", "b", "a", "a"}, seen)
	assert.Zero(t, f.Len())

	errOther := errors.New("other")
	require.NoError(t, f.Add(obj{"c", 1}))
	require.ErrorIs(t, f.Pop(context.Background(), func(string, obj, bool) error { return errOther }), errOther)
	assert.Zero(t, f.Len(), "other errors drop the item")
}

func TestFIFO_HasSynced(t *testing.T) {
	tests := []struct {
		name        string
		ops         []string
		wantBefore  bool   // HasSynced after ops, before popping
		wantInitial []bool // isInInitialList of each pop
	}{
		{name: "a new FIFO is not synced"},
		{name: "Add first syncs", ops: []string{"add a", "replace b"}, wantBefore: true, wantInitial: []bool{false}},
		{name: "Delete first syncs", ops: []string{"delete a"}, wantBefore: true},
		{name: "AddIfNotPresent first syncs", ops: []string{"addifnotpresent a"}, wantBefore: true, wantInitial: []bool{false}},
		{name: "empty first Replace syncs", ops: []string{"replace"}, wantBefore: true},
		{name: "first Replace syncs when popped", ops: []string{"replace a b", "add c"}, wantInitial: []bool{true, true, false}},
		{
			// b is deleted before it is popped: it still counts, or the
			// FIFO would never sync.
			name: "deleted initial keys count", ops: []string{"replace a b c", "delete b"},
			wantInitial: []bool{true, true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := NewFIFO(objKey)
			runFIFOOps(t, f, tt.ops)
			assert.Equal(t, tt.wantBefore, f.HasSynced())
			var initial []bool
			for _, p := range popAllFIFO(t, f) {
				initial = append(initial, p.initial)
			}
			assert.Equal(t, tt.wantInitial, initial)
			if len(tt.ops) > 0 {
				assert.True(t, f.HasSynced(), "synced once drained")
				runFIFOOps(t, f, []string{"replace x y"})
				assert.True(t, f.HasSynced(), "never goes back")
			}
		})
	}
}

func TestFIFO_KeyErrorLeavesQueueUnchanged(t *testing.T) {
	bad := obj{"bad", 1}
	ops := map[string]func(f *FIFO[string, obj]) error{
		"Add":             func(f *FIFO[string, obj]) error { return f.Add(bad) },
		"Update":          func(f *FIFO[string, obj]) error { return f.Update(bad) },
		"Delete":          func(f *FIFO[string, obj]) error { return f.Delete(bad) },
		"AddIfNotPresent": func(f *FIFO[string, obj]) error { return f.AddIfNotPresent(bad) },
		"Get":             func(f *FIFO[string, obj]) error { _, _, err := f.Get(bad); return err },
	}
	for _, name := range slices.Sorted(maps.Keys(ops)) {
		t.Run(name, func(t *testing.T) {
			f := NewFIFO(objKey)
			require.NoError(t, f.Add(obj{"a", 1}))
			err := ops[name](f)
			var ke *KeyError
			require.ErrorAs(t, err, &ke)
			require.ErrorIs(t, err, errBadKey)
			assert.Equal(t, []obj{{"a", 1}}, f.List())
		})
	}
	t.Run("Replace skips failing objects", func(t *testing.T) {
		f := NewFIFO(objKey)
		err := f.Replace([]obj{{"a", 1}, bad, {"b", 1}}, "")
		var ke *KeyError
		require.ErrorAs(t, err, &ke)
		assert.Equal(t, []string{"a", "b"}, f.ListKeys())
	})
	t.Run("zero values", func(t *testing.T) {
		f := NewFIFO(objKey)
		var zero obj
		assert.NotPanics(t, func() {
			require.NoError(t, f.Add(zero))
			require.NoError(t, f.Replace([]obj{zero}, ""))
			got, ok, err := f.Get(zero)
			require.NoError(t, err)
			assert.True(t, ok)
			assert.Equal(t, zero, got)
		})
		assert.Panics(t, func() { NewFIFO[string, obj](nil) }, "a nil KeyFunc is the one panic")
	})
}

func TestFIFO_CloseAndContextWakeEveryPopper(t *testing.T) {
	for _, byClose := range []bool{true, false} {
		t.Run(fmt.Sprintf("close=%v", byClose), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := NewFIFO(objKey)
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				const poppers = 8
				errs := make(chan error, poppers)
				for range poppers {
					go func() { errs <- f.Pop(ctx, func(string, obj, bool) error { return nil }) }()
				}
				synctest.Wait()
				assert.Empty(t, errs)
				want := context.Canceled
				if byClose {
					want = ErrClosed
					f.Close()
				} else {
					cancel()
				}
				for range poppers {
					require.ErrorIs(t, <-errs, want)
				}
			})
		})
	}
	t.Run("values queued before Close are handed out first", func(t *testing.T) {
		f := NewFIFO(objKey)
		require.NoError(t, f.Add(obj{"a", 1}))
		require.NoError(t, f.Add(obj{"b", 1}))
		require.NoError(t, f.Delete(obj{"b", 1}))
		f.Close()
		assert.True(t, f.IsClosed())
		var got []string
		process := func(key string, _ obj, _ bool) error { got = append(got, key); return nil }
		require.NoError(t, f.Pop(context.Background(), process))
		require.ErrorIs(t, f.Pop(context.Background(), process), ErrClosed, "the deleted key is skipped")
		assert.Equal(t, []string{"a"}, got)
	})
}

func TestFIFO_ConcurrentProducersAndPoppers(t *testing.T) {
	const producers, poppers, perProducer = 4, 4, 500
	f := NewFIFO(objKey)
	var mu sync.Mutex
	last := map[string]int{}
	var wg, pwg sync.WaitGroup
	for range poppers {
		wg.Go(func() {
			for {
				err := f.Pop(context.Background(), func(key string, o obj, _ bool) error {
					mu.Lock()
					defer mu.Unlock()
					if prev, ok := last[key]; ok {
						assert.Greater(t, o.rv, prev, "versions of a key only go forward")
					}
					last[key] = o.rv
					return nil
				})
				if err != nil {
					return
				}
			}
		})
	}
	for p := range producers {
		pwg.Go(func() {
			name := fmt.Sprintf("p%d", p)
			for i := range perProducer {
				assert.NoError(t, f.Update(obj{name, i}))
				_ = f.List()
			}
		})
	}
	pwg.Wait()
	f.Close()
	wg.Wait()
	for p := range producers {
		assert.Equal(t, perProducer-1, last[fmt.Sprintf("p%d", p)], "the latest value is always popped")
	}
}
