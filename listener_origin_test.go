package mirror

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestListener_BoundedModeKeepsTheMostUrgentOrigin pins the origin of a
// notification that stands for several in bounded mode: the most urgent
// of theirs, so that a live change folded together with a resync or a
// relist is still ranked live.
func TestListener_BoundedModeKeepsTheMostUrgentOrigin(t *testing.T) {
	const (
		live    = OriginLive
		initial = OriginInitialList
		relist  = OriginRelist
		resync  = OriginResync
	)
	type in struct {
		spec   string
		origin Origin
	}
	tests := []struct {
		name string
		in   []in
		want []string // rendered, with the origin
	}{
		{"a live update then a resync is live", []in{{"update:1>2", live}, {"update:2>2", resync}}, []string{"update:1>2 live"}},
		{"a resync then a live update is live", []in{{"update:1>1", resync}, {"update:1>2", live}}, []string{"update:1>2 live"}},
		{"a resync then a relist is relist", []in{{"update:1>1", resync}, {"update:1>2", relist}}, []string{"update:1>2 relist"}},
		{"an initial add then a relist is relist", []in{{"add*:1", initial}, {"update:1>2", relist}}, []string{"add*:2 relist"}},
		{"an initial add then a resync is initial", []in{{"add*:1", initial}, {"update:1>1", resync}}, []string{"add*:1 initial-list"}},
		{"a live update then a tombstone is a live delete", []in{{"update:1>2", live}, {"delete?:2", relist}}, []string{"delete?:2 live"}},
		{"two deletes keep the more urgent origin", []in{{"delete:1", relist}, {"delete?:1", live}}, []string{"delete:1 live"}},
		{"a tombstone then a live delete is live", []in{{"delete?:1", relist}, {"delete:1", live}}, []string{"delete:1 live"}},
		{
			"a delete and a re-creation keep their own",
			[]in{{"delete?:1", relist}, {"add:5", live}, {"update:5>6", resync}},
			[]string{"delete?:1 relist", "add:6 live"},
		},
		{
			"a re-creation deleted again leaves its urgency to the delete",
			[]in{{"delete?:1", relist}, {"add:5", live}, {"delete:5", relist}},
			[]string{"delete?:1 live"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tl := newTestListener(1)
			tl.l.pending = map[string]*slot[string, string]{} // bounded mode
			for _, x := range tt.in {
				nt := n(x.spec)
				nt.origin = x.origin
				tl.send(nt)
			}
			var got []string
			for _, x := range tl.drain() {
				got = append(got, render(x)+" "+x.origin.String())
			}
			assert.Equal(t, tt.want, got)
		})
	}
}
