package mirror_test

import (
	"maps"
	"slices"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/listwatch/mirror"
)

// groupsOf reads through a Reader only, as code handed the cache would.
func groupsOf(r mirror.Reader[string, item]) map[string][]string {
	out := map[string][]string{}
	for _, g := range r.ListIndexFuncValues("group") {
		keys, err := r.IndexKeys("group", g)
		if err != nil {
			panic(err)
		}
		slices.Sort(keys)
		out[g] = keys
	}
	return out
}

func TestInformer_IsAReaderOfItsCache(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, nil)
		f.src.Put(item{Name: "a", Group: "x", Val: 1})
		f.src.Put(item{Name: "b", Group: "y", Val: 1})
		f.src.Put(item{Name: "c", Group: "x", Val: 1})
		f.startRecording()

		var r mirror.Reader[string, item] = f.inf
		assert.Equal(t, map[string][]string{"x": {"a", "c"}, "y": {"b"}}, groupsOf(r))
		byGroup := maps.Collect(r.ByIndexAll("group", "y"))
		assert.Equal(t, map[string]item{"b": {Name: "b", Group: "y", Val: 1}}, byGroup)
		assert.Nil(t, r.ListIndexFuncValues("nope"))
		_, err := r.ByIndex("nope", "x")
		require.ErrorIs(t, err, mirror.ErrUnknownIndex)
		f.stop()
	})
}

func TestInformer_AddIndexersWhileRunningIndexesCachedAndLaterObjects(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, nil)
		f.src.Put(item{Name: "a", Val: 1})
		f.src.Put(item{Name: "b", Val: 2})
		f.startRecording()

		parity := func(it item) ([]string, error) { return []string{[]string{"even", "odd"}[it.Val%2]}, nil }
		require.NoError(t, f.inf.AddIndexers(mirror.Indexers[item]{"parity": parity}))
		require.Error(t, f.inf.AddIndexers(mirror.Indexers[item]{"parity": parity}), "a name in use")
		f.src.Put(item{Name: "c", Val: 3})
		f.src.Put(item{Name: "b", Val: 4})
		synctest.Wait()

		odd, err := f.inf.IndexKeys("parity", "odd")
		require.NoError(t, err)
		assert.ElementsMatch(t, []string{"a", "c"}, odd)
		even, err := f.inf.IndexKeys("parity", "even")
		require.NoError(t, err)
		assert.Equal(t, []string{"b"}, even)
		f.stop()
	})
}
