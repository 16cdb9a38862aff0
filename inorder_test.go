package mirror

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestInOrderQueue_RelistInPagesSkipsFailuresAndLeavesThePagesAlone(t *testing.T) {
	key := func(o obj) (string, error) {
		if o.rv < 0 {
			return "", errors.New("negative")
		}
		return o.name, nil
	}
	for _, tc := range []struct {
		name      string
		transform TransformFunc[obj]
		want      []obj
	}{
		{"as listed", nil, []obj{{"a", 1}, {"c", 3}, {"d", 4}}},
		{"transformed", func(o obj) (obj, error) {
			if o.name == "d" {
				return o, errors.New("no d")
			}
			o.rv *= 10
			return o, nil
		}, []obj{{"a", 10}, {"c", 30}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := newInOrderQueue(key, tc.transform)
			pages := [][]obj{{{"a", 1}, {"b", -1}}, {{"c", 3}}, {}, {{"d", 4}}}
			var errs []error
			for _, p := range pages {
				errs = append(errs, q.listChunk(p))
			}
			require.NoError(t, q.listDone("5"))
			var ke *KeyError
			require.ErrorAs(t, errors.Join(errs...), &ke, "the failure is reported")

			batch, err := q.popBatch(context.Background(), 10, nil)
			require.NoError(t, err)
			require.Len(t, batch, len(pages)+1, "a chunk entry per page, then the end")
			var l relist[string, obj]
			for _, e := range batch[:len(pages)] {
				require.Equal(t, entryListChunk, e.kind)
				assert.True(t, e.initialList)
				assert.False(t, e.completesSync, "a list completes the sync with its end")
				l.add(e.part)
			}
			end := batch[len(pages)]
			assert.Equal(t, entryListEnd, end.kind)
			assert.True(t, end.completesSync)
			var got []obj
			for k, o := range l.all() {
				assert.Equal(t, o.name, k)
				got = append(got, o)
			}
			assert.Equal(t, tc.want, got)
			assert.Equal(t, len(tc.want), l.n)
			assert.Equal(t, [][]obj{{{"a", 1}, {"b", -1}}, {{"c", 3}}, {}, {{"d", 4}}}, pages, "the source's pages are unchanged")
		})
	}
}
