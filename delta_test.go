package mirror

import (
	"testing"

	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
)

func TestDeltas_OldestAndNewest(t *testing.T) {
	tests := []struct {
		name           string
		deltas         Deltas[int]
		oldest, newest int
		ok             bool
	}{
		{name: "empty"},
		{name: "one", deltas: Deltas[int]{{Type: Added, Object: 1}}, oldest: 1, newest: 1, ok: true},
		{name: "many", deltas: Deltas[int]{{Type: Added, Object: 1}, {Type: Updated, Object: 2}, {Type: Deleted, Object: 3}}, oldest: 1, newest: 3, ok: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, ok := tt.deltas.Oldest()
			assert.Equal(t, tt.ok, ok)
			assert.Equal(t, tt.oldest, o.Object)
			n, ok := tt.deltas.Newest()
			assert.Equal(t, tt.ok, ok)
			assert.Equal(t, tt.newest, n.Object)
		})
	}
}

func TestTypeNames(t *testing.T) {
	assert.Equal(t, []string{"added", "updated", "deleted", "replaced", "sync", "DeltaType(9)"},
		[]string{Added.String(), Updated.String(), Deleted.String(), Replaced.String(), Sync.String(), DeltaType(9).String()})
	assert.Equal(t, []string{"added", "updated", "deleted", "bookmark", "error", "EventType(0)"},
		[]string{source.Added.String(), source.Updated.String(), source.Deleted.String(), source.Bookmark.String(), source.Error.String(), source.EventType(0).String()})
}
