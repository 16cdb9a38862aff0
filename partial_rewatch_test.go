package mirror

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// brokenChange scripts a source whose watch breaks inside one change, at
// version 3, that adds b and c and updates a; a=1 is listed at version 1.
// Each watch after the first is opened from version 1, the last complete
// one, and brings the change again from its start.
type brokenChange struct {
	name    string
	watches [][]step
}

var brokenChanges = []brokenChange{
	{name: "once", watches: [][]step{
		{more(addedEvent("b", "3", "3")), end(errCut)},
		{more(addedEvent("b", "3", "3")), more(addedEvent("c", "3", "3")), modified("a", "3", "3")},
	}},
	{name: "again while it is brought again", watches: [][]step{
		{more(addedEvent("b", "3", "3")), more(addedEvent("c", "3", "3")), end(errCut)},
		{more(addedEvent("b", "3", "3")), end(errCut)},
		{more(addedEvent("b", "3", "3")), more(addedEvent("c", "3", "3")), modified("a", "3", "3")},
	}},
	{name: "further on the second time", watches: [][]step{
		{more(addedEvent("b", "3", "3")), end(errCut)},
		{more(addedEvent("b", "3", "3")), more(addedEvent("c", "3", "3")), end(errCut)},
		{more(addedEvent("b", "3", "3")), more(addedEvent("c", "3", "3")), modified("a", "3", "3")},
	}},
}

var errCut = fmt.Errorf("%w: connection cut", source.ErrUnavailable)

// script queues the list and the watches of c on lw.
func (c brokenChange) script(lw *fakeLW) {
	lw.page("1", "", tobj{"a", "1"})
	for _, steps := range c.watches {
		lw.watch(steps...)
	}
}

// A watch that broke inside a change is opened again from before it and
// brings the change's events again; those the store was handed already
// are passed over, so that any store gets each event once.
func TestReflector_WatchBrokenInsideAChangeHandsEachEventOnce(t *testing.T) {
	for _, c := range brokenChanges {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				lw, store := newFakeLW(), newRecStore()
				c.script(lw)
				r := NewReflector[tobj](lw, store, ReflectorOptions{
					Logger:       slog.New(slog.DiscardHandler),
					ErrorHandler: func(err error) { assert.ErrorIs(t, err, source.ErrUnavailable) },
				})
				ctx, cancel := context.WithCancel(t.Context())
				done := make(chan struct{})
				go func() { defer close(done); r.Run(ctx) }()
				for range c.watches {
					time.Sleep(time.Minute) // past the pause before the next watch
					synctest.Wait()
				}
				cancel()
				<-done
				assert.Equal(t, []string{"replace@1 [a=1]", "add b=3", "add c=3", "update a=3"}, store.Log())
				for i, rv := range lw.WatchVersions() {
					assert.Equal(t, "1", rv, "watch %d", i)
				}
				assert.Len(t, lw.WatchVersions(), len(c.watches))
			})
		})
	}
}

// handlerLog is a Handler that records every call as text.
type handlerLog struct {
	mu    sync.Mutex
	calls []string
}

func (h *handlerLog) add(s string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, s)
}

func (h *handlerLog) OnAdd(obj tobj, initial bool) {
	h.add(fmt.Sprintf("add %s initial=%v", obj, initial))
}

func (h *handlerLog) OnUpdate(old, obj tobj) {
	h.add(fmt.Sprintf("update %s %s->%s", obj.Key, old.Val, obj.Val))
}

func (h *handlerLog) OnDelete(obj tobj, unknown bool) {
	h.add(fmt.Sprintf("delete %s unknown=%v", obj, unknown))
}

func (h *handlerLog) take() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.calls
	h.calls = nil
	return c
}

// Each change reaches the handlers once when the watch
// broke inside the change that made it: the first half of the change is
// applied before the break, and its events, brought again, are no
// changes. With InformerOptions.ResourceVersion too: the fix does not
// lean on it.
func TestInformer_WatchBrokenInsideAChangeDeliversEachChangeOnce(t *testing.T) {
	for _, c := range brokenChanges {
		for _, withRV := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/ResourceVersion=%v", c.name, withRV), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					lw := newFakeLW()
					c.script(lw)
					opts := InformerOptions[string, tobj]{KeyFunc: tobjKey,
						Logger:       slog.New(slog.DiscardHandler),
						ErrorHandler: func(err error) { assert.ErrorIs(t, err, source.ErrUnavailable) }}
					if withRV {
						opts.ResourceVersion = func(o tobj) string { return o.Val }
					}
					inf := NewInformer[string, tobj](lw, opts)
					h := &handlerLog{}
					_, err := inf.AddEventHandler(h, HandlerOptions{})
					require.NoError(t, err)
					ctx, cancel := context.WithCancel(t.Context())
					done := make(chan error, 1)
					go func() { done <- inf.Run(ctx) }()
					for range c.watches {
						time.Sleep(time.Minute)
						synctest.Wait()
					}
					assert.Equal(t, []string{"add a=1 initial=true", "add b=3 initial=false", "add c=3 initial=false", "update a 1->3"},
						h.take())
					assert.Equal(t, "3", inf.Freshness().ResourceVersion)
					cancel()
					require.NoError(t, <-done)
				})
			})
		}
	}
}

// A relist after a watch broke inside a change reads at the change's
// version, not the last complete one: the store holds part of the change,
// and an older list would take it back out, only for the watch to bring
// it again.
func TestReflector_RelistAfterAWatchBrokenInsideAChangeIsNotOlderThanIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lw, store := newFakeLW(), newRecStore()
		lw.page("1", "", tobj{"a", "1"})
		broken := errors.New("watch refused")
		lw.watch(more(addedEvent("b", "3", "3")), end(broken))
		lw.page("3", "", tobj{"a", "3"}, tobj{"b", "3"})
		lw.watch()
		r := NewReflector[tobj](lw, store, ReflectorOptions{
			Logger:       slog.New(slog.DiscardHandler),
			ErrorHandler: func(err error) { assert.ErrorIs(t, err, broken) },
		})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { defer close(done); r.Run(ctx) }()
		time.Sleep(time.Minute)
		synctest.Wait()
		cancel()
		<-done
		assert.Equal(t, []string{"0", "3"}, lw.ListVersions())
		assert.Equal(t, []string{"replace@1 [a=1]", "add b=3", "replace@3 [a=3 b=3]"}, store.Log())
	})
}
