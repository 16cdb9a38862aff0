package mirror

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A relist into an empty cache is applied chunk by chunk (see
// listing.direct), so between its chunks the cache holds part of a list at
// a newer version while it says it is at the older one. A checkpoint taken
// then would claim the older version with objects of the newer: resumed
// from it, a watch from the older version brings history the cache is
// already past, and a handler sees objects roll back.
func TestInformer_CheckpointIsNotWrittenWhileARelistIsHalfApplied(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "cp")
		lw := newFakeLW()
		lw.page("1", "", tobj{"a", "1"})
		// a is deleted (the cache is empty at "2"), then the watch
		// expires and the relist's first page arrives; its second waits.
		lw.watch(deletedEvent("a", "1", "2"), end(errSrcExpired))
		lw.page("5", "more", tobj{"b", "5"})
		inf := NewInformer[string, tobj](lw, InformerOptions[string, tobj]{
			Name:         "midlist",
			KeyFunc:      tobjKey,
			ErrorHandler: func(error) {},
			Checkpoint:   CheckpointOptions[tobj]{Path: path, Interval: time.Minute},
		})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- inf.Run(ctx) }()
		synctest.Wait()
		_, ok := inf.GetByKey("b")
		require.True(t, ok, "the relist's first page is applied")

		time.Sleep(time.Minute) // a checkpoint is due
		synctest.Wait()
		if _, err := os.Stat(path); err == nil {
			var objs []string
			h, err := readCheckpoint(path, fmt.Sprintf("%s\x00%T", "midlist", tobj{}), Codec[tobj](JSONCodec[tobj]{}),
				func(checkpointHeader, int) {}, func(o tobj) error { objs = append(objs, o.String()); return nil })
			require.NoError(t, err)
			assert.Failf(t, "checkpoint written mid-list", "at version %s with %v", h.version, objs)
		}

		lw.page("5", "", tobj{"c", "5"})
		lw.watch()
		synctest.Wait()
		time.Sleep(time.Minute)
		synctest.Wait()
		var objs []string
		h, err := readCheckpoint(path, fmt.Sprintf("%s\x00%T", "midlist", tobj{}), Codec[tobj](JSONCodec[tobj]{}),
			func(checkpointHeader, int) {}, func(o tobj) error { objs = append(objs, o.String()); return nil })
		require.NoError(t, err, "written once the list is whole")
		assert.Equal(t, "5", h.version)
		assert.ElementsMatch(t, []string{"b=5", "c=5"}, objs)
		cancel()
		require.NoError(t, <-done)
	})
}
