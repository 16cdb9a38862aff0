package nats_test

import (
	"errors"
	"strconv"
	"testing"

	"github.com/listwatch/mirror"
	natsmirror "github.com/listwatch/mirror/adapters/nats"
	"github.com/listwatch/mirror/source"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var errNotANumber = errors.New("not a number")

// decodeInt decodes a decimal number, and panics on "panic".
func decodeInt(_ string, v []byte) (int, error) {
	if string(v) == "panic" {
		panic("decodeInt: asked to")
	}
	n, err := strconv.Atoi(string(v))
	if err != nil {
		return 0, errNotANumber
	}
	return n, nil
}

func TestTyped_UndecodableValuesAreReportedWithTheirKeyAndSkipped(t *testing.T) {
	ctx := testContext(t)
	srv := startServer(t)
	_, js := connect(t, srv.url())
	// History keeps the three puts of "good" below until the watch reads
	// them: with one, a put the watch has not read yet is dropped by the
	// next, and the watch rightly ends expired.
	kv := newBucket(t, js, jetstream.KeyValueConfig{History: 5})
	put(t, kv, "good", "1")
	put(t, kv, "bad", "x")
	put(t, kv, "boom", "panic")
	lw := natsmirror.NewTyped(js, "mirror", decodeInt, natsmirror.Options{})

	res, err := lw.List(ctx, source.ListOptions{})
	require.NoError(t, err)
	require.Len(t, res.Items, 1)
	assert.Equal(t, 1, res.Items[0].Value)
	require.Len(t, res.Skipped, 2)
	var oe *mirror.ObjectError
	require.ErrorAs(t, res.Skipped[0], &oe)
	assert.Equal(t, "bad", oe.Key)
	assert.Equal(t, "2", oe.ResourceVersion)
	require.ErrorIs(t, res.Skipped[0], errNotANumber)
	var pe *mirror.PanicError
	require.ErrorAs(t, res.Skipped[1], &pe)
	assert.Equal(t, "decodeInt: asked to", pe.Value)

	w, err := lw.Watch(ctx, source.WatchOptions{ResourceVersion: res.ResourceVersion})
	require.NoError(t, err)
	defer w.Stop()
	put(t, kv, "good", "y")
	put(t, kv, "good", "panic")
	put(t, kv, "good", "2")
	for _, want := range []error{errNotANumber, nil, nil} {
		ev, err := w.Next(ctx)
		require.NoError(t, err)
		if ev.Type == source.Updated {
			assert.Equal(t, 2, ev.Object.Value)
			break
		}
		assert.Equal(t, source.Error, ev.Type)
		assert.True(t, ev.KeyOnly)
		assert.Equal(t, natsmirror.Object[int]{Key: "good"}, ev.Object)
		require.ErrorAs(t, ev.Err, &oe)
		assert.Equal(t, ev.ResourceVersion, oe.ResourceVersion)
		if want != nil {
			require.ErrorIs(t, ev.Err, want)
		} else {
			require.ErrorAs(t, ev.Err, &pe)
		}
	}
}
