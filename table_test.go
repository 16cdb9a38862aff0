package mirror

import (
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"reflect"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testHashes are key hashes for the Indexer's table: maphash, and
// hashes that make keys collide, fully or in the slot they start from.
var testHashes = []struct {
	name string
	fn   func(string) uint64
}{
	{"maphash", nil},
	{"every key one hash", func(string) uint64 { return 7 }},
	{"two hashes", func(k string) uint64 { return uint64(len(k) % 2) }},
	// Low bits zero: every key starts from slot 0, but tags differ.
	{"one first slot", func(k string) uint64 { return uint64(crc32.ChecksumIEEE([]byte(k))) << 24 }},
}

// objKind is a way tests store testObjs in an Indexer: by pointer, which
// a table holds in its slots, or by value, which it boxes.
type objKind[T any] struct {
	wrap   func(testObj) T
	unwrap func(T) testObj
}

var (
	inline = objKind[*testObj]{
		wrap:   func(o testObj) *testObj { return &o },
		unwrap: func(o *testObj) testObj { return *o },
	}
	boxed = objKind[testObj]{
		wrap:   func(o testObj) testObj { return o },
		unwrap: func(o testObj) testObj { return o },
	}
)

func TestObjKinds(t *testing.T) {
	assert.LessOrEqual(t, unsafe.Sizeof(*new(*testObj)), uintptr(maxInline), "held in slots")
	assert.Greater(t, unsafe.Sizeof(testObj{}), uintptr(maxInline), "boxed")
}

// newIndexer returns an Indexer keyed by testKey, with a namespace index.
func (k objKind[T]) newIndexer(hash func(string) uint64) *Indexer[string, T] {
	return newIndexer(func(o T) (string, error) { return testKey(k.unwrap(o)) },
		Indexers[T]{"ns": func(o T) ([]string, error) { return byNamespace(k.unwrap(o)) }}, hash)
}

// checkTable checks the invariants of an Indexer's table: the counts
// match the slots, at least one slot is empty, every object is reachable
// from its key's first slot under its key's tag, empty slots hold
// nothing, objects are boxed if and only if they are large, and foreign
// holds only objects that are not their key's.
func checkTable[K comparable, T any](t testing.TB, i *Indexer[K, T]) {
	t.Helper()
	i.mu.RLock()
	defer i.mu.RUnlock()
	tb := &i.contents.items
	if unsafe.Sizeof(*new(T)) > maxInline {
		require.Len(t, tb.boxes, len(tb.tags))
		require.Nil(t, tb.vals)
	} else {
		require.Len(t, tb.vals, len(tb.tags))
		require.Nil(t, tb.boxes)
	}
	var live, dead int
	mask := len(tb.tags) - 1
	for s, tag := range tb.tags {
		if tag < tagFull {
			if tb.boxes != nil {
				require.Nil(t, tb.boxes[s], "slot %d: empty, with a box", s)
			} else {
				require.True(t, reflect.ValueOf(tb.vals[s]).IsZero(), "slot %d: empty, with an object", s)
			}
		}
		switch {
		case tag == tagEmpty:
			continue
		case tag == tagDeleted:
			dead++
			continue
		}
		live++
		key, err := tb.keyFunc(tb.obj(s))
		require.NoError(t, err, "slot %d", s)
		require.Equal(t, tb.hash.tag(key), tag, "slot %d: tag of %v", s, key)
		for p := int(tag) & mask; p != s; p = (p + 1) & mask {
			require.NotEqual(t, uint32(tagEmpty), tb.tags[p], "slot %d: %v is past an empty slot", s, key)
		}
		_, inForeign := tb.foreign[key]
		require.False(t, inForeign, "%v is in the slots and in foreign", key)
	}
	assert.Equal(t, tb.live, live, "live")
	assert.Equal(t, tb.dead, dead, "dead")
	if len(tb.tags) > 0 {
		assert.Less(t, live+dead, len(tb.tags), "no empty slot")
	}
	for key, obj := range tb.foreign {
		assert.False(t, tb.owns(key, obj), "%v is its object's key, in foreign", key)
	}
	if len(tb.foreign) == 0 {
		assert.LessOrEqual(t, tb.foreignPeak, minSlots, "an emptied foreign map that held many objects is kept")
	}
}

// checkContents checks that i holds exactly want, by every way of reading.
func checkContents[T any](t testing.TB, i *Indexer[string, T], want map[string]T) {
	t.Helper()
	checkTable(t, i)
	checkIndexes(t, i)
	require.Equal(t, len(want), i.Len())
	for k, o := range want {
		got, ok := i.GetByKey(k)
		require.True(t, ok, "GetByKey(%q)", k)
		require.Equal(t, o, got, "GetByKey(%q)", k)
	}
	for _, k := range []string{"", "a/", "a/none", "b/1"} {
		if _, ok := want[k]; !ok {
			_, ok := i.GetByKey(k)
			require.False(t, ok, "GetByKey(%q) of an absent key", k)
		}
	}
	got := map[string]T{}
	for k, o := range i.All() {
		require.NotContains(t, got, k, "All yielded %q twice", k)
		got[k] = o
	}
	require.Equal(t, want, got, "All")
	var keys []string
	var objs []T
	for k, o := range want {
		keys = append(keys, k)
		objs = append(objs, o)
	}
	require.ElementsMatch(t, keys, i.ListKeys())
	require.ElementsMatch(t, objs, i.List())
}

func TestIndexer_CollidingKeysBehaveAsAMap(t *testing.T) {
	for _, h := range testHashes {
		t.Run(h.name, func(t *testing.T) { behavesAsAMap(t, inline, h.fn) })
		t.Run(h.name+"/boxed", func(t *testing.T) { behavesAsAMap(t, boxed, h.fn) })
	}
}

// behavesAsAMap applies random writes to an Indexer and to a map, and
// checks that the Indexer holds what the map does.
func behavesAsAMap[T any](t *testing.T, kind objKind[T], hash func(string) uint64) {
	i := kind.newIndexer(hash)
	want := map[string]T{}
	rng := rand.New(rand.NewPCG(1, 2))
	const steps, names = 3000, 200
	for step := range steps {
		name := fmt.Sprint(rng.IntN(names))
		key := "a/" + name
		// Adds outnumber deletes, then deletes outnumber adds, so
		// that the table grows and shrinks.
		deletes := 2
		if step > steps/2 {
			deletes = 7
		}
		switch op := rng.IntN(10); {
		case op < deletes:
			old, existed := i.DeleteKey(key)
			o, ok := want[key]
			require.Equal(t, ok, existed, "DeleteKey(%q)", key)
			require.Equal(t, o, old, "DeleteKey(%q)", key)
			delete(want, key)
		case op == 8:
			// Another key's object, or one without a key.
			o := testObj{ns: "b", name: name, v: step}
			if rng.IntN(2) == 0 {
				o.name = ""
			}
			_, _, err := i.Set(key, kind.wrap(o))
			require.NoError(t, err)
			want[key] = kind.wrap(o)
		case op == 9 && rng.IntN(50) == 0:
			var list []T
			clear(want)
			for range rng.IntN(names) {
				o := testObj{ns: "a", name: fmt.Sprint(rng.IntN(names)), v: step}
				list = append(list, kind.wrap(o))
				want["a/"+o.name] = kind.wrap(o)
			}
			require.NoError(t, i.Replace(list, ""))
		default:
			o := kind.wrap(testObj{ns: "a", name: name, v: step})
			old, existed, err := i.Set(key, o)
			require.NoError(t, err)
			w, ok := want[key]
			require.Equal(t, ok, existed, "Set(%q)", key)
			require.Equal(t, w, old, "Set(%q)", key)
			want[key] = o
		}
		if step%250 == 0 {
			checkContents(t, i, want)
		}
	}
	checkContents(t, i, want)
}

func TestIndexer_ObjectUnderAnotherKey(t *testing.T) {
	i := newIndexer(testKey, nil, nil)
	own := testObj{ns: "a", name: "x", v: 1}
	other := testObj{ns: "b", name: "x", v: 2}
	keyless := testObj{ns: "a", v: 3}
	steps := []struct {
		name  string
		write func()
		want  map[string]testObj
	}{
		{"own key", func() { require.NoError(t, i.Add(own)) }, map[string]testObj{"a/x": own}},
		{"another key's object replaces it", func() { _, _, _ = i.Set("a/x", other) }, map[string]testObj{"a/x": other}},
		{"its own key is still free", func() { require.NoError(t, i.Add(other)) }, map[string]testObj{"a/x": other, "b/x": other}},
		{"an object without a key", func() { _, _, _ = i.Set("c/x", keyless) }, map[string]testObj{"a/x": other, "b/x": other, "c/x": keyless}},
		{"its own object again", func() { require.NoError(t, i.Update(own)) }, map[string]testObj{"a/x": own, "b/x": other, "c/x": keyless}},
		{"deleted", func() { i.DeleteKey("c/x") }, map[string]testObj{"a/x": own, "b/x": other}},
	}
	for _, s := range steps {
		s.write()
		checkContents(t, i, s.want)
	}

	// A burst of objects under other keys leaves nothing behind.
	want := map[string]testObj{"a/x": own, "b/x": other}
	for n := range 100 {
		k := fmt.Sprint("z/", n)
		_, _, err := i.Set(k, other)
		require.NoError(t, err)
		want[k] = other
	}
	checkContents(t, i, want)
	for n := range 100 {
		i.DeleteKey(fmt.Sprint("z/", n))
	}
	checkContents(t, i, map[string]testObj{"a/x": own, "b/x": other})
	i.mu.RLock()
	defer i.mu.RUnlock()
	assert.Nil(t, i.contents.items.foreign, "the map of objects under other keys is dropped once empty")
}

func TestIndexer_ShrinksAfterDeletes(t *testing.T) {
	i := newIndexer(func(o *testObj) (int, error) { return o.v, nil }, nil, nil)
	slots := func() int {
		i.mu.RLock()
		defer i.mu.RUnlock()
		return len(i.contents.items.tags)
	}
	for n := range 10_000 {
		require.NoError(t, i.Add(&testObj{v: n}))
	}
	assert.GreaterOrEqual(t, slots(), 10_000)
	for n := range 9_990 {
		i.DeleteKey(n)
	}
	assert.LessOrEqual(t, slots(), 64, "ten objects left")
	for n := 9_990; n < 10_000; n++ {
		i.DeleteKey(n)
	}
	assert.Equal(t, minSlots, slots(), "empty")
	require.NoError(t, i.Add(&testObj{v: 1}))
	_, ok := i.GetByKey(1)
	assert.True(t, ok)
}

func TestIndexer_DeletedSlotsAreReused(t *testing.T) {
	// Churn through ever new keys with a steady number of objects: the
	// table stays the size the objects need.
	i := newIndexer(func(o *testObj) (int, error) { return o.v, nil }, nil, nil)
	for n := range 100_000 {
		require.NoError(t, i.Add(&testObj{v: n}))
		if n >= 100 {
			i.DeleteKey(n - 100)
		}
	}
	checkTable(t, i)
	assert.Equal(t, 100, i.Len())
	assert.LessOrEqual(t, len(i.contents.items.tags), 256)
}

func TestIndexer_ReserveMakesRoomOnce(t *testing.T) {
	for _, h := range testHashes {
		t.Run(h.name, func(t *testing.T) {
			i := boxed.newIndexer(h.fn)
			for n := range 10 {
				require.NoError(t, i.Add(testObj{ns: "ns", name: fmt.Sprint(n)}))
			}
			i.DeleteKey("ns/3") // a deleted slot, which reserve clears
			i.reserve(1000)
			moves := i.contents.items.moves
			for n := range 1000 {
				require.NoError(t, i.Add(testObj{ns: "ns", name: fmt.Sprint(n)}))
			}
			assert.Equal(t, moves, i.contents.items.moves, "no growth while filling what was reserved")
			assert.Equal(t, 1000, i.Len())
			checkTable(t, i)

			i.reserve(10) // never shrinks
			assert.Equal(t, moves, i.contents.items.moves)
		})
	}
}

func TestIndexer_AllDuringResizeYieldsEveryKeptKeyOnce(t *testing.T) {
	for _, h := range testHashes {
		t.Run(h.name, func(t *testing.T) { allDuringResize(t, inline, h.fn) })
		t.Run(h.name+"/boxed", func(t *testing.T) { allDuringResize(t, boxed, h.fn) })
	}
}

// allDuringResize checks that All yields every key that stays, once, with
// its current object, when the loop body grows or shrinks the table.
func allDuringResize[T any](t *testing.T, kind objKind[T], hash func(string) uint64) {
	const keys = 100
	add := func(t *testing.T, i *Indexer[string, T], n, v int) {
		require.NoError(t, i.Add(kind.wrap(testObj{ns: "a", name: fmt.Sprint(n), v: v})))
	}
	tests := []struct {
		name   string
		during func(t *testing.T, i *Indexer[string, T])
		kept   func(n int) bool
	}{
		{"growth", func(t *testing.T, i *Indexer[string, T]) {
			for n := keys; n < 20*keys; n++ {
				add(t, i, n, 1)
			}
		}, func(int) bool { return true }},
		{"growth, then updates", func(t *testing.T, i *Indexer[string, T]) {
			for n := keys; n < 20*keys; n++ {
				add(t, i, n, 1)
			}
			for n := range keys {
				add(t, i, n, 2)
			}
		}, func(int) bool { return true }},
		{"shrink", func(t *testing.T, i *Indexer[string, T]) {
			for n := 10; n < keys; n++ {
				i.DeleteKey(fmt.Sprint("a/", n))
			}
		}, func(n int) bool { return n < 10 }},
		{"updates", func(t *testing.T, i *Indexer[string, T]) {
			for n := range keys {
				add(t, i, n, 2)
			}
		}, func(int) bool { return true }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			i := kind.newIndexer(hash)
			for n := range keys {
				add(t, i, n, 0)
			}
			seen := map[string]int{}
			first := true
			for k, o := range i.All() {
				seen[k]++
				if first {
					tt.during(t, i)
					first = false
					continue
				}
				cur, ok := i.GetByKey(k)
				if ok {
					assert.Equal(t, cur, o, "%s yielded with an object no longer stored", k)
				}
			}
			for n := range keys {
				k := fmt.Sprint("a/", n)
				if tt.kept(n) {
					assert.Equal(t, 1, seen[k], "%s yielded", k)
				} else {
					assert.LessOrEqual(t, seen[k], 1, "%s yielded", k)
				}
			}
			for k, c := range seen {
				assert.Equal(t, 1, c, "%s yielded", k)
			}
		})
	}
}

func TestIndexer_KeyFuncPanicLeavesIndexerAsItWas(t *testing.T) {
	panicky := false
	i := newIndexer(func(o *testObj) (string, error) {
		if panicky && o.v == 1 {
			panic("key function")
		}
		return o.name, nil
	}, Indexers[*testObj]{"ns": func(o *testObj) ([]string, error) { return []string{o.ns}, nil }},
		func(string) uint64 { return 0 }) // every lookup meets x's tag
	x := &testObj{ns: "a", name: "x", v: 1}
	require.NoError(t, i.Add(x))
	panicky = true
	assert.Panics(t, func() { i.GetByKey("x") })
	assert.Panics(t, func() { _, _, _ = i.Set("x", &testObj{ns: "b", name: "x", v: 2}) })
	assert.Panics(t, func() { i.DeleteKey("x") })
	assert.Panics(t, func() {
		for range i.ByIndexAll("ns", "a") {
		}
	})
	panicky = false
	got, ok := i.GetByKey("x")
	assert.True(t, ok)
	assert.Same(t, x, got)
	assert.Equal(t, []string{"x"}, i.ListKeys())
	objs, err := i.ByIndex("ns", "a")
	require.NoError(t, err)
	assert.Equal(t, []*testObj{x}, objs)
	checkTable(t, i)
}

func TestHalfFull(t *testing.T) {
	for _, n := range []int{0, 1, 10, 11, 12, 100, 1000, 786_432, 1_000_000} {
		slots := halfFull(n)
		assert.LessOrEqual(t, 2*n, slots, "halfFull(%d)", n)
		assert.LessOrEqual(t, slots, max(minSlots, 4*n+3), "halfFull(%d) is more than twice what it needs", n)
		assert.Zero(t, slots&(slots-1), "halfFull(%d) is a power of two", n)
	}
	assert.Equal(t, minSlots, halfFull(0))
	assert.Equal(t, 1<<21, slotsFor(1_000_000), "a Replace of 1M objects")
}

func TestTable_UnlistedFindsEveryKeyNotAmongTheListed(t *testing.T) {
	for _, h := range testHashes {
		t.Run(h.name, func(t *testing.T) {
			i := boxed.newIndexer(h.fn)
			want := map[string]bool{}
			var listed []string
			for n := range 200 {
				o := testObj{ns: "ns", name: fmt.Sprint(n)}
				key, _ := testKey(o)
				if n%50 == 7 {
					key = "other/" + key // stored under another key: foreign
				}
				_, _, err := i.Set(key, o)
				require.NoError(t, err)
				switch {
				case n%10 == 3:
					i.DeleteKey(key) // leaves a deleted slot
				case n%3 == 0:
					want[key] = true
				default:
					listed = append(listed, key)
				}
			}
			listed = append(listed, "ns/absent", "other/absent")
			got := map[string]bool{}
			for _, k := range i.unlisted(func(yield func(string) bool) {
				for _, k := range listed {
					if !yield(k) {
						return
					}
				}
			}) {
				require.False(t, got[k], "%s twice", k)
				got[k] = true
			}
			assert.Equal(t, want, got)
			require.NotEmpty(t, i.contents.items.foreign)
		})
	}
}
