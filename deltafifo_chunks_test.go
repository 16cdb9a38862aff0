package mirror

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// popOne pops one key and applies it to known, as an informer does.
func popOne(t *testing.T, f *DeltaFIFO[string, obj], known knownMap) popped {
	t.Helper()
	var p popped
	require.NoError(t, f.Pop(context.Background(), func(key string, ds Deltas[obj], initial bool) error {
		p = popped{key, ds, initial}
		known.apply(key, ds)
		return nil
	}))
	return p
}

func TestDeltaFIFO_FirstListInChunksIsPoppedAsItComesAndSyncsAtItsEnd(t *testing.T) {
	known := knownMap{}
	f := newTestDeltaFIFO(known, true)

	require.NoError(t, f.listChunk([]obj{{"a", 1}, {"b", 1}}))
	assert.Equal(t, popped{"a", Deltas[obj]{replaced(obj{"a", 1})}, true}, popOne(t, f, known),
		"a chunk of a list into an empty queue and cache can be popped at once")
	require.NoError(t, f.listChunk([]obj{{"c", 1}}))
	assert.Equal(t, popped{"b", Deltas[obj]{replaced(obj{"b", 1})}, true}, popOne(t, f, known))
	assert.Equal(t, popped{"c", Deltas[obj]{replaced(obj{"c", 1})}, true}, popOne(t, f, known))
	assert.False(t, f.HasSynced(), "every listed key is popped, but the list is not done")

	require.NoError(t, f.listChunk([]obj{{"d", 1}}))
	require.NoError(t, f.listDone(""))
	assert.False(t, f.HasSynced())
	assert.Equal(t, popped{"d", Deltas[obj]{replaced(obj{"d", 1})}, true}, popOne(t, f, known))
	assert.True(t, f.HasSynced())
	assert.Equal(t, knownMap{"a": {"a", 1}, "b": {"b", 1}, "c": {"c", 1}, "d": {"d", 1}}, known)

	// An empty first list syncs at its end.
	empty := newTestDeltaFIFO(knownMap{}, true)
	require.NoError(t, empty.listDone(""))
	assert.True(t, empty.HasSynced())
}

func TestDeltaFIFO_ListInChunksIntoKnownObjectsIsQueuedAtItsEndAsReplaceQueuesIt(t *testing.T) {
	for _, tc := range []struct {
		name   string
		known  knownMap
		queued []obj // added before the list
	}{
		{"known objects", knownMap{"x": {"x", 1}, "y": {"y", 1}}, nil},
		{"queued keys", knownMap{}, []obj{{"y", 2}, {"w", 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			list := [][]obj{{{"x", 2}, {"z", 1}}, {{"bad", 1}}, {{"w", 3}}}
			chunked := newTestDeltaFIFO(tc.known, true)
			whole := newTestDeltaFIFO(tc.known, true)
			var all []obj
			for _, q := range tc.queued {
				require.NoError(t, chunked.Add(q))
				require.NoError(t, whole.Add(q))
			}
			before := snapshot(chunked)
			for _, c := range list {
				err := chunked.listChunk(c)
				require.NoError(t, err, "a key error is reported once the list is applied, by Replace")
				all = append(all, c...)
			}
			assert.Equal(t, before, snapshot(chunked), "nothing is queued before the list is whole")

			require.ErrorIs(t, chunked.listDone(""), errBadKey)
			require.ErrorIs(t, whole.Replace(all, "5"), errBadKey)
			assert.Equal(t, snapshot(whole), snapshot(chunked))
			assert.NotEmpty(t, snapshot(chunked))
		})
	}
}

func TestDeltaFIFO_FirstListFailingMidwayLeavesWhatItQueuedForTheNextList(t *testing.T) {
	known := knownMap{}
	f := newTestDeltaFIFO(known, true)
	require.NoError(t, f.listChunk([]obj{{"a", 1}, {"b", 1}}))
	popOne(t, f, known) // a reaches the cache
	f.listFailed()
	assert.False(t, f.HasSynced())
	assert.Equal(t, []string{"b"}, f.ListKeys(), "what the failed list queued stays")

	// The next list, into a cache that is not empty, is applied whole:
	// a, which it lacks, gets a tombstone; b, still queued, gets its
	// newer state; the initial list is what that list leaves queued.
	require.NoError(t, f.listChunk([]obj{{"b", 2}, {"c", 2}}))
	require.NoError(t, f.listDone(""))
	assert.Equal(t, []popped{
		{"b", Deltas[obj]{replaced(obj{"b", 1}), replaced(obj{"b", 2})}, true},
		{"c", Deltas[obj]{replaced(obj{"c", 2})}, true},
		{"a", Deltas[obj]{tombstone(obj{"a", 1})}, true},
	}, popAll(t, f))
	assert.True(t, f.HasSynced())
}
