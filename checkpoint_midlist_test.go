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

// readTestCheckpoint reads the checkpoint at path of the informer named
// name: its version and objects.
func readTestCheckpoint(t *testing.T, path, name string) (string, []string) {
	var objs []string
	h, err := readCheckpoint(path, fmt.Sprintf("%s\x00%T", name, tobj{}), Codec[tobj](JSONCodec[tobj]{}),
		func(checkpointHeader, int) {}, func(o tobj) error { objs = append(objs, o.String()); return nil })
	require.NoError(t, err)
	return h.version, objs
}

// A relist into an empty cache is applied chunk by chunk (see
// listing.direct), so between its chunks, and after it is abandoned until
// the next list ends, the cache holds part of a list at a newer version
// while it says it is at the older one. A checkpoint taken then would
// claim the older version with objects of the newer: resumed from it, a
// watch from the older version brings history the cache is already past,
// and a handler sees objects roll back.
func TestInformer_CheckpointIsNotWrittenWhileARelistIsHalfApplied(t *testing.T) {
	for _, tc := range []struct {
		name string
		// rest makes the relist's second page wait (nil) or fail.
		rest error
	}{
		{name: "second page pending"},
		{name: "list abandoned after its first page", rest: errSrcUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "cp")
				lw := newFakeLW()
				lw.page("1", "", tobj{"a", "1"})
				// a is deleted (the cache is empty at "2"), then the
				// watch expires and the relist's first page arrives.
				lw.watch(deletedEvent("a", "1", "2"), end(errSrcExpired))
				lw.page("5", "more", tobj{"b", "5"})
				if tc.rest != nil {
					lw.listErr(tc.rest)
				}
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
					rv, objs := readTestCheckpoint(t, path, "midlist")
					assert.Failf(t, "checkpoint written mid-list", "at version %s with %v", rv, objs)
				}

				if tc.rest != nil {
					lw.page("6", "", tobj{"b", "6"}, tobj{"c", "6"})
				} else {
					lw.page("5", "", tobj{"c", "5"})
				}
				lw.watch()
				time.Sleep(time.Minute)
				synctest.Wait()
				rv, objs := readTestCheckpoint(t, path, "midlist")
				want := map[bool][]string{false: {"b=5", "c=5"}, true: {"b=6", "c=6"}}[tc.rest != nil]
				assert.Equal(t, map[bool]string{false: "5", true: "6"}[tc.rest != nil], rv, "written once a list is whole")
				assert.ElementsMatch(t, want, objs)
				cancel()
				require.NoError(t, <-done)
			})
		})
	}
}
