package memsource_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/listwatch/mirror/memsource"
	"github.com/listwatch/mirror/source"
)

func TestCurrentVersion_IsTheRevisionOfTheNewestChange(t *testing.T) {
	src := memsource.New(func(s string) (string, error) { return s, nil }, memsource.Options{})
	v, err := src.CurrentVersion(t.Context())
	require.NoError(t, err)
	assert.Equal(t, "1", v, "a new source")
	rev, err := src.Put("a")
	require.NoError(t, err)
	v, err = src.CurrentVersion(t.Context())
	require.NoError(t, err)
	assert.Equal(t, "2", v)
	assert.Equal(t, int64(2), rev)

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = src.CurrentVersion(ctx)
	require.ErrorIs(t, err, context.Canceled)
}

func TestCompareVersions_OrdersRevisionsAndRefusesOthers(t *testing.T) {
	src := memsource.New(func(s string) (string, error) { return s, nil }, memsource.Options{})
	c, err := src.CompareVersions("9", "10")
	require.NoError(t, err)
	assert.Equal(t, -1, c)
	_, err = src.CompareVersions("9", "ten")
	require.ErrorIs(t, err, source.ErrInvalidVersion)
}

func TestRequestProgress_SendsABookmarkAtTheCurrentRevision(t *testing.T) {
	src := memsource.New(func(s string) (string, error) { return s, nil }, memsource.Options{})
	w, err := src.Watch(t.Context(), source.WatchOptions{ResourceVersion: "1", AllowBookmarks: true})
	require.NoError(t, err)
	defer w.Stop()
	_, err = src.Put("a")
	require.NoError(t, err)
	require.NoError(t, src.RequestProgress(t.Context()))
	ev, err := w.Next(t.Context())
	require.NoError(t, err)
	assert.Equal(t, source.Added, ev.Type)
	ev, err = w.Next(t.Context())
	require.NoError(t, err)
	assert.Equal(t, source.Bookmark, ev.Type)
	assert.Equal(t, "2", ev.ResourceVersion)
}
