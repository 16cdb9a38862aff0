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
			err := q.replacePages(pages, 4)
			var ke *KeyError
			require.ErrorAs(t, err, &ke, "the failure is reported")

			batch, err := q.popBatch(context.Background(), 1, nil)
			require.NoError(t, err)
			require.Len(t, batch, 1)
			l := batch[0].list
			var got []obj
			for k, o := range l.all() {
				assert.Equal(t, o.name, k)
				got = append(got, o)
			}
			assert.Equal(t, tc.want, got)
			assert.Equal(t, len(tc.want), l.len())
			assert.Equal(t, [][]obj{{{"a", 1}, {"b", -1}}, {{"c", 3}}, {}, {{"d", 4}}}, pages, "the source's pages are unchanged")
		})
	}
}
