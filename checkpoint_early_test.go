package mirror_test

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/memsource"
)

// An informer resumed from a checkpoint (in-order queue) watches from its
// version, and lists if the source no longer has it, while the checkpoint
// is still loading: the source is read once the version is known, not
// after the last object. What it reads is applied once the load is done,
// against the checkpoint's objects: handlers see the checkpoint (replaying
// ones), then exactly the changes made while the informer was down, each
// deletion once, a re-created key as a deletion then an addition.
func TestInformer_ResumedInformerReadsTheSourceWhileItsCheckpointLoads(t *testing.T) {
	for _, compacted := range []bool{false, true} {
		t.Run("compacted="+strconv.FormatBool(compacted), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "cp")
				src := &countingSource{Source: memsource.New(itemKey, memsource.Options{})}
				for _, n := range []string{"a", "b", "c", "d"} {
					src.Put(item{Name: n, Val: 1})
				}
				startCheckpointed(t, src, path).stop(t)
				listed := src.lists.Load()

				// While down: b changes, c goes, d is re-created, e comes.
				src.Put(item{Name: "b", Val: 2})
				src.Delete("c")
				src.Delete("d")
				rev, _ := src.Put(item{Name: "d", Val: 1, Gen: 1})
				src.Put(item{Name: "e", Val: 1})
				if compacted {
					src.Compact(rev)
					// The watch, refused, is held until the load is
					// past its first look at whether a list has
					// begun (for a list that has, see
					// TestInformer_CompactedResumeListsAndTellsChangesOnlyTheDifferences):
					// the checkpoint is then the state the list is
					// applied against.
					src.hold = make(chan struct{})
				}

				codec := newGatedCodec(2)
				replay, changes, errs := &recorder{}, &recorder{}, &errorLog{}
				inf := mirror.NewInformer(src, mirror.InformerOptions[string, item]{
					KeyFunc: itemKey, ErrorHandler: errs.add, SameObject: sameGen,
					ResourceVersion: func(it item) string { return strconv.Itoa(it.Val) },
					Checkpoint:      mirror.CheckpointOptions[item]{Path: path, Codec: codec},
				})
				_, err := inf.AddEventHandler(replay, mirror.HandlerOptions{})
				require.NoError(t, err)
				_, err = inf.AddEventHandler(changes, mirror.HandlerOptions{ChangesOnly: true})
				require.NoError(t, err)
				ctx, cancel := context.WithCancel(t.Context())
				done := make(chan error, 1)
				go func() { done <- inf.Run(ctx) }()
				<-codec.reached
				if compacted {
					close(src.hold)
				}
				synctest.Wait()

				// The load is held after its first object.
				wantLists := listed
				if compacted {
					wantLists++
				}
				assert.Equal(t, wantLists, src.lists.Load(), "the source is read while the checkpoint loads")
				assert.False(t, inf.HasSynced())
				assert.Empty(t, replay.take())
				assert.Empty(t, changes.take())

				close(codec.release)
				synctest.Wait()
				require.True(t, inf.HasSynced())
				wantChanges := []string{"add e=1", "delete c=1 unknown=false", "delete d=1 unknown=false", "add d=1", "update b 1->2"}
				if compacted {
					// A list, which completes the sync as the watch
					// from the checkpoint's version was refused:
					// deletions of unknown final state, additions of
					// the initial list.
					wantChanges = []string{"add e=1 initial=true", "delete c=1 unknown=true", "delete d=1 unknown=true", "add d=1 initial=true", "update b 1->2"}
				}
				assert.ElementsMatch(t, wantChanges, plain(rendered(changes.take())), "the changes made while down, once each")
				got := plain(rendered(replay.take()))
				require.GreaterOrEqual(t, len(got), 4)
				assert.ElementsMatch(t, []string{"add a=1 initial=true", "add b=1 initial=true", "add c=1 initial=true", "add d=1 initial=true"},
					got[:4], "the checkpoint first")
				assert.ElementsMatch(t, wantChanges, got[4:], "then the changes")
				assert.Equal(t, 4, inf.Len())
				if !compacted {
					assert.Empty(t, errs.all())
				}
				cancel()
				require.NoError(t, <-done)
			})
		})
	}
}

// plain drops what the rendering of an add says when it is not of the
// initial list.
func plain(evs []string) []string {
	for i, e := range evs {
		evs[i] = strings.TrimSuffix(e, " initial=false")
	}
	return evs
}
