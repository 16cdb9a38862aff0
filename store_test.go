package mirror

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testObj is what the Indexer tests store: a namespaced name, labels for a
// multi-valued index, and a version to tell updates apart.
type testObj struct {
	ns, name string
	labels   []string
	v        int
}

var errBad = errors.New("bad object")

func testKey(o testObj) (string, error) {
	if o.name == "" {
		return "", errBad
	}
	return o.ns + "/" + o.name, nil
}

func byNamespace(o testObj) ([]string, error) { return []string{o.ns}, nil }

func byLabel(o testObj) ([]string, error) {
	if slices.Contains(o.labels, "bad") {
		return nil, errBad
	}
	return o.labels, nil
}

func newTestIndexer() *Indexer[string, testObj] {
	return NewIndexer(testKey, Indexers[testObj]{"ns": byNamespace, "label": byLabel})
}

// checkIndexes checks an Indexer's internal invariants: every index holds
// exactly the stored keys under exactly the values its function gives, and
// no empty set remains.
func checkIndexes[K comparable, T any](t testing.TB, i *Indexer[K, T]) {
	t.Helper()
	i.mu.RLock()
	defer i.mu.RUnlock()
	defs := i.defs.Load()
	require.Len(t, i.contents.indexes, len(defs.funcs))
	for j, ix := range i.contents.indexes {
		want := index[K]{}
		for key, obj := range i.contents.items.all() {
			var vals []string
			if f := defs.funcs[j]; f != nil {
				var err error
				vals, err = f(obj)
				require.NoError(t, err)
			}
			want.add(key, vals)
		}
		require.Equal(t, want, ix, "index %q", defs.names[j])
	}
}

// names returns the names of objs, sorted.
func names(objs []testObj) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.name)
	}
	slices.Sort(out)
	return out
}

func byIndexNames(t testing.TB, i *Indexer[string, testObj], index, value string) []string {
	t.Helper()
	objs, err := i.ByIndex(index, value)
	require.NoError(t, err)
	return names(objs)
}

func TestIndexer_WritesKeepIndexesRight(t *testing.T) {
	type lookup struct {
		index, value string
		want         []string // names, sorted
	}
	tests := []struct {
		name   string
		writes func(t *testing.T, i *Indexer[string, testObj])
		check  []lookup
		values map[string][]string // index → sorted ListIndexFuncValues
	}{
		{
			name: "add indexes under each value",
			writes: func(t *testing.T, i *Indexer[string, testObj]) {
				require.NoError(t, i.Add(testObj{ns: "a", name: "x", labels: []string{"l1", "l2"}}))
				require.NoError(t, i.Add(testObj{ns: "a", name: "y", labels: []string{"l2"}}))
				require.NoError(t, i.Add(testObj{ns: "b", name: "z"}))
			},
			check: []lookup{
				{"ns", "a", []string{"x", "y"}}, {"ns", "b", []string{"z"}},
				{"label", "l1", []string{"x"}}, {"label", "l2", []string{"x", "y"}},
			},
			values: map[string][]string{"ns": {"a", "b"}, "label": {"l1", "l2"}},
		},
		{
			name: "update moves object between values and empty sets vanish",
			writes: func(t *testing.T, i *Indexer[string, testObj]) {
				require.NoError(t, i.Add(testObj{ns: "a", name: "x"}))
				require.NoError(t, i.Add(testObj{ns: "b", name: "y"}))
				require.NoError(t, i.Update(testObj{ns: "a", name: "x", v: 2})) // same values
				require.NoError(t, i.Delete(testObj{ns: "b", name: "y"}))
				require.NoError(t, i.Add(testObj{ns: "b", name: "y"}))
				// Keys include the namespace here, so move by Set.
				_, _, err := i.Set("a/x", testObj{ns: "c", name: "x"})
				require.NoError(t, err)
			},
			check:  []lookup{{"ns", "a", nil}, {"ns", "b", []string{"y"}}, {"ns", "c", []string{"x"}}},
			values: map[string][]string{"ns": {"b", "c"}, "label": {}},
		},
		{
			name: "multi-valued index gains and loses values",
			writes: func(t *testing.T, i *Indexer[string, testObj]) {
				require.NoError(t, i.Add(testObj{name: "x", labels: []string{"l1", "l2"}}))
				require.NoError(t, i.Add(testObj{name: "y", labels: []string{"l2"}}))
				require.NoError(t, i.Update(testObj{name: "x", labels: []string{"l2", "l3"}}))
				require.NoError(t, i.Update(testObj{name: "y", labels: nil}))
			},
			check:  []lookup{{"label", "l1", nil}, {"label", "l2", []string{"x"}}, {"label", "l3", []string{"x"}}},
			values: map[string][]string{"ns": {""}, "label": {"l2", "l3"}},
		},
		{
			name: "many labels change at once",
			writes: func(t *testing.T, i *Indexer[string, testObj]) {
				var many, other []string
				for n := range 20 {
					many = append(many, fmt.Sprint("m", n))
					other = append(other, fmt.Sprint("m", n+10))
				}
				require.NoError(t, i.Add(testObj{name: "x", labels: many}))
				require.NoError(t, i.Update(testObj{name: "x", labels: other}))
			},
			check: []lookup{{"label", "m0", nil}, {"label", "m10", []string{"x"}}, {"label", "m29", []string{"x"}}},
		},
		{
			name: "duplicate values in one object",
			writes: func(t *testing.T, i *Indexer[string, testObj]) {
				require.NoError(t, i.Add(testObj{name: "x", labels: []string{"l1", "l1"}}))
				require.NoError(t, i.Update(testObj{name: "x", labels: []string{"l2", "l2"}}))
			},
			check:  []lookup{{"label", "l1", nil}, {"label", "l2", []string{"x"}}},
			values: map[string][]string{"ns": {""}, "label": {"l2"}},
		},
		{
			name: "delete removes from every set and empty sets vanish",
			writes: func(t *testing.T, i *Indexer[string, testObj]) {
				require.NoError(t, i.Add(testObj{ns: "a", name: "x", labels: []string{"l1", "l2"}}))
				require.NoError(t, i.Add(testObj{ns: "a", name: "y", labels: []string{"l2"}}))
				require.NoError(t, i.Delete(testObj{ns: "a", name: "x"}))
				require.NoError(t, i.Delete(testObj{ns: "a", name: "absent"}))
			},
			check:  []lookup{{"ns", "a", []string{"y"}}, {"label", "l1", nil}, {"label", "l2", []string{"y"}}},
			values: map[string][]string{"ns": {"a"}, "label": {"l2"}},
		},
		{
			name: "deleting the last object empties every index",
			writes: func(t *testing.T, i *Indexer[string, testObj]) {
				require.NoError(t, i.Add(testObj{ns: "a", name: "x", labels: []string{"l1"}}))
				_, existed := i.DeleteKey("a/x")
				require.True(t, existed)
			},
			values: map[string][]string{"ns": {}, "label": {}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			i := newTestIndexer()
			tt.writes(t, i)
			checkIndexes(t, i)
			for _, l := range tt.check {
				assert.Equal(t, l.want, byIndexNames(t, i, l.index, l.value), "ByIndex(%q, %q)", l.index, l.value)
			}
			for index, want := range tt.values {
				got := i.ListIndexFuncValues(index)
				slices.Sort(got)
				assert.Equal(t, want, got, "ListIndexFuncValues(%q)", index)
			}
		})
	}
}

func TestIndexer_IndexFuncFailureLeavesStoreUnchanged(t *testing.T) {
	good := testObj{ns: "a", name: "x", labels: []string{"l1"}, v: 1}
	tests := []struct {
		name  string
		write func(i *Indexer[string, testObj]) error
	}{
		{"add of new key", func(i *Indexer[string, testObj]) error {
			return i.Add(testObj{ns: "a", name: "y", labels: []string{"bad"}})
		}},
		{"update keeps old value", func(i *Indexer[string, testObj]) error {
			return i.Update(testObj{ns: "a", name: "x", labels: []string{"l2", "bad"}, v: 2})
		}},
		{"set keeps old value", func(i *Indexer[string, testObj]) error {
			old, existed, err := i.Set("a/x", testObj{ns: "b", name: "x", labels: []string{"bad"}, v: 2})
			assert.False(t, existed, "a failed Set reports no old value")
			assert.Zero(t, old)
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			i := newTestIndexer()
			require.NoError(t, i.Add(good))
			err := tt.write(i)
			var ie *IndexError
			require.ErrorAs(t, err, &ie)
			assert.Equal(t, "label", ie.Index)
			assert.ErrorIs(t, err, errBad)
			assert.Contains(t, err.Error(), `index "label"`)

			assert.Equal(t, []testObj{good}, i.List())
			checkIndexes(t, i)
			assert.Equal(t, []string{"x"}, byIndexNames(t, i, "label", "l1"))
			assert.Equal(t, []string{"a"}, i.ListIndexFuncValues("ns"))
		})
	}
}

func TestIndexer_KeyFailureIsKeyError(t *testing.T) {
	i := newTestIndexer()
	require.NoError(t, i.Add(testObj{ns: "a", name: "x"}))
	noKey := testObj{ns: "a"}
	for name, call := range map[string]func() error{
		"Add":    func() error { return i.Add(noKey) },
		"Update": func() error { return i.Update(noKey) },
		"Delete": func() error { return i.Delete(noKey) },
		"Get":    func() error { _, _, err := i.Get(noKey); return err },
	} {
		t.Run(name, func(t *testing.T) {
			err := call()
			var ke *KeyError
			require.ErrorAs(t, err, &ke)
			assert.ErrorIs(t, err, errBad)
			assert.Equal(t, 1, i.Len())
		})
	}
}

func TestIndexer_GetFindsByObjectKey(t *testing.T) {
	i := newTestIndexer()
	require.NoError(t, i.Add(testObj{ns: "a", name: "x", v: 1}))
	got, ok, err := i.Get(testObj{ns: "a", name: "x"})
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, 1, got.v)
	_, ok, err = i.Get(testObj{ns: "a", name: "y"})
	require.NoError(t, err)
	assert.False(t, ok)
}

func TestIndexer_SetAndDeleteKeyReturnOldValues(t *testing.T) {
	i := newTestIndexer()
	old, existed, err := i.Set("k", testObj{name: "k", v: 1})
	require.NoError(t, err)
	assert.False(t, existed)
	assert.Zero(t, old)

	old, existed, err = i.Set("k", testObj{name: "k", v: 2})
	require.NoError(t, err)
	assert.True(t, existed)
	assert.Equal(t, 1, old.v)

	old, existed = i.DeleteKey("k")
	assert.True(t, existed)
	assert.Equal(t, 2, old.v)

	old, existed = i.DeleteKey("k")
	assert.False(t, existed)
	assert.Zero(t, old)
	assert.Zero(t, i.Len())
}

func TestIndexer_IndexFuncFailingOnStoredObjectStillRemovesEntries(t *testing.T) {
	tests := []struct {
		name  string
		write func(t *testing.T, i *Indexer[string, testObj])
		want  []string // sorted label values left
	}{
		{"update", func(t *testing.T, i *Indexer[string, testObj]) {
			require.NoError(t, i.Update(testObj{name: "x", labels: []string{"l3"}, v: 2}))
		}, []string{"l0", "l3"}},
		{"delete", func(t *testing.T, i *Indexer[string, testObj]) {
			_, existed := i.DeleteKey("/x")
			require.True(t, existed)
		}, []string{"l0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			failOld := false
			// A non-deterministic index function: once failOld is set it
			// fails on the objects of version 1 it succeeded on before.
			label := func(o testObj) ([]string, error) {
				if failOld && o.v == 1 {
					return nil, errBad
				}
				return o.labels, nil
			}
			i := NewIndexer(testKey, Indexers[testObj]{"label": label})
			require.NoError(t, i.Add(testObj{name: "x", labels: []string{"l1", "l2"}, v: 1}))
			require.NoError(t, i.Add(testObj{name: "y", labels: []string{"l0"}}))
			failOld = true
			tt.write(t, i)
			failOld = false
			checkIndexes(t, i)
			assert.Equal(t, tt.want, slices.Sorted(slices.Values(i.ListIndexFuncValues("label"))))
		})
	}
}

func TestIndexer_ObjectChangedInPlaceStillLeavesOldValue(t *testing.T) {
	i := NewIndexer(func(o *testObj) (string, error) { return o.name, nil },
		Indexers[*testObj]{"ns": func(o *testObj) ([]string, error) { return []string{o.ns}, nil }})
	o := &testObj{ns: "a", name: "x"}
	require.NoError(t, i.Add(o))
	o.ns = "b" // a caller breaking the rules
	require.NoError(t, i.Update(&testObj{ns: "c", name: "x"}))
	checkIndexes(t, i)
	assert.Equal(t, []string{"c"}, i.ListIndexFuncValues("ns"), "the entry made for the stored value is removed")
}

func TestIndexer_ReplaceSkipsFailuresAndStoresRest(t *testing.T) {
	i := newTestIndexer()
	require.NoError(t, i.Add(testObj{ns: "old", name: "gone"}))
	require.NoError(t, i.Add(testObj{ns: "a", name: "kept", v: 1}))

	noKey := testObj{ns: "a", labels: []string{"l1"}}
	badLabel := testObj{ns: "a", name: "bad", labels: []string{"bad"}}
	err := i.Replace([]testObj{
		{ns: "a", name: "kept", v: 2, labels: []string{"l1"}},
		noKey,
		{ns: "b", name: "new", labels: []string{"l1"}},
		badLabel,
		{ns: "b", name: "dup", v: 1},
		{ns: "b", name: "dup", v: 2, labels: []string{"l2"}},
	}, "10")

	var ke *KeyError
	require.ErrorAs(t, err, &ke)
	assert.Equal(t, noKey, ke.Object)
	var ie *IndexError
	require.ErrorAs(t, err, &ie)
	assert.Equal(t, badLabel, ie.Object)

	checkIndexes(t, i)
	keys := i.ListKeys()
	slices.Sort(keys)
	assert.Equal(t, []string{"a/kept", "b/dup", "b/new"}, keys)
	got, _ := i.GetByKey("a/kept")
	assert.Equal(t, 2, got.v)
	got, _ = i.GetByKey("b/dup")
	assert.Equal(t, 2, got.v, "the last of several objects with one key wins")
	assert.Equal(t, []string{"kept", "new"}, byIndexNames(t, i, "label", "l1"))
	assert.Equal(t, []string{"dup"}, byIndexNames(t, i, "label", "l2"))
	vals := i.ListIndexFuncValues("ns")
	slices.Sort(vals)
	assert.Equal(t, []string{"a", "b"}, vals, "values of replaced objects are gone")

	require.NoError(t, i.Replace(nil, "11"))
	assert.Zero(t, i.Len())
	checkIndexes(t, i)
	assert.Empty(t, i.ListIndexFuncValues("ns"))
}

func TestIndexer_AddIndexersReindexesExistingItems(t *testing.T) {
	i := NewIndexer[string, testObj](testKey, nil)
	require.NoError(t, i.Add(testObj{ns: "a", name: "x", labels: []string{"l1"}}))
	require.NoError(t, i.Add(testObj{ns: "b", name: "y", labels: []string{"l1", "l2"}}))

	require.NoError(t, i.AddIndexers(Indexers[testObj]{"ns": byNamespace}))
	require.NoError(t, i.AddIndexers(Indexers[testObj]{"label": byLabel}))
	checkIndexes(t, i)
	assert.Equal(t, []string{"x"}, byIndexNames(t, i, "ns", "a"))
	assert.Equal(t, []string{"x", "y"}, byIndexNames(t, i, "label", "l1"))

	require.NoError(t, i.Add(testObj{ns: "a", name: "z", labels: []string{"l2"}}))
	checkIndexes(t, i)
	assert.Equal(t, []string{"y", "z"}, byIndexNames(t, i, "label", "l2"))
	assert.Equal(t, []string{"label", "ns"}, slices.Sorted(maps.Keys(i.GetIndexers())))
}

func TestIndexer_AddIndexersFailureChangesNothing(t *testing.T) {
	tests := []struct {
		name     string
		indexers Indexers[testObj]
		check    func(t *testing.T, err error)
	}{
		{
			name:     "duplicate name",
			indexers: Indexers[testObj]{"other": byNamespace, "ns": byNamespace},
			check: func(t *testing.T, err error) {
				assert.ErrorContains(t, err, `"ns"`)
			},
		},
		{
			name: "index func fails on a stored object",
			indexers: Indexers[testObj]{"other": byNamespace, "fails": func(o testObj) ([]string, error) {
				return nil, errBad
			}},
			check: func(t *testing.T, err error) {
				var ie *IndexError
				require.ErrorAs(t, err, &ie)
				assert.Equal(t, "fails", ie.Index)
				assert.ErrorIs(t, err, errBad)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			i := NewIndexer(testKey, Indexers[testObj]{"ns": byNamespace})
			require.NoError(t, i.Add(testObj{ns: "a", name: "x"}))
			err := i.AddIndexers(tt.indexers)
			require.Error(t, err)
			tt.check(t, err)
			assert.Equal(t, []string{"ns"}, slices.Collect(maps.Keys(i.GetIndexers())))
			_, err = i.ByIndex("other", "a")
			assert.ErrorIs(t, err, ErrUnknownIndex, "no index was added")
			checkIndexes(t, i)
			require.NoError(t, i.Add(testObj{ns: "b", name: "y"}))
			checkIndexes(t, i)
		})
	}
}

func TestIndexer_WriteRacingAddIndexersIndexesUnderNewIndex(t *testing.T) {
	tests := []struct {
		name  string
		write func(i *Indexer[string, testObj], o testObj) error
	}{
		{"Add", func(i *Indexer[string, testObj], o testObj) error { return i.Add(o) }},
		{"Replace", func(i *Indexer[string, testObj], o testObj) error { return i.Replace([]testObj{o}, "") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var i *Indexer[string, testObj]
			added := false
			// The index function adds an index while the write is between
			// computing its values and taking the lock: the write must see
			// the new index and index the object under it too.
			i = NewIndexer(testKey, Indexers[testObj]{"ns": func(o testObj) ([]string, error) {
				if !added {
					added = true
					require.NoError(t, i.AddIndexers(Indexers[testObj]{"label": byLabel}))
				}
				return []string{o.ns}, nil
			}})
			require.NoError(t, tt.write(i, testObj{ns: "a", name: "x", labels: []string{"l1"}}))
			checkIndexes(t, i)
			assert.Equal(t, []string{"x"}, byIndexNames(t, i, "label", "l1"))
		})
	}
}

func TestIndexer_UnknownIndex(t *testing.T) {
	i := newTestIndexer()
	require.NoError(t, i.Add(testObj{ns: "a", name: "x"}))
	_, err := i.Index("nope", testObj{ns: "a"})
	assert.ErrorIs(t, err, ErrUnknownIndex)
	assert.ErrorContains(t, err, `"nope"`)
	_, err = i.ByIndex("nope", "a")
	assert.ErrorIs(t, err, ErrUnknownIndex)
	_, err = i.IndexKeys("nope", "a")
	assert.ErrorIs(t, err, ErrUnknownIndex)
	assert.Nil(t, i.ListIndexFuncValues("nope"))
	for range i.ByIndexAll("nope", "a") {
		t.Fatal("ByIndexAll of an unknown index yields nothing")
	}
}

func TestIndexer_IndexReturnsObjectsSharingAnyValue(t *testing.T) {
	i := newTestIndexer()
	require.NoError(t, i.Add(testObj{name: "x", labels: []string{"l1", "l2"}}))
	require.NoError(t, i.Add(testObj{name: "y", labels: []string{"l2", "l3"}}))
	require.NoError(t, i.Add(testObj{name: "z", labels: []string{"l4"}}))
	tests := []struct {
		name   string
		labels []string
		want   []string
	}{
		{"one value", []string{"l2"}, []string{"x", "y"}},
		{"several values, each object once", []string{"l1", "l2", "l3"}, []string{"x", "y"}},
		{"no value", nil, nil},
		{"unused value", []string{"l9"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := i.Index("label", testObj{labels: tt.labels})
			require.NoError(t, err)
			assert.Equal(t, tt.want, names(got))
		})
	}
	_, err := i.Index("label", testObj{labels: []string{"bad"}})
	var ie *IndexError
	assert.ErrorAs(t, err, &ie)
}

func TestIndexer_IndexKeys(t *testing.T) {
	i := newTestIndexer()
	require.NoError(t, i.Add(testObj{ns: "a", name: "x"}))
	require.NoError(t, i.Add(testObj{ns: "a", name: "y"}))
	require.NoError(t, i.Add(testObj{ns: "b", name: "z"}))
	keys, err := i.IndexKeys("ns", "a")
	require.NoError(t, err)
	slices.Sort(keys)
	assert.Equal(t, []string{"a/x", "a/y"}, keys)
	keys, err = i.IndexKeys("ns", "none")
	require.NoError(t, err)
	assert.Empty(t, keys)
}

func TestIndexer_IndexLenCountsObjectsUnderAValue(t *testing.T) {
	i := newTestIndexer()
	require.NoError(t, i.Add(testObj{ns: "a", name: "x"}))
	require.NoError(t, i.Add(testObj{ns: "a", name: "y"}))
	require.NoError(t, i.Add(testObj{ns: "b", name: "z"}))
	assert.Equal(t, 2, i.IndexLen("ns", "a"))
	assert.Equal(t, 1, i.IndexLen("ns", "b"))
	assert.Equal(t, 0, i.IndexLen("ns", "none"))
	assert.Equal(t, 0, i.IndexLen("no-such-index", "a"))
	_, existed := i.DeleteKey("a/x")
	require.True(t, existed)
	assert.Equal(t, 1, i.IndexLen("ns", "a"))
}

func TestIndexer_NilIndexFuncIndexesNothing(t *testing.T) {
	i := NewIndexer(testKey, Indexers[testObj]{"nil": nil})
	require.NoError(t, i.Add(testObj{name: "x"}))
	assert.Empty(t, i.ListIndexFuncValues("nil"))
	got, err := i.Index("nil", testObj{name: "x"})
	require.NoError(t, err)
	assert.Empty(t, got)
	require.Contains(t, i.GetIndexers(), "nil")
}

func TestIndexer_ResultsAreCopies(t *testing.T) {
	i := newTestIndexer()
	require.NoError(t, i.Add(testObj{ns: "a", name: "x", v: 1}))
	require.NoError(t, i.Add(testObj{ns: "a", name: "y", v: 1}))

	list := i.List()
	list[0].v = 99
	_ = append(list[:1], testObj{name: "intruder"})
	keys := i.ListKeys()
	keys[0] = "intruder"
	byIdx, err := i.ByIndex("ns", "a")
	require.NoError(t, err)
	byIdx[0].v = 99
	idxKeys, err := i.IndexKeys("ns", "a")
	require.NoError(t, err)
	idxKeys[0] = "intruder"
	vals := i.ListIndexFuncValues("ns")
	vals[0] = "intruder"
	indexers := i.GetIndexers()
	indexers["intruder"] = byNamespace
	delete(indexers, "ns")

	for _, o := range i.List() {
		assert.Equal(t, 1, o.v)
	}
	assert.ElementsMatch(t, []string{"a/x", "a/y"}, i.ListKeys())
	assert.Equal(t, []string{"a"}, i.ListIndexFuncValues("ns"))
	assert.ElementsMatch(t, []string{"label", "ns"}, slices.Collect(maps.Keys(i.GetIndexers())))
	checkIndexes(t, i)
}

func TestIndexer_AllYieldsEveryObjectOnce(t *testing.T) {
	i := newTestIndexer()
	want := map[string]int{}
	for n := range 50 {
		o := testObj{ns: "a", name: fmt.Sprint(n), v: n}
		require.NoError(t, i.Add(o))
		want["a/"+o.name] = n
	}
	got := map[string]int{}
	for k, o := range i.All() {
		require.NotContains(t, got, k, "yielded twice")
		got[k] = o.v
	}
	assert.Equal(t, want, got)

	n := 0
	for range i.All() {
		n++
		if n == 3 {
			break
		}
	}
	assert.Equal(t, 3, n, "early break stops the iteration")
}

func TestIndexer_ByIndexAllYieldsMatchingObjects(t *testing.T) {
	i := newTestIndexer()
	require.NoError(t, i.Add(testObj{ns: "a", name: "x", v: 1}))
	require.NoError(t, i.Add(testObj{ns: "a", name: "y", v: 2}))
	require.NoError(t, i.Add(testObj{ns: "b", name: "z", v: 3}))
	got := map[string]int{}
	for k, o := range i.ByIndexAll("ns", "a") {
		got[k] = o.v
	}
	assert.Equal(t, map[string]int{"a/x": 1, "a/y": 2}, got)

	n := 0
	for range i.ByIndexAll("ns", "a") {
		n++
		break
	}
	assert.Equal(t, 1, n, "early break stops the iteration")
	for range i.ByIndexAll("ns", "none") {
		t.Fatal("no object has this value")
	}
}

func TestIndexer_IterationBodyMayWrite(t *testing.T) {
	// The loop bodies below would deadlock if the iterators held the lock
	// while yielding.
	i := newTestIndexer()
	for n := range 20 {
		require.NoError(t, i.Add(testObj{ns: "a", name: fmt.Sprint(n)}))
	}
	seen := 0
	for k := range i.ByIndexAll("ns", "a") {
		_, _, err := i.Set(k, testObj{ns: "b", name: k[2:]})
		require.NoError(t, err)
		seen++
	}
	assert.Equal(t, 20, seen, "every object moved out of the value was still yielded once")
	assert.Equal(t, []string{"b"}, i.ListIndexFuncValues("ns"))

	for k := range i.All() {
		i.DeleteKey(k)
	}
	assert.Zero(t, i.Len())
	checkIndexes(t, i)
}

func TestIndexer_AllDuringReplaceYieldsOnlyCurrentObjects(t *testing.T) {
	i := newTestIndexer()
	for n := range 10 {
		require.NoError(t, i.Add(testObj{ns: "a", name: fmt.Sprint(n), v: 1}))
	}
	var next []testObj
	for n := range 5 { // the odd names leave the store
		next = append(next, testObj{ns: "a", name: fmt.Sprint(2 * n), v: 2})
	}
	replaced := false
	for k, o := range i.All() {
		if replaced {
			assert.Equal(t, 2, o.v, "%s yielded from the replaced content", k)
			assert.Contains(t, []string{"0", "2", "4", "6", "8"}, o.name)
		} else {
			require.NoError(t, i.Replace(next, ""))
			replaced = true
		}
	}
}

func TestIndexer_ByIndexAllDuringReplaceYieldsOnlyMatchingObjects(t *testing.T) {
	i := newTestIndexer()
	var next []testObj
	for n := range 10 {
		require.NoError(t, i.Add(testObj{name: fmt.Sprint(n), labels: []string{"a"}}))
		label := "a"
		if n%2 == 1 { // the odd names lose the value, keeping their keys
			label = "b"
		}
		next = append(next, testObj{name: fmt.Sprint(n), labels: []string{label}})
	}
	replaced := false
	for _, o := range i.ByIndexAll("label", "a") {
		if replaced {
			assert.Equal(t, []string{"a"}, o.labels, "%s no longer has the value", o.name)
		} else {
			require.NoError(t, i.Replace(next, ""))
			replaced = true
		}
	}
}

func TestIndexer_ConcurrentReadersAndWriters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		i := newTestIndexer()
		const writers, readers, ops = 4, 4, 300
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				for n := range ops {
					name := fmt.Sprint(n % 50)
					o := testObj{ns: fmt.Sprint("ns", (n+w)%3), name: name, labels: []string{fmt.Sprint("l", n%4), "all"}, v: n}
					switch n % 10 {
					case 9:
						i.DeleteKey(o.ns + "/" + name)
					case 8:
						if w == 0 && n%100 == 8 {
							assert.NoError(t, i.Replace([]testObj{o}, ""))
						}
					case 7:
						if n == 7 {
							_ = i.AddIndexers(Indexers[testObj]{fmt.Sprint("extra", w): byNamespace})
						}
					default:
						assert.NoError(t, i.Add(o))
					}
				}
			})
		}
		for range readers {
			wg.Go(func() {
				for n := range ops {
					switch n % 6 {
					case 0:
						for range i.All() {
						}
					case 1:
						for _, o := range i.ByIndexAll("label", "all") {
							assert.Contains(t, o.labels, "all")
						}
					case 2:
						_, err := i.ByIndex("ns", "ns1")
						assert.NoError(t, err)
					case 3:
						_, err := i.Index("label", testObj{labels: []string{"l1", "l2"}})
						assert.NoError(t, err)
					case 4:
						_ = i.List()
						_ = i.ListKeys()
						_ = i.ListIndexFuncValues("ns")
					case 5:
						_, _ = i.GetByKey("ns1/1")
						_ = i.Len()
						_ = i.GetIndexers()
					}
				}
			})
		}
		wg.Wait()
		checkIndexes(t, i)
	})
}

func TestIndexer_ResyncDoesNothing(t *testing.T) {
	i := newTestIndexer()
	require.NoError(t, i.Add(testObj{name: "x"}))
	require.NoError(t, i.Resync())
	assert.Equal(t, 1, i.Len())
}

func TestNewIndexer_NilKeyFuncPanics(t *testing.T) {
	assert.Panics(t, func() { NewIndexer[string, testObj](nil, nil) })
}

func TestIndexer_UnchangedUpdateDoesNotAllocate(t *testing.T) {
	type obj struct {
		key string
		ns  []string // precomputed, so the index function does not allocate
		v   int
	}
	i := NewIndexer(func(o *obj) (string, error) { return o.key, nil },
		Indexers[*obj]{"ns": func(o *obj) ([]string, error) { return o.ns, nil }})
	a := &obj{key: "k", ns: []string{"a"}}
	b := &obj{key: "k", ns: []string{"a"}, v: 1}
	require.NoError(t, i.Add(a))
	allocs := testing.AllocsPerRun(100, func() {
		_, _, _ = i.Set("k", b)
		_, _, _ = i.Set("k", a)
	})
	assert.Zero(t, allocs)
}
