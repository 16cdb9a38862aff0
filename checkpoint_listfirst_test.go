package mirror_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/memsource"
	"github.com/listwatch/mirror/source"
)

// heldWatch holds every Watch until open is closed, and every List
// until listed is, if not nil.
type heldWatch struct {
	source.ListWatcher[item]
	open, listed chan struct{}
}

func (h *heldWatch) List(ctx context.Context, opts source.ListOptions) (source.ListResult[item], error) {
	if h.listed != nil {
		select {
		case <-h.listed:
		case <-ctx.Done():
			return source.ListResult[item]{}, ctx.Err()
		}
	}
	return h.ListWatcher.List(ctx, opts)
}

func (h *heldWatch) Watch(ctx context.Context, opts source.WatchOptions) (source.Watcher[item], error) {
	select {
	case <-h.open:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	w, err := h.ListWatcher.Watch(ctx, opts)
	if errors.Is(err, source.ErrExpired) {
		// As etcd does: the watch opens, then ends expired.
		return expiredWatch{err}, nil
	}
	return w, err
}

// expiredWatch is a watch that ends at once with err.
type expiredWatch struct{ err error }

func (w expiredWatch) Next(context.Context) (source.Event[item], error) {
	return source.Event[item]{}, w.err
}

func (expiredWatch) Stop() {}

// An informer resumed from a checkpoint whose version the source no longer
// has, that learns so while the checkpoint loads, fills its cache from the
// list as a first list fills an empty cache, without decoding the rest of
// the checkpoint: a replaying handler is handed the listed state, as a
// handler added to a synced informer is, and a ChangesOnly handler is told
// exactly what changed since the checkpoint (an add, an update from the
// checkpoint's state, a re-created key as a delete then an add, a key gone
// as a delete of the checkpoint's state), nothing of the keys unchanged.
func TestInformer_CompactedResumeListsAndTellsChangesOnlyTheDifferences(t *testing.T) {
	// More objects than the load decodes between two looks at whether
	// the Reflector has begun a list (checkListEvery).
	const filler = 1500
	for _, changesOnly := range []bool{true, false} {
		t.Run("changesOnly="+strconv.FormatBool(changesOnly), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "cp")
				src := &countingSource{Source: memsource.New(itemKey, memsource.Options{})}
				for i := range filler {
					src.Put(item{Name: fmt.Sprintf("k%04d", i), Val: 1, Gen: 1})
				}
				for _, n := range []string{"changed", "recreated", "gone"} {
					src.Put(item{Name: n, Val: 1, Gen: 1})
				}
				startCheckpointed(t, src, path).stop(t)

				src.Put(item{Name: "changed", Val: 2, Gen: 1})
				src.Delete("gone")
				src.Delete("recreated")
				src.Put(item{Name: "recreated", Val: 3, Gen: 2})
				rev, _ := src.Put(item{Name: "new", Val: 1, Gen: 1})
				src.Compact(rev)

				codec := newGatedCodec(2)
				replay, changes, errs := &recorder{}, &recorder{}, &errorLog{}
				watched := &heldWatch{ListWatcher: src, open: make(chan struct{})}
				inf := mirror.NewInformer(watched, mirror.InformerOptions[string, item]{
					KeyFunc: itemKey, ErrorHandler: errs.add, SameObject: sameGen,
					ResourceVersion: func(it item) string { return strconv.Itoa(it.Val) },
					Checkpoint:      mirror.CheckpointOptions[item]{Path: path, Codec: codec},
				})
				_, err := inf.AddEventHandler(replay, mirror.HandlerOptions{})
				require.NoError(t, err)
				if changesOnly {
					_, err = inf.AddEventHandler(changes, mirror.HandlerOptions{ChangesOnly: true})
					require.NoError(t, err)
				}
				ctx, cancel := context.WithCancel(t.Context())
				done := make(chan error, 1)
				go func() { done <- inf.Run(ctx) }()
				// The load is held after its first object while the
				// Reflector, let watch from the checkpoint's version,
				// finds it gone and lists.
				<-codec.reached
				close(watched.open)
				synctest.Wait()
				assert.False(t, inf.HasSynced())

				close(codec.release)
				synctest.Wait()
				require.True(t, inf.HasSynced())
				assert.Equal(t, filler+3, inf.Len())
				// The load stopped at its next look at the Reflector:
				// the checkpoint is not decoded whole.
				assert.Less(t, codec.decoded.Load(), int64(filler), "decoded")

				got := replay.take()
				require.Len(t, got, filler+3, "the listed state, nothing of the checkpoint")
				for _, e := range got {
					require.Equal(t, "add", e.Op, e.String())
					require.True(t, e.Initial, e.String())
				}
				if changesOnly {
					assert.ElementsMatch(t, []string{
						"add new=1 initial=true", "update changed 1->2",
						"delete recreated=1 unknown=true", "add recreated=3 initial=true",
						"delete gone=1 unknown=true",
					}, rendered(changes.take()), "the changes made while down, once each")
				}

				// From here on, as any informer: changes go to both.
				src.Put(item{Name: "changed", Val: 4, Gen: 1})
				synctest.Wait()
				assert.Equal(t, []string{"update changed 2->4"}, rendered(replay.take()))
				if changesOnly {
					assert.Equal(t, []string{"update changed 2->4"}, rendered(changes.take()))
				}
				cancel()
				require.NoError(t, <-done)
			})
		})
	}
}

// The load stops as soon as the Reflector, its watch refused, is about to
// list, before the list has brought anything; the informer, its cache
// empty, has not synced until that list is applied, and its ChangesOnly
// handler is then told only what changed.
func TestInformer_CompactedResumeSyncsWithTheListNotBefore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "cp")
		src := &countingSource{Source: memsource.New(itemKey, memsource.Options{})}
		for i := range 1500 {
			src.Put(item{Name: fmt.Sprintf("k%04d", i), Val: 1, Gen: 1})
		}
		startCheckpointed(t, src, path).stop(t)
		rev, _ := src.Put(item{Name: "new", Val: 1, Gen: 1})
		src.Compact(rev)

		codec := newGatedCodec(2)
		changes := &recorder{}
		held := &heldWatch{ListWatcher: src, open: make(chan struct{}), listed: make(chan struct{})}
		inf := mirror.NewInformer(held, mirror.InformerOptions[string, item]{
			KeyFunc: itemKey, ErrorHandler: (&errorLog{}).add, SameObject: sameGen,
			ResourceVersion: func(it item) string { return strconv.Itoa(it.Val) },
			Checkpoint:      mirror.CheckpointOptions[item]{Path: path, Codec: codec},
		})
		_, err := inf.AddEventHandler(changes, mirror.HandlerOptions{ChangesOnly: true})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- inf.Run(ctx) }()
		<-codec.reached
		close(held.open)
		synctest.Wait()
		close(codec.release)
		synctest.Wait()

		assert.Less(t, codec.decoded.Load(), int64(1500), "the load stopped")
		assert.False(t, inf.HasSynced(), "not synced with an empty cache")
		assert.Zero(t, inf.Len())

		close(held.listed)
		synctest.Wait()
		require.True(t, inf.HasSynced())
		assert.Equal(t, 1501, inf.Len())
		assert.Equal(t, []string{"add new=1 initial=true"}, rendered(changes.take()))
		cancel()
		require.NoError(t, <-done)
	})
}
