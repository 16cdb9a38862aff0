package mirror

import (
	"strconv"
	"testing"

	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/require"
)

func TestRecordWrite_ForgetsWritesTheCacheHasApplied(t *testing.T) {
	inf := NewInformer[string, int](nil, InformerOptions[string, int]{
		KeyFunc:         func(v int) (string, error) { return strconv.Itoa(v), nil },
		CompareVersions: source.CompareDecimalVersions,
	})
	inf.versions.publish("1", false)
	pending := func() int {
		inf.writes.mu.Lock()
		defer inf.writes.mu.Unlock()
		return len(inf.writes.m)
	}
	for i := range 1000 {
		require.NoError(t, inf.RecordWrite("a"+strconv.Itoa(i), strconv.Itoa(2+i)))
	}
	require.Equal(t, 1000, pending(), "none applied yet")
	// The cache applies every one of them; nobody reads those keys again.
	inf.versions.publish("1001", false)
	for i := range 1000 {
		require.NoError(t, inf.RecordWrite("b"+strconv.Itoa(i), strconv.Itoa(2000+i)))
	}
	require.Equal(t, 1000, pending(), "only the writes the cache lacks are kept")
	require.NoError(t, inf.RecordWrite("c", "5"), "a write the cache already has")
	require.True(t, inf.WriteApplied("c"))
	require.Equal(t, 1000, pending())
}
