package mirror_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/memsource"
	"github.com/listwatch/mirror/source"
)

// countingSource counts the List calls that start a list.
type countingSource struct {
	*memsource.Source[item]
	lists atomic.Int64
	// hold, if not nil, holds each watch until it is closed; a watch the
	// source refuses is then refused, not opened and ended as heldWatch's
	// are.
	hold chan struct{}
}

func (s *countingSource) List(ctx context.Context, opts source.ListOptions) (source.ListResult[item], error) {
	if opts.Continue == "" {
		s.lists.Add(1)
	}
	return s.Source.List(ctx, opts)
}

func (s *countingSource) Watch(ctx context.Context, opts source.WatchOptions) (source.Watcher[item], error) {
	if s.hold != nil {
		select {
		case <-s.hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return s.Source.Watch(ctx, opts)
}

// checkpointed is an informer over src that keeps a checkpoint at path,
// with identity-aware options, and a replaying and a changes-only handler.
type checkpointed struct {
	inf             *mirror.Informer[string, item]
	replay, changes *recorder
	errs            *errorLog
	cancel          context.CancelFunc
	done            chan error
}

func startCheckpointed(t *testing.T, src source.ListWatcher[item], path string) *checkpointed {
	c := &checkpointed{replay: &recorder{}, changes: &recorder{}, errs: &errorLog{}, done: make(chan error, 1)}
	c.inf = mirror.NewInformer(src, mirror.InformerOptions[string, item]{
		KeyFunc:         itemKey,
		ErrorHandler:    c.errs.add,
		SameObject:      sameGen,
		ResourceVersion: func(it item) string { return strconv.Itoa(it.Val) },
		Checkpoint:      mirror.CheckpointOptions[item]{Path: path},
	})
	_, err := c.inf.AddEventHandler(c.replay, mirror.HandlerOptions{})
	require.NoError(t, err)
	_, err = c.inf.AddEventHandler(c.changes, mirror.HandlerOptions{ChangesOnly: true})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	c.cancel = cancel
	go func() { c.done <- c.inf.Run(ctx) }()
	synctest.Wait()
	require.True(t, c.inf.HasSynced())
	return c
}

func (c *checkpointed) stop(t *testing.T) {
	c.cancel()
	require.NoError(t, <-c.done)
}

func TestInformer_ResumesFromACheckpointWithExactlyTheChangesMadeWhileDown(t *testing.T) {
	for _, compacted := range []bool{false, true} {
		t.Run("compacted="+strconv.FormatBool(compacted), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "cp")
				src := &countingSource{Source: memsource.New(itemKey, memsource.Options{})}
				for _, n := range []string{"kept", "changed", "recreated", "gone"} {
					src.Put(item{Name: n, Val: 1, Gen: 1})
				}
				first := startCheckpointed(t, src, path)
				first.stop(t) // writes the checkpoint
				require.EqualValues(t, 1, src.lists.Load())

				// While no mirror runs.
				src.Put(item{Name: "changed", Val: 2, Gen: 1})
				src.Delete("recreated")
				// Re-created at a new version, as by any real source: a
				// compacted resume tells an object unchanged by its
				// version alone.
				src.Put(item{Name: "recreated", Val: 3, Gen: 2})
				src.Delete("gone")
				src.Put(item{Name: "new", Val: 1, Gen: 1})
				if compacted {
					src.Compact(src.Revision())
				}

				second := startCheckpointed(t, src, path)
				wantLists := int64(1)
				if compacted {
					wantLists = 2 // the relist the compaction forced
				}
				assert.Equal(t, wantLists, src.lists.Load(), "no list while the checkpoint's version is in the history")
				changes := []string{
					"add new=1 initial=" + strconv.FormatBool(compacted),
					"add recreated=3 initial=" + strconv.FormatBool(compacted),
					"delete gone=1 unknown=" + strconv.FormatBool(compacted),
					"delete recreated=1 unknown=" + strconv.FormatBool(compacted),
					"update changed 1->2",
				}
				assert.Equal(t, changes, sorted(second.changes.take()), "exactly the changes, once each")
				replayed := sorted(second.replay.take())
				if compacted && !slices.Contains(replayed, "add gone=1 initial=true") {
					// The Reflector learned of the compaction before the
					// load looked for a list: the load stopped and the
					// list filled the cache, so a replaying handler is
					// handed the listed state (checkpoint_listfirst_test.go
					// pins that path; which one is taken is a race).
					assert.Equal(t, []string{"add changed=2 initial=true", "add kept=1 initial=true", "add new=1 initial=true", "add recreated=3 initial=true"}, replayed)
				} else {
					for _, n := range []string{"changed", "gone", "kept", "recreated"} {
						assert.Contains(t, replayed, "add "+n+"=1 initial=true", "the checkpoint's objects, first")
					}
					assert.Len(t, replayed, 4+len(changes))
				}
				got := map[string]int{}
				for k, v := range second.inf.All() {
					got[k] = v.Val
				}
				assert.Equal(t, map[string]int{"kept": 1, "changed": 2, "recreated": 3, "new": 1}, got)
				if compacted {
					require.Len(t, second.errs.all(), 1)
					assert.ErrorIs(t, second.errs.all()[0], source.ErrExpired, "the watch from the checkpoint's version")
				} else {
					assert.Empty(t, second.errs.all())
				}
				second.stop(t)
			})
		})
	}
}

// A first start finds no checkpoint: that is no failure. The informer
// says so at level Info and lists; nothing is reported.
func TestInformer_MissingCheckpointIsAFirstStartNotAFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "cp")
		src := &countingSource{Source: memsource.New(itemKey, memsource.Options{})}
		src.Put(item{Name: "a", Val: 1})
		logs, errs := &lockedBuffer{}, &errorLog{}
		inf := mirror.NewInformer(src, mirror.InformerOptions[string, item]{
			KeyFunc: itemKey, ErrorHandler: errs.add,
			Logger:     slog.New(slog.NewTextHandler(logs, nil)),
			Checkpoint: mirror.CheckpointOptions[item]{Path: path},
		})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- inf.Run(ctx) }()
		synctest.Wait()
		require.True(t, inf.HasSynced())
		assert.Equal(t, 1, inf.Len())
		assert.EqualValues(t, 1, src.lists.Load(), "listed")
		assert.Empty(t, errs.all(), "nothing reported")
		assert.Zero(t, inf.Stats().CheckpointErrors)
		assert.Contains(t, logs.String(), `level=INFO msg="no checkpoint yet, listing" path=`+path)
		assert.NotContains(t, logs.String(), "level=WARN")
		cancel()
		require.NoError(t, <-done)
	})
}

func TestInformer_UnusableCheckpointIsReportedAndTheSourceListed(t *testing.T) {
	write := map[string]func(path string){
		"truncated": func(path string) { truncate(path) },
		"corrupt":   func(path string) { flipByte(path, 40) },
		"not a checkpoint": func(path string) {
			_ = os.WriteFile(path, []byte("{}"), 0o600)
		},
		"another identity": func(path string) {}, // see below
	}
	for name, spoil := range write {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "cp")
				src := &countingSource{Source: memsource.New(itemKey, memsource.Options{})}
				src.Put(item{Name: "a", Val: 1})
				switch name {
				case "another identity":
					inf := mirror.NewInformer(src, mirror.InformerOptions[string, item]{KeyFunc: itemKey,
						Checkpoint: mirror.CheckpointOptions[item]{Path: path, Identity: "another source"}})
					ctx, cancel := context.WithCancel(t.Context())
					done := make(chan error)
					go func() { done <- inf.Run(ctx) }()
					synctest.Wait()
					cancel()
					require.NoError(t, <-done)
				default:
					startCheckpointed(t, src, path).stop(t)
				}
				spoil(path)
				src.Put(item{Name: "b", Val: 1})

				c := startCheckpointed(t, src, path)
				var ce *mirror.CheckpointError
				require.Len(t, c.errs.all(), 1)
				require.ErrorAs(t, c.errs.all()[0], &ce)
				assert.Equal(t, "load", ce.Op)
				assert.ErrorIs(t, ce, mirror.ErrCheckpointInvalid)
				assert.Equal(t, []string{"add a=1 initial=true", "add b=1 initial=true"}, sorted(c.changes.take()),
					"a full list; without a checkpoint, changes-only handlers get it all")
				assert.Equal(t, 2, c.inf.Len())
				assert.EqualValues(t, 1, c.inf.Stats().CheckpointErrors)
				c.stop(t)
			})
		})
	}
}

func TestInformer_CheckpointIsWrittenEveryIntervalAtTheVersionApplied(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "cp")
		src := &countingSource{Source: memsource.New(itemKey, memsource.Options{})}
		src.Put(item{Name: "a", Val: 1})
		inf := mirror.NewInformer(src, mirror.InformerOptions[string, item]{
			KeyFunc:    itemKey,
			Checkpoint: mirror.CheckpointOptions[item]{Path: path, Interval: time.Minute},
		})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- inf.Run(ctx) }()
		synctest.Wait()
		_, err := os.Stat(path)
		require.ErrorIs(t, err, os.ErrNotExist, "nothing written before the interval")

		src.Put(item{Name: "b", Val: 1})
		time.Sleep(time.Minute)
		synctest.Wait()
		src.Put(item{Name: "c", Val: 1}) // after the checkpoint
		synctest.Wait()

		// Another informer resumes from what was written: a and b at
		// the version after b, from which its watch brings c.
		other := startCheckpointed(t, src, path)
		assert.EqualValues(t, 1, src.lists.Load(), "resumed, not listed")
		assert.Equal(t, []string{"add c=1 initial=false"}, rendered(other.changes.take()))
		assert.Equal(t, 3, other.inf.Len())
		other.stop(t)
		cancel()
		require.NoError(t, <-done)
	})
}

func truncate(path string) {
	b, _ := os.ReadFile(path)
	_ = os.WriteFile(path, b[:len(b)/2], 0o600)
}

func flipByte(path string, i int) {
	b, _ := os.ReadFile(path)
	if i < len(b) {
		b[i] ^= 0xff
	}
	_ = os.WriteFile(path, b, 0o600)
}
