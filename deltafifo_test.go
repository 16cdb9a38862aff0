package mirror

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// obj is the object type of the queue tests: name is its key, rv tells
// versions apart.
type obj struct {
	name string
	rv   int
}

var errBadKey = errors.New("no key")

// objKey keys an obj by name and fails for the name "bad".
func objKey(o obj) (string, error) {
	if o.name == "bad" {
		return "", errBadKey
	}
	return o.name, nil
}

// knownMap stands in for the informer's cache as a DeltaFIFO's
// KnownObjects. All yields keys in sorted order so that tests are
// deterministic.
type knownMap map[string]obj

func (m knownMap) GetByKey(key string) (obj, bool) {
	o, ok := m[key]
	return o, ok
}

func (m knownMap) All() iter.Seq2[string, obj] {
	return func(yield func(string, obj) bool) {
		for _, k := range slices.Sorted(func(yield func(string) bool) {
			for k := range m {
				if !yield(k) {
					return
				}
			}
		}) {
			if !yield(k, m[k]) {
				return
			}
		}
	}
}

// apply updates m from popped deltas, as an informer updates its cache.
func (m knownMap) apply(key string, ds Deltas[obj]) {
	for _, d := range ds {
		if d.Type == Deleted {
			delete(m, key)
		} else {
			m[key] = d.Object
		}
	}
}

func added(o obj) Delta[obj]   { return Delta[obj]{Type: Added, Object: o} }
func updated(o obj) Delta[obj] { return Delta[obj]{Type: Updated, Object: o} }
func deleted(o obj) Delta[obj] { return Delta[obj]{Type: Deleted, Object: o} }
func tombstone(o obj) Delta[obj] {
	return Delta[obj]{Type: Deleted, Object: o, FinalStateUnknown: true}
}
func synced(o obj) Delta[obj]   { return Delta[obj]{Type: Sync, Object: o} }
func replaced(o obj) Delta[obj] { return Delta[obj]{Type: Replaced, Object: o} }

// newTestDeltaFIFO returns a DeltaFIFO of objs keyed by objKey, with
// known as KnownObjects unless it is nil.
func newTestDeltaFIFO(known knownMap, emitReplaced bool) *DeltaFIFO[string, obj] {
	opts := DeltaFIFOOptions[string, obj]{KeyFunc: objKey, EmitDeltaTypeReplaced: emitReplaced}
	if known != nil {
		// A nil knownMap in the interface would be a non-nil
		// KnownObjects that knows nothing.
		opts.KnownObjects = known
	}
	return NewDeltaFIFO(opts)
}

// popped is one key handed out by Pop.
type popped struct {
	key     string
	deltas  Deltas[obj]
	initial bool
}

// popAll pops until the queue is empty. It never blocks: it pops only
// while Len says a key is queued.
func popAll(t *testing.T, f *DeltaFIFO[string, obj]) []popped {
	t.Helper()
	var out []popped
	for f.Len() > 0 {
		require.NoError(t, f.Pop(context.Background(), func(key string, ds Deltas[obj], initial bool) error {
			out = append(out, popped{key, ds, initial})
			return nil
		}))
	}
	return out
}

// snapshot returns every queued key with its pending deltas, in queue
// order.
func snapshot(f *DeltaFIFO[string, obj]) []popped {
	var out []popped
	for _, k := range f.ListKeys() {
		ds, _ := f.GetByKey(k)
		out = append(out, popped{key: k, deltas: ds})
	}
	return out
}

func TestDeltaFIFO_AppendsDeltasPerKeyInOrderOfFirstArrival(t *testing.T) {
	f := NewDeltaFIFO(DeltaFIFOOptions[string, obj]{KeyFunc: objKey})
	require.NoError(t, f.Add(obj{"a", 1}))
	require.NoError(t, f.Add(obj{"b", 1}))
	require.NoError(t, f.Update(obj{"a", 2}))
	require.NoError(t, f.Add(obj{"c", 1}))
	require.NoError(t, f.Delete(obj{"b", 2}))
	require.NoError(t, f.Update(obj{"a", 3}))

	assert.Equal(t, []string{"a", "b", "c"}, f.ListKeys(), "each key queued once, in order of first arrival")
	assert.Equal(t, 3, f.Len())
	assert.Equal(t, []popped{
		{key: "a", deltas: Deltas[obj]{added(obj{"a", 1}), updated(obj{"a", 2}), updated(obj{"a", 3})}},
		{key: "b", deltas: Deltas[obj]{added(obj{"b", 1}), deleted(obj{"b", 2})}},
		{key: "c", deltas: Deltas[obj]{added(obj{"c", 1})}},
	}, popAll(t, f))

	// A popped key that changes again is queued again, at the back.
	require.NoError(t, f.Update(obj{"c", 2}))
	require.NoError(t, f.Update(obj{"a", 4}))
	assert.Equal(t, []string{"c", "a"}, f.ListKeys())
}

func TestDeltaFIFO_DeleteOfUnknownKeyIsNoOp(t *testing.T) {
	tests := []struct {
		name   string
		known  knownMap // nil: no KnownObjects
		queued bool     // whether "a" is queued (with an Added) before Delete
		want   Deltas[obj]
	}{
		{name: "no KnownObjects, not queued: dropped"},
		{name: "no KnownObjects, queued: appended", queued: true,
			want: Deltas[obj]{added(obj{"a", 1}), deleted(obj{"a", 2})}},
		{name: "known, not queued: queued", known: knownMap{"a": {"a", 1}},
			want: Deltas[obj]{deleted(obj{"a", 2})}},
		{name: "unknown, not queued: dropped", known: knownMap{"z": {"z", 1}}},
		{name: "unknown, queued: appended", known: knownMap{}, queued: true,
			want: Deltas[obj]{added(obj{"a", 1}), deleted(obj{"a", 2})}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newTestDeltaFIFO(tt.known, false)
			if tt.queued {
				require.NoError(t, f.Add(obj{"a", 1}))
			}
			require.NoError(t, f.Delete(obj{"a", 2}))
			got, ok := f.GetByKey("a")
			assert.Equal(t, tt.want != nil, ok)
			assert.Equal(t, tt.want, got)
			if tt.want == nil {
				assert.Zero(t, f.Len(), "a dropped Delete queues nothing")
			}
		})
	}
}

func TestDeltaFIFO_DeleteKeyOnlyCarriesTheLastStateTheQueueKnows(t *testing.T) {
	tests := []struct {
		name  string
		known knownMap // nil: no KnownObjects
		ops   func(f *DeltaFIFO[string, obj])
		want  Deltas[obj]
	}{
		{name: "no KnownObjects, not queued: dropped"},
		{name: "no KnownObjects, queued: the newest queued object",
			ops:  func(f *DeltaFIFO[string, obj]) { _ = f.Add(obj{"a", 1}); _ = f.Update(obj{"a", 2}) },
			want: Deltas[obj]{added(obj{"a", 1}), updated(obj{"a", 2}), deleted(obj{"a", 2})}},
		{name: "known, not queued: the known object", known: knownMap{"a": {"a", 1}},
			want: Deltas[obj]{deleted(obj{"a", 1})}},
		{name: "known and queued: the queued object, which is newer", known: knownMap{"a": {"a", 1}},
			ops:  func(f *DeltaFIFO[string, obj]) { _ = f.Update(obj{"a", 2}) },
			want: Deltas[obj]{updated(obj{"a", 2}), deleted(obj{"a", 2})}},
		{name: "unknown, not queued: dropped", known: knownMap{"z": {"z", 1}}},
		// A deletion that names the key alone does not know the final
		// state either: the tombstone, which says so, stays.
		{name: "after a tombstone: nothing more", known: knownMap{"a": {"a", 1}},
			ops:  func(f *DeltaFIFO[string, obj]) { _ = f.Replace(nil, "") },
			want: Deltas[obj]{tombstone(obj{"a", 1})}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			transforms := 0
			opts := DeltaFIFOOptions[string, obj]{KeyFunc: objKey, Transform: func(o obj) (obj, error) {
				transforms++
				return o, nil
			}}
			if tt.known != nil {
				opts.KnownObjects = tt.known
			}
			f := NewDeltaFIFO(opts)
			if tt.ops != nil {
				tt.ops(f)
			}
			before := transforms
			require.NoError(t, f.DeleteKeyOnly(obj{name: "a"}))
			assert.Equal(t, before, transforms, "the object found is not transformed again")
			got, ok := f.GetByKey("a")
			assert.Equal(t, tt.want != nil, ok)
			assert.Equal(t, tt.want, got)
		})
	}
	require.ErrorIs(t, newTestDeltaFIFO(nil, false).DeleteKeyOnly(obj{name: "bad"}), errBadKey)
}

func TestDeltaFIFO_ConsecutiveDeletionsCollapse(t *testing.T) {
	tests := []struct {
		name string
		ops  func(f *DeltaFIFO[string, obj])
		want Deltas[obj]
	}{
		{
			name: "two real deletes keep the newer",
			ops: func(f *DeltaFIFO[string, obj]) {
				_ = f.Add(obj{"a", 1})
				_ = f.Delete(obj{"a", 2})
				_ = f.Delete(obj{"a", 3})
			},
			want: Deltas[obj]{added(obj{"a", 1}), deleted(obj{"a", 3})},
		},
		{
			name: "a tombstone after a real delete is dropped",
			ops: func(f *DeltaFIFO[string, obj]) {
				_ = f.Add(obj{"a", 1})
				_ = f.Delete(obj{"a", 2})
				_ = f.Replace(nil, "")
			},
			want: Deltas[obj]{added(obj{"a", 1}), deleted(obj{"a", 2})},
		},
		{
			name: "a real delete after a tombstone replaces it",
			ops: func(f *DeltaFIFO[string, obj]) {
				_ = f.Add(obj{"a", 1})
				_ = f.Replace(nil, "")
				_ = f.Delete(obj{"a", 2})
			},
			want: Deltas[obj]{added(obj{"a", 1}), deleted(obj{"a", 2})},
		},
		{
			name: "two tombstones keep the older",
			ops: func(f *DeltaFIFO[string, obj]) {
				_ = f.Add(obj{"a", 1})
				_ = f.Replace(nil, "")
				_ = f.Replace(nil, "")
			},
			want: Deltas[obj]{added(obj{"a", 1}), tombstone(obj{"a", 1})},
		},
		{
			name: "deletions apart do not collapse",
			ops: func(f *DeltaFIFO[string, obj]) {
				_ = f.Add(obj{"a", 1})
				_ = f.Delete(obj{"a", 2})
				_ = f.Add(obj{"a", 3})
				_ = f.Delete(obj{"a", 4})
			},
			want: Deltas[obj]{added(obj{"a", 1}), deleted(obj{"a", 2}), added(obj{"a", 3}), deleted(obj{"a", 4})},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := NewDeltaFIFO(DeltaFIFOOptions[string, obj]{KeyFunc: objKey})
			tt.ops(f)
			got, _ := f.GetByKey("a")
			assert.Equal(t, tt.want, got)
		})
	}
}

// Two tombstones in a row always carry the same object when made through
// Replace, so which one survives is pinned here directly.
func TestAppendDelta_KeepsTheDeletionThatKnowsTheFinalState(t *testing.T) {
	old, newer := obj{"a", 1}, obj{"a", 2}
	tests := []struct {
		name       string
		last, next Delta[obj]
		want       Delta[obj]
	}{
		{"real then real: newer", deleted(old), deleted(newer), deleted(newer)},
		{"real then tombstone: real", deleted(old), tombstone(newer), deleted(old)},
		{"tombstone then real: real", tombstone(old), deleted(newer), deleted(newer)},
		{"tombstone then tombstone: older", tombstone(old), tombstone(newer), tombstone(old)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := appendDelta(Deltas[obj]{added(old), tt.last}, tt.next)
			assert.Equal(t, Deltas[obj]{added(old), tt.want}, got)
		})
	}
}

func TestDeltaFIFO_ReplaceMakesTombstones(t *testing.T) {
	tests := []struct {
		name         string
		known        knownMap
		emitReplaced bool
		before       func(f *DeltaFIFO[string, obj])
		list         []obj
		want         []popped
	}{
		{
			name: "without KnownObjects: queued keys the list lacks",
			before: func(f *DeltaFIFO[string, obj]) {
				_ = f.Add(obj{"a", 1})
				_ = f.Update(obj{"a", 2})
				_ = f.Add(obj{"b", 1})
			},
			list: []obj{{"b", 2}, {"c", 1}},
			want: []popped{
				{key: "a", deltas: Deltas[obj]{added(obj{"a", 1}), updated(obj{"a", 2}), tombstone(obj{"a", 2})}},
				{key: "b", deltas: Deltas[obj]{added(obj{"b", 1}), synced(obj{"b", 2})}},
				{key: "c", deltas: Deltas[obj]{synced(obj{"c", 1})}},
			},
		},
		{
			name:  "with KnownObjects: known keys the list lacks carry the known object",
			known: knownMap{"a": {"a", 1}, "b": {"b", 1}, "c": {"c", 1}},
			list:  []obj{{"b", 2}},
			want: []popped{
				{key: "b", deltas: Deltas[obj]{synced(obj{"b", 2})}},
				{key: "a", deltas: Deltas[obj]{tombstone(obj{"a", 1})}},
				{key: "c", deltas: Deltas[obj]{tombstone(obj{"c", 1})}},
			},
		},
		{
			name:   "with KnownObjects: a queued key carries its newest queued object, not the known one",
			known:  knownMap{"a": {"a", 1}},
			before: func(f *DeltaFIFO[string, obj]) { _ = f.Update(obj{"a", 2}); _ = f.Add(obj{"n", 1}) },
			list:   nil,
			want: []popped{
				{key: "a", deltas: Deltas[obj]{updated(obj{"a", 2}), tombstone(obj{"a", 2})}},
				{key: "n", deltas: Deltas[obj]{added(obj{"n", 1}), tombstone(obj{"n", 1})}},
			},
		},
		{
			name:         "EmitDeltaTypeReplaced: listed objects get Replaced",
			emitReplaced: true,
			list:         []obj{{"a", 1}, {"b", 1}},
			want: []popped{
				{key: "a", deltas: Deltas[obj]{replaced(obj{"a", 1})}},
				{key: "b", deltas: Deltas[obj]{replaced(obj{"b", 1})}},
			},
		},
		{
			name: "a key listed twice gets both deltas",
			list: []obj{{"a", 1}, {"a", 2}},
			want: []popped{{key: "a", deltas: Deltas[obj]{synced(obj{"a", 1}), synced(obj{"a", 2})}}},
		},
		{
			// The seed case: a watched deletion, a relisted object and a
			// deletion only the relist discovers, in that order.
			name:         "seed: real delete, Replaced, tombstone",
			known:        knownMap{"foo": {"foo", 1}, "bar": {"bar", 1}, "baz": {"baz", 1}},
			emitReplaced: true,
			before:       func(f *DeltaFIFO[string, obj]) { _ = f.Delete(obj{"baz", 1}) },
			list:         []obj{{"foo", 2}},
			want: []popped{
				{key: "baz", deltas: Deltas[obj]{deleted(obj{"baz", 1})}},
				{key: "foo", deltas: Deltas[obj]{replaced(obj{"foo", 2})}},
				{key: "bar", deltas: Deltas[obj]{tombstone(obj{"bar", 1})}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newTestDeltaFIFO(tt.known, tt.emitReplaced)
			if tt.before != nil {
				tt.before(f)
			}
			require.NoError(t, f.Replace(tt.list, "7"))
			got := popAll(t, f)
			for i := range got {
				got[i].initial = false // pinned by the HasSynced tests
			}
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestDeltaFIFO_ResyncQueuesKnownObjectsWithoutPendingDeltas(t *testing.T) {
	tests := []struct {
		name   string
		known  knownMap
		before func(f *DeltaFIFO[string, obj])
		want   []popped
	}{
		{
			name: "without KnownObjects: nothing",
			before: func(f *DeltaFIFO[string, obj]) {
				_ = f.Add(obj{"a", 1})
			},
			want: []popped{{key: "a", deltas: Deltas[obj]{added(obj{"a", 1})}}},
		},
		{
			name:  "known objects get a Sync with the known object",
			known: knownMap{"a": {"a", 1}, "b": {"b", 1}},
			want: []popped{
				{key: "a", deltas: Deltas[obj]{synced(obj{"a", 1})}},
				{key: "b", deltas: Deltas[obj]{synced(obj{"b", 1})}},
			},
		},
		{
			// The seed case: the pending Delete reaches the consumer; a
			// Sync of the stale known object after it would resurrect it.
			name:   "seed: Delete then Resync with a known object",
			known:  knownMap{"a": {"a", 1}, "b": {"b", 1}},
			before: func(f *DeltaFIFO[string, obj]) { _ = f.Delete(obj{"a", 1}) },
			want: []popped{
				{key: "a", deltas: Deltas[obj]{deleted(obj{"a", 1})}},
				{key: "b", deltas: Deltas[obj]{synced(obj{"b", 1})}},
			},
		},
		{
			name:   "a pending update is not followed by the older known object",
			known:  knownMap{"a": {"a", 1}},
			before: func(f *DeltaFIFO[string, obj]) { _ = f.Update(obj{"a", 2}) },
			want:   []popped{{key: "a", deltas: Deltas[obj]{updated(obj{"a", 2})}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newTestDeltaFIFO(tt.known, false)
			if tt.before != nil {
				tt.before(f)
			}
			require.NoError(t, f.Resync())
			got := popAll(t, f)
			for i := range got {
				got[i].initial = false
			}
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestDeltaFIFO_HasSynced(t *testing.T) {
	tests := []struct {
		name  string
		known knownMap
		// ops run in order; "pop" pops one key and records whether it
		// was in the initial list.
		ops         []string
		wantSynced  []bool // HasSynced after each op
		wantInitial []bool // isInInitialList of each pop
	}{
		{
			name:       "a new queue is not synced",
			ops:        []string{"resync"},
			wantSynced: []bool{false},
		},
		{
			name:        "Add before any Replace syncs",
			ops:         []string{"add a", "replace b c", "pop", "pop", "pop"},
			wantSynced:  []bool{true, true, true, true, true},
			wantInitial: []bool{false, false, false},
		},
		{
			name:       "a dropped Delete before any Replace syncs",
			ops:        []string{"delete a"},
			wantSynced: []bool{true},
		},
		{
			name:       "AddIfNotPresent before any Replace syncs",
			ops:        []string{"addifnotpresent a"},
			wantSynced: []bool{true},
		},
		{
			name:       "an empty first Replace syncs at once",
			ops:        []string{"replace"},
			wantSynced: []bool{true},
		},
		{
			// Seed: the initial list includes its tombstones.
			name:        "first Replace syncs once its objects and tombstones are popped",
			known:       knownMap{"a": {"a", 0}, "z": {"z", 0}},
			ops:         []string{"replace a b", "pop", "add x", "pop", "pop", "pop"},
			wantSynced:  []bool{false, false, false, false, true, true},
			wantInitial: []bool{true, true, true, false},
		},
		{
			name:        "later Replaces never unsync",
			ops:         []string{"replace a", "pop", "replace b c", "pop", "add d"},
			wantSynced:  []bool{false, true, true, true, true},
			wantInitial: []bool{true, false},
		},
		{
			name:        "a first Replace listing a key twice counts it once",
			ops:         []string{"replace a a b", "pop", "pop"},
			wantSynced:  []bool{false, false, true},
			wantInitial: []bool{true, true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newTestDeltaFIFO(tt.known, false)
			var initial []bool
			for i, op := range tt.ops {
				fields := strings.Fields(op)
				switch fields[0] {
				case "add":
					require.NoError(t, f.Add(obj{fields[1], i}))
				case "delete":
					require.NoError(t, f.Delete(obj{fields[1], i}))
				case "addifnotpresent":
					require.NoError(t, f.AddIfNotPresent(fields[1], Deltas[obj]{added(obj{fields[1], i})}))
				case "resync":
					require.NoError(t, f.Resync())
				case "replace":
					var list []obj
					for _, name := range fields[1:] {
						list = append(list, obj{name, i})
					}
					require.NoError(t, f.Replace(list, ""))
				case "pop":
					require.NoError(t, f.Pop(context.Background(), func(_ string, _ Deltas[obj], in bool) error {
						initial = append(initial, in)
						return nil
					}))
				}
				assert.Equal(t, tt.wantSynced[i], f.HasSynced(), "after op %d %q", i, op)
			}
			assert.Equal(t, tt.wantInitial, initial)
		})
	}
}

func TestDeltaFIFO_PopRequeue(t *testing.T) {
	t.Run("seed: requeued twice, then processed", func(t *testing.T) {
		f := NewDeltaFIFO(DeltaFIFOOptions[string, obj]{KeyFunc: objKey})
		require.NoError(t, f.Add(obj{"a", 1}))
		require.NoError(t, f.Update(obj{"a", 2}))
		require.NoError(t, f.Add(obj{"b", 1}))
		want := Deltas[obj]{added(obj{"a", 1}), updated(obj{"a", 2})}
		errFailed := fmt.Errorf("handler failed: %w", ErrRequeue)

		attempts := 0
		var seen []string
		process := func(key string, ds Deltas[obj], _ bool) error {
			seen = append(seen, key)
			if key != "a" {
				return nil
			}
			assert.Equal(t, want, ds, "a requeued key keeps its deltas")
			attempts++
			if attempts <= 2 {
				return errFailed
			}
			return nil
		}
		err := f.Pop(context.Background(), process)
		require.ErrorIs(t, err, ErrRequeue, "Pop returns process's error")
		assert.Equal(t, []string{"b", "a"}, f.ListKeys(), "requeued at the back")
		require.NoError(t, f.Pop(context.Background(), process))
		require.ErrorIs(t, f.Pop(context.Background(), process), ErrRequeue)
		require.NoError(t, f.Pop(context.Background(), process))
		assert.Equal(t, []string{"a", "b", "a", "a"}, seen)
		assert.Zero(t, f.Len())
	})
	t.Run("other errors drop the deltas", func(t *testing.T) {
		f := NewDeltaFIFO(DeltaFIFOOptions[string, obj]{KeyFunc: objKey})
		require.NoError(t, f.Add(obj{"a", 1}))
		errOther := errors.New("other")
		err := f.Pop(context.Background(), func(string, Deltas[obj], bool) error { return errOther })
		require.ErrorIs(t, err, errOther)
		assert.Zero(t, f.Len())
	})
}

func TestDeltaFIFO_AddIfNotPresentKeepsQueuedDeltas(t *testing.T) {
	f := NewDeltaFIFO(DeltaFIFOOptions[string, obj]{KeyFunc: objKey})
	old := Deltas[obj]{added(obj{"a", 1})}

	require.NoError(t, f.AddIfNotPresent("a", old))
	old[0].Object.rv = 99 // the queue keeps its own copy
	got, _ := f.GetByKey("a")
	assert.Equal(t, Deltas[obj]{added(obj{"a", 1})}, got)

	require.NoError(t, f.Update(obj{"a", 2}))
	require.NoError(t, f.AddIfNotPresent("a", Deltas[obj]{added(obj{"a", 0})}))
	got, _ = f.GetByKey("a")
	assert.Equal(t, Deltas[obj]{added(obj{"a", 1}), updated(obj{"a", 2})}, got, "queued deltas win")

	require.NoError(t, f.AddIfNotPresent("b", nil))
	assert.Equal(t, []string{"a"}, f.ListKeys(), "empty deltas queue nothing")
}

func TestDeltaFIFO_PopBatch(t *testing.T) {
	tests := []struct {
		name     string
		queued   int
		max      int
		requeue  bool
		wantKeys []string
		wantLeft []string
	}{
		{name: "up to max", queued: 5, max: 3, wantKeys: []string{"k0", "k1", "k2"}, wantLeft: []string{"k3", "k4"}},
		{name: "fewer than max", queued: 2, max: 10, wantKeys: []string{"k0", "k1"}},
		{name: "max 0 means 1", queued: 2, max: 0, wantKeys: []string{"k0"}, wantLeft: []string{"k1"}},
		{name: "negative max means 1", queued: 2, max: -3, wantKeys: []string{"k0"}, wantLeft: []string{"k1"}},
		{name: "requeue puts the whole batch back in order", queued: 4, max: 2, requeue: true,
			wantKeys: []string{"k0", "k1"}, wantLeft: []string{"k2", "k3", "k0", "k1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := NewDeltaFIFO(DeltaFIFOOptions[string, obj]{KeyFunc: objKey})
			for i := range tt.queued {
				require.NoError(t, f.Add(obj{fmt.Sprintf("k%d", i), i}))
			}
			var keys []string
			err := f.PopBatch(context.Background(), tt.max, func(batch []QueuedDeltas[string, obj]) error {
				for _, q := range batch {
					keys = append(keys, q.Key)
					assert.Len(t, q.Deltas, 1)
				}
				if tt.requeue {
					return ErrRequeue
				}
				return nil
			})
			if tt.requeue {
				require.ErrorIs(t, err, ErrRequeue)
			} else {
				require.NoError(t, err)
			}
			assert.Equal(t, tt.wantKeys, keys)
			assert.Equal(t, tt.wantLeft, nilIfEmpty(f.ListKeys()))
		})
	}
}

func TestDeltaFIFO_PopBatchMarksInitialListPerKey(t *testing.T) {
	f := NewDeltaFIFO(DeltaFIFOOptions[string, obj]{KeyFunc: objKey})
	require.NoError(t, f.Replace([]obj{{"a", 1}, {"b", 1}}, ""))
	require.NoError(t, f.Add(obj{"c", 1}))
	var initial []bool
	require.NoError(t, f.PopBatch(context.Background(), 10, func(batch []QueuedDeltas[string, obj]) error {
		for _, q := range batch {
			initial = append(initial, q.IsInInitialList)
		}
		return nil
	}))
	assert.Equal(t, []bool{true, true, false}, initial)
	assert.True(t, f.HasSynced())
}

func nilIfEmpty[S ~[]E, E any](s S) S {
	if len(s) == 0 {
		return nil
	}
	return s
}

func TestDeltaFIFO_DeleteWhoseTransformFailsIsQueuedWithTheLastState(t *testing.T) {
	errNope := errors.New("nope")
	transform := func(o obj) (obj, error) {
		if o.rv < 0 {
			return o, errNope
		}
		return o, nil
	}
	known := knownMap{"k": {"k", 5}}
	f := NewDeltaFIFO(DeltaFIFOOptions[string, obj]{KeyFunc: objKey, KnownObjects: known, Transform: transform})
	require.NoError(t, f.Add(obj{"a", 1}))

	require.ErrorIs(t, f.Delete(obj{"a", -1}), errNope)
	require.ErrorIs(t, f.Delete(obj{"k", -1}), errNope)
	require.NoError(t, f.Delete(obj{"unknown", -1}), "nothing to delete: not transformed")
	assert.Equal(t, []popped{
		{key: "a", deltas: Deltas[obj]{added(obj{"a", 1}), deleted(obj{"a", 1})}},
		{key: "k", deltas: Deltas[obj]{deleted(obj{"k", 5})}},
	}, snapshot(f))
}

func TestDeltaFIFO_TransformRunsOnceAsObjectsEnter(t *testing.T) {
	errNope := errors.New("nope")
	var calls []obj
	transform := func(o obj) (obj, error) {
		calls = append(calls, o)
		if o.rv < 0 {
			return o, errNope
		}
		o.rv *= 10
		return o, nil
	}
	known := knownMap{"k": {"k", 5}, "gone": {"gone", 6}, "failing": {"failing", 7}}
	f := NewDeltaFIFO(DeltaFIFOOptions[string, obj]{KeyFunc: objKey, KnownObjects: known, Transform: transform})

	require.NoError(t, f.Add(obj{"a", 1}))
	require.NoError(t, f.Update(obj{"a", 2}))
	require.NoError(t, f.Delete(obj{"k", 3}))
	require.NoError(t, f.Delete(obj{"unknown", 4}), "a dropped Delete")
	err := f.Add(obj{"b", -1})
	require.ErrorIs(t, err, errNope)
	assert.Equal(t, []obj{{"a", 1}, {"a", 2}, {"k", 3}, {"b", -1}}, calls, "once per entering object; not for a dropped Delete")

	calls = nil
	err = f.Replace([]obj{{"a", 3}, {"failing", -2}, {"new", 4}}, "")
	require.ErrorIs(t, err, errNope)
	assert.Equal(t, []obj{{"a", 3}, {"failing", -2}, {"new", 4}}, calls, "not on tombstones")

	want := []popped{
		{key: "a", deltas: Deltas[obj]{added(obj{"a", 10}), updated(obj{"a", 20}), synced(obj{"a", 30})}},
		{key: "k", deltas: Deltas[obj]{deleted(obj{"k", 30})}},
		{key: "new", deltas: Deltas[obj]{synced(obj{"new", 40})}},
		// "failing" failed its transform but was listed: no tombstone.
		{key: "gone", deltas: Deltas[obj]{tombstone(obj{"gone", 6})}},
	}
	assert.Equal(t, want, snapshot(f))
	_, ok := f.GetByKey("b")
	assert.False(t, ok, "a failed transform queues nothing")

	calls = nil
	require.NoError(t, f.Resync())
	assert.Empty(t, calls, "not on Resync's known objects")
	assert.Equal(t, append(want, popped{key: "failing", deltas: Deltas[obj]{synced(obj{"failing", 7})}}), snapshot(f))
}

func TestDeltaFIFO_GetAndListReturnCopies(t *testing.T) {
	f := NewDeltaFIFO(DeltaFIFOOptions[string, obj]{KeyFunc: objKey})
	require.NoError(t, f.Add(obj{"b", 1}))
	require.NoError(t, f.Add(obj{"a", 1}))
	require.NoError(t, f.Update(obj{"b", 2}))

	ds, ok, err := f.Get(obj{"b", 0})
	require.NoError(t, err)
	require.True(t, ok)
	ds[0].Object.rv = 99
	_ = append(ds[:1], deleted(obj{"b", 99}))
	ds, ok = f.GetByKey("b")
	require.True(t, ok)
	assert.Equal(t, Deltas[obj]{added(obj{"b", 1}), updated(obj{"b", 2})}, ds, "Get returns a copy")

	assert.Equal(t, []obj{{"b", 2}, {"a", 1}}, f.List(), "newest object per key, in queue order")
	keys := f.ListKeys()
	assert.Equal(t, []string{"b", "a"}, keys)
	keys[0] = "x"
	assert.Equal(t, []string{"b", "a"}, f.ListKeys())

	_, ok, err = f.Get(obj{"zz", 0})
	require.NoError(t, err)
	assert.False(t, ok)
}

func TestDeltaFIFO_KeyErrorLeavesQueueUnchanged(t *testing.T) {
	bad := obj{"bad", 1}
	tests := []struct {
		name string
		op   func(f *DeltaFIFO[string, obj]) error
	}{
		{"Add", func(f *DeltaFIFO[string, obj]) error { return f.Add(bad) }},
		{"Update", func(f *DeltaFIFO[string, obj]) error { return f.Update(bad) }},
		{"Delete", func(f *DeltaFIFO[string, obj]) error { return f.Delete(bad) }},
		{"Get", func(f *DeltaFIFO[string, obj]) error { _, _, err := f.Get(bad); return err }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := NewDeltaFIFO(DeltaFIFOOptions[string, obj]{KeyFunc: objKey, KnownObjects: knownMap{"a": {"a", 0}}})
			require.NoError(t, f.Add(obj{"a", 1}))
			before := snapshot(f)
			err := tt.op(f)
			var ke *KeyError
			require.ErrorAs(t, err, &ke)
			assert.Equal(t, bad, ke.Object)
			require.ErrorIs(t, err, errBadKey)
			assert.Equal(t, before, snapshot(f))
		})
	}
	t.Run("Replace skips failing objects and applies the rest", func(t *testing.T) {
		f := NewDeltaFIFO(DeltaFIFOOptions[string, obj]{KeyFunc: objKey})
		err := f.Replace([]obj{{"a", 1}, bad, {"b", 1}, {"bad", 2}}, "")
		var ke *KeyError
		require.ErrorAs(t, err, &ke)
		var joined interface{ Unwrap() []error }
		require.ErrorAs(t, err, &joined)
		assert.Len(t, joined.Unwrap(), 2, "one error per failing object")
		assert.Equal(t, []string{"a", "b"}, f.ListKeys())
		assert.Len(t, popAll(t, f), 2)
		assert.True(t, f.HasSynced(), "the initial list is what Replace queued")
	})
}

func TestDeltaFIFO_ZeroValuesDoNotPanic(t *testing.T) {
	t.Run("zero object and key", func(t *testing.T) {
		f := NewDeltaFIFO(DeltaFIFOOptions[string, obj]{KeyFunc: objKey, KnownObjects: knownMap{}})
		var zero obj
		assert.NotPanics(t, func() {
			require.NoError(t, f.Add(zero))
			require.NoError(t, f.Update(zero))
			require.NoError(t, f.Delete(zero))
			require.NoError(t, f.Replace([]obj{zero}, ""))
			require.NoError(t, f.Replace(nil, ""))
			require.NoError(t, f.Resync())
			require.NoError(t, f.AddIfNotPresent("", nil))
			_, _, _ = f.Get(zero)
			_, _ = f.GetByKey("")
			_ = f.List()
		})
		require.Equal(t, []string{""}, f.ListKeys())
		got := popAll(t, f)
		assert.Equal(t, Deltas[obj]{added(zero), updated(zero), deleted(zero), synced(zero), tombstone(zero)}, got[0].deltas)
	})
	t.Run("struct keys and pointer objects", func(t *testing.T) {
		type nsName struct{ ns, name string }
		f := NewDeltaFIFO(DeltaFIFOOptions[nsName, *obj]{KeyFunc: func(o *obj) (nsName, error) {
			if o == nil {
				return nsName{}, errors.New("nil object")
			}
			return nsName{"default", o.name}, nil
		}})
		var ke *KeyError
		require.ErrorAs(t, f.Add(nil), &ke)
		require.NoError(t, f.Add(&obj{"a", 1}))
		require.NoError(t, f.AddIfNotPresent(nsName{}, Deltas[*obj]{{Type: Added}}))
		assert.Equal(t, []nsName{{"default", "a"}, {}}, f.ListKeys())
		require.NoError(t, f.PopBatch(context.Background(), 0, func([]QueuedDeltas[nsName, *obj]) error { return nil }))
	})
	t.Run("no KeyFunc is the one panic", func(t *testing.T) {
		assert.Panics(t, func() { NewDeltaFIFO(DeltaFIFOOptions[string, obj]{}) })
	})
}

func TestDeltaFIFO_CloseWakesEveryPopperAfterDraining(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := NewDeltaFIFO(DeltaFIFOOptions[string, obj]{KeyFunc: objKey})
		const poppers = 8
		errs := make(chan error, poppers)
		for i := range poppers {
			go func() {
				if i%2 == 0 {
					errs <- f.Pop(t.Context(), func(string, Deltas[obj], bool) error { return nil })
				} else {
					errs <- f.PopBatch(t.Context(), 2, func([]QueuedDeltas[string, obj]) error { return nil })
				}
			}()
		}
		synctest.Wait()
		assert.Empty(t, errs, "poppers wait on an empty queue")
		f.Close()
		for range poppers {
			require.ErrorIs(t, <-errs, ErrClosed)
		}
		assert.True(t, f.IsClosed())
	})
	t.Run("keys queued before Close are handed out first", func(t *testing.T) {
		f := NewDeltaFIFO(DeltaFIFOOptions[string, obj]{KeyFunc: objKey})
		require.NoError(t, f.Add(obj{"a", 1}))
		f.Close()
		var got []string
		process := func(key string, _ Deltas[obj], _ bool) error { got = append(got, key); return nil }
		require.NoError(t, f.Pop(context.Background(), process))
		require.ErrorIs(t, f.Pop(context.Background(), process), ErrClosed)
		assert.Equal(t, []string{"a"}, got)
	})
}

func TestDeltaFIFO_ContextEndWakesEveryPopper(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := NewDeltaFIFO(DeltaFIFOOptions[string, obj]{KeyFunc: objKey})
		ctx, cancel := context.WithCancel(t.Context())
		const poppers = 8
		errs := make(chan error, poppers)
		for i := range poppers {
			go func() {
				if i%2 == 0 {
					errs <- f.Pop(ctx, func(string, Deltas[obj], bool) error { return nil })
				} else {
					errs <- f.PopBatch(ctx, 2, func([]QueuedDeltas[string, obj]) error { return nil })
				}
			}()
		}
		// A popper with another context keeps waiting, and still gets
		// the next key.
		other := make(chan string, 1)
		go func() {
			_ = f.Pop(t.Context(), func(key string, _ Deltas[obj], _ bool) error { other <- key; return nil })
		}()
		synctest.Wait()
		assert.Empty(t, errs)
		cancel()
		for range poppers {
			require.ErrorIs(t, <-errs, context.Canceled)
		}
		synctest.Wait()
		assert.Empty(t, other)
		require.NoError(t, f.Add(obj{"a", 1}))
		assert.Equal(t, "a", <-other)
	})
	t.Run("a done context wins over queued keys", func(t *testing.T) {
		f := NewDeltaFIFO(DeltaFIFOOptions[string, obj]{KeyFunc: objKey})
		require.NoError(t, f.Add(obj{"a", 1}))
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		called := false
		err := f.Pop(ctx, func(string, Deltas[obj], bool) error { called = true; return nil })
		require.ErrorIs(t, err, context.Canceled)
		assert.False(t, called)
		assert.Equal(t, 1, f.Len(), "nothing popped")
	})
}

// The poppers update known, the queue's KnownObjects, inside process
// without a lock of their own while a resyncer reads it through the queue:
// the race detector checks that process runs under the queue's lock.
func TestDeltaFIFO_ConcurrentProducersAndPoppersLoseNothing(t *testing.T) {
	const producers, poppers, perProducer = 4, 4, 500
	known := knownMap{}
	f := NewDeltaFIFO(DeltaFIFOOptions[string, obj]{KeyFunc: objKey, KnownObjects: known})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var mu sync.Mutex
	got := map[string][]int{}
	var wg sync.WaitGroup
	for range poppers {
		wg.Go(func() {
			for {
				err := f.Pop(ctx, func(key string, ds Deltas[obj], _ bool) error {
					known.apply(key, ds)
					mu.Lock()
					defer mu.Unlock()
					for _, d := range ds {
						if d.Type != Sync {
							got[key] = append(got[key], d.Object.rv)
						}
					}
					return nil
				})
				if err != nil {
					return
				}
			}
		})
	}
	var pwg sync.WaitGroup
	done := make(chan struct{})
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
				assert.NoError(t, f.Resync())
			}
		}
	})
	for p := range producers {
		pwg.Go(func() {
			name := fmt.Sprintf("p%d", p)
			for i := range perProducer {
				if i%2 == 0 {
					assert.NoError(t, f.Add(obj{name, i}))
				} else {
					assert.NoError(t, f.Update(obj{name, i}))
				}
				_ = f.Len()
				_, _ = f.GetByKey(name)
			}
		})
	}
	pwg.Wait()
	close(done)
	f.Close()
	wg.Wait()
	want := make([]int, perProducer)
	for i := range want {
		want[i] = i
	}
	for p := range producers {
		assert.Equal(t, want, got[fmt.Sprintf("p%d", p)], "every delta once, in order")
	}
}

// Thousands of keys cross the storage's chunk boundaries and make its
// index grow, drain and fill again; order and deltas must not notice.
func TestDeltaFIFO_KeepsOrderAcrossLargeBursts(t *testing.T) {
	name := func(i int) string { return fmt.Sprintf("k%05d", i) }
	f := newTestDeltaFIFO(nil, false)
	for round := range 2 {
		for i := range 3000 {
			require.NoError(t, f.Add(obj{name(i), 1}))
		}
		for i := range 1000 {
			require.NoError(t, f.Update(obj{name(i), 2}))
		}
		for i := range 2000 {
			require.NoError(t, f.Pop(context.Background(), func(key string, ds Deltas[obj], _ bool) error {
				require.Equal(t, name(i), key)
				want := Deltas[obj]{added(obj{key, 1})}
				if i < 1000 {
					want = append(want, updated(obj{key, 2}))
				}
				require.Equal(t, want, ds)
				return nil
			}))
		}
		for i := 5000; i < 8000; i++ {
			require.NoError(t, f.Add(obj{name(i), 1}))
		}
		// Queued now: 2000..2999, then 5000..7999. Relist 2500..2999,
		// 5000..5999 and a new 9000.
		var list []obj
		for i := 2500; i < 3000; i++ {
			list = append(list, obj{name(i), 3})
		}
		for i := 5000; i < 6000; i++ {
			list = append(list, obj{name(i), 3})
		}
		list = append(list, obj{name(9000), 3})
		require.NoError(t, f.Replace(list, ""))

		var wantKeys []string
		for i := 2000; i < 3000; i++ {
			wantKeys = append(wantKeys, name(i))
		}
		for i := 5000; i < 8000; i++ {
			wantKeys = append(wantKeys, name(i))
		}
		wantKeys = append(wantKeys, name(9000))
		got := popAll(t, f)
		require.Len(t, got, len(wantKeys), "round %d", round)
		for i, p := range got {
			require.Equal(t, wantKeys[i], p.key)
			n, err := strconv.Atoi(p.key[1:])
			require.NoError(t, err)
			switch {
			case n == 9000:
				require.Equal(t, Deltas[obj]{synced(obj{p.key, 3})}, p.deltas)
			case n < 2500 || n >= 6000:
				require.Equal(t, Deltas[obj]{added(obj{p.key, 1}), tombstone(obj{p.key, 1})}, p.deltas)
			default:
				require.Equal(t, Deltas[obj]{added(obj{p.key, 1}), synced(obj{p.key, 3})}, p.deltas)
			}
		}
	}
}

// A queue that fills and drains again and again, each key added and then
// updated before its pop, allocates once per key: the slice its deltas are
// handed out in. The index is kept from one burst to the next and the
// second delta fits in the first one's slice; only the storage's chunks
// are allocated again, at most keys/chunkLen+1 of them (a burst spans
// keys/chunkLen+2 chunks, one of which is the spare the last burst left).
func TestDeltaFIFO_AllocatesOncePerKeyAddedAndUpdated(t *testing.T) {
	const keys = 3000
	objs := make([]obj, keys)
	for i := range objs {
		objs[i] = obj{fmt.Sprintf("k%05d", i), 1}
	}
	f := newTestDeltaFIFO(nil, false)
	ctx := context.Background()
	process := func(string, Deltas[obj], bool) error { return nil }
	burst := func() {
		for _, o := range objs {
			_ = f.Add(o)
		}
		for _, o := range objs {
			_ = f.Update(o)
		}
		for range keys {
			_ = f.Pop(ctx, process)
		}
	}
	burst() // the first burst makes the index
	allocs := testing.AllocsPerRun(5, burst)
	assert.LessOrEqual(t, allocs, float64(keys+keys/chunkLen+1), "allocations per burst of %d keys", keys)
}
