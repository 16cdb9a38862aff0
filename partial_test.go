package mirror

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// more marks a step's event as followed by more of its change.
func more(s step) step {
	s.ev.More = true
	return s
}

func tobjKey(o tobj) (string, error) { return o.Key, nil }

// A change made in one step (an etcd transaction) reaches the informer as
// several events of one version; a checkpoint taken between them would
// claim the whole change and, resumed from, never get the rest. So the
// informer's snapshot waits for the change's last event.
func TestInformer_CheckpointWaitsForTheRestOfAChange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lw := newFakeLW()
		lw.page("1", "", tobj{"a", "1"}, tobj{"b", "1"})
		w := lw.watch(more(modified("a", "2", "2")))
		inf := NewInformer[string, tobj](lw, InformerOptions[string, tobj]{KeyFunc: tobjKey})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- inf.Run(ctx) }()
		synctest.Wait()

		objs, rv, wait := inf.snapshot()
		require.NotNil(t, wait, "half of the change at version 2 is in")
		assert.Nil(t, objs)
		assert.Equal(t, "2", rv)

		w.push(modified("b", "2", "2"))
		synctest.Wait()
		select {
		case <-wait:
		default:
			t.Fatal("the wait did not end when the change completed")
		}
		objs, rv, wait = inf.snapshot()
		require.Nil(t, wait)
		assert.Equal(t, "2", rv)
		assert.ElementsMatch(t, []tobj{{"a", "2"}, {"b", "2"}}, objs)
		cancel()
		require.NoError(t, <-done)
	})
}

// The checkpoint written when Run returns is not written while the cache
// holds part of a change: the previous one, whole, stays.
func TestInformer_CheckpointAtStopIsNotWrittenHalfwayThroughAChange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "cp")
		lw := newFakeLW()
		lw.page("1", "", tobj{"a", "1"}, tobj{"b", "1"})
		lw.watch(more(modified("a", "2", "2")))
		inf := NewInformer[string, tobj](lw, InformerOptions[string, tobj]{
			KeyFunc:    tobjKey,
			Checkpoint: CheckpointOptions[tobj]{Path: path},
			ErrorHandler: func(err error) {
				assert.ErrorIs(t, err, os.ErrNotExist, "only the missing checkpoint is reported")
			},
		})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- inf.Run(ctx) }()
		synctest.Wait()
		cancel()
		require.NoError(t, <-done)
		_, err := os.Stat(path)
		assert.ErrorIs(t, err, os.ErrNotExist)
	})
}

// A watch that breaks after an event with more of its change to come is
// opened again from the last complete version, so the rest is not lost.
func TestReflector_WatchBrokenInsideAChangeResumesBeforeIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lw := newFakeLW()
		lw.page("1", "", tobj{"a", "1"})
		cut := fmt.Errorf("%w: connection cut", source.ErrUnavailable)
		lw.watch(modified("a", "2", "2"), more(modified("a", "3", "3")), end(cut))
		lw.watch()
		r := NewReflector[tobj](lw, NewIndexer[string, tobj](tobjKey, nil), ReflectorOptions{
			ErrorHandler: func(err error) { assert.ErrorIs(t, err, source.ErrUnavailable) },
		})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { defer close(done); r.Run(ctx) }()
		time.Sleep(time.Minute) // past the pause before the second watch
		synctest.Wait()
		cancel()
		<-done
		assert.Equal(t, []string{"1", "2"}, lw.WatchVersions())
	})
}
