package mirror

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDeltaFIFO_EvictQueuesATombstoneWithTheLastStateKnown(t *testing.T) {
	tests := []struct {
		name  string
		known knownMap // nil: no KnownObjects
		ops   func(f *DeltaFIFO[string, obj])
		want  Deltas[obj]
	}{
		{name: "no KnownObjects, not queued: dropped"},
		{name: "unknown, not queued: dropped", known: knownMap{"z": {"z", 1}}},
		{name: "known, not queued: a tombstone of the known object", known: knownMap{"a": {"a", 1}},
			want: Deltas[obj]{tombstone(obj{"a", 1})}},
		{name: "queued: a tombstone of the newest queued object", known: knownMap{"a": {"a", 1}},
			ops:  func(f *DeltaFIFO[string, obj]) { _ = f.Update(obj{"a", 2}) },
			want: Deltas[obj]{updated(obj{"a", 2}), tombstone(obj{"a", 2})}},
		{name: "after an observed deletion: nothing more", known: knownMap{"a": {"a", 1}},
			ops:  func(f *DeltaFIFO[string, obj]) { _ = f.Delete(obj{"a", 2}) },
			want: Deltas[obj]{deleted(obj{"a", 2})}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newTestDeltaFIFO(tt.known, false)
			if tt.ops != nil {
				tt.ops(f)
			}
			require.NoError(t, f.Evict(obj{name: "a"}))
			got, ok := f.GetByKey("a")
			assert.Equal(t, tt.want != nil, ok)
			assert.Equal(t, tt.want, got)
		})
	}
	require.ErrorIs(t, newTestDeltaFIFO(nil, false).Evict(obj{name: "bad"}), errBadKey)
}

func TestDeltaFIFO_KeyOnlyDeletionAfterAQueuedDeletionAddsNothing(t *testing.T) {
	tests := []struct {
		name string
		ops  func(f *DeltaFIFO[string, obj])
		want Deltas[obj]
	}{
		{name: "after an eviction: still unknown",
			ops:  func(f *DeltaFIFO[string, obj]) { _ = f.Evict(obj{name: "a"}) },
			want: Deltas[obj]{tombstone(obj{"a", 1})}},
		{name: "after a relist's tombstone: still unknown",
			ops:  func(f *DeltaFIFO[string, obj]) { _ = f.Replace(nil, "") },
			want: Deltas[obj]{tombstone(obj{"a", 1})}},
		{name: "after an observed deletion: one deletion",
			ops:  func(f *DeltaFIFO[string, obj]) { _ = f.Delete(obj{"a", 2}) },
			want: Deltas[obj]{deleted(obj{"a", 2})}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newTestDeltaFIFO(knownMap{"a": {"a", 1}}, false)
			tt.ops(f)
			require.NoError(t, f.DeleteKeyOnly(obj{name: "a"}))
			got, _ := f.GetByKey("a")
			assert.Equal(t, tt.want, got)
		})
	}
}
