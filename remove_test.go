package mirror_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/listwatch/mirror"
)

// TestInformer_RemoveEventHandlerAndWaitWaitsForTheCallInProgress pins
// what RemoveEventHandlerAndWait waits for: the handler's call in
// progress, however the handler was removed before, and nothing when no
// call is in progress.
func TestInformer_RemoveEventHandlerAndWaitWaitsForTheCallInProgress(t *testing.T) {
	tests := []struct {
		name string
		// inCall leaves the handler inside a call when it is removed.
		inCall bool
		// removedBefore removes it with RemoveEventHandler first.
		removedBefore bool
		// ctxEnded passes RemoveEventHandlerAndWait an ended context.
		ctxEnded bool
		wantErr  error
	}{
		{name: "a call in progress", inCall: true},
		{name: "a call in progress, removed before", inCall: true, removedBefore: true},
		{name: "a call in progress, context ended", inCall: true, ctxEnded: true, wantErr: context.Canceled},
		{name: "no call in progress"},
		{name: "no call in progress, context ended", ctxEnded: true},
		{name: "no call in progress, removed before, context ended", removedBefore: true, ctxEnded: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFixture(t, nil)
				gate := make(chan struct{})
				rec := &recorder{gate: gate}
				reg, err := f.inf.AddEventHandler(rec, mirror.HandlerOptions{})
				require.NoError(t, err)
				f.start()
				f.synced()
				if tt.inCall {
					f.src.Put(item{Name: "a", Val: 1})
					synctest.Wait() // inside OnAdd, waiting on gate
				}
				if tt.removedBefore {
					require.NoError(t, f.inf.RemoveEventHandler(reg))
				}
				ctx := t.Context()
				if tt.ctxEnded {
					c, cancel := context.WithCancel(ctx)
					cancel()
					ctx = c
				}

				removed := make(chan error, 1)
				go func() { removed <- f.inf.RemoveEventHandlerAndWait(ctx, reg) }()
				synctest.Wait()
				early := false
				select {
				case err = <-removed:
					early = true
				default:
				}
				assert.False(t, early && tt.inCall && !tt.ctxEnded, "RemoveEventHandlerAndWait returned while the handler was still in its call")
				close(gate)
				if !early {
					err = <-removed
				}
				if tt.wantErr != nil {
					require.ErrorIs(t, err, tt.wantErr)
				} else {
					require.NoError(t, err)
				}
				f.src.Put(item{Name: "b", Val: 1})
				synctest.Wait()
				if tt.inCall {
					assert.Equal(t, []string{"add a=1 initial=false"}, rendered(rec.take()), "the call in progress finishes; nothing after")
				} else {
					assert.Empty(t, rec.take())
				}
				f.stop()
			})
		})
	}
}

// TestInformer_HandlerRemovesItself pins what the Remove docs say of a
// handler that removes itself: RemoveEventHandler works, and no call
// follows; RemoveEventHandlerAndWait waits for the very call it is made
// from, so until its context ends.
func TestInformer_HandlerRemovesItself(t *testing.T) {
	for _, wait := range []bool{false, true} {
		name := "RemoveEventHandler"
		if wait {
			name = "RemoveEventHandlerAndWait"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFixture(t, nil)
				var (
					reg     *mirror.Registration
					calls   []string
					removed = make(chan error, 1)
				)
				h := mirror.HandlerFuncs[item]{AddFunc: func(obj item, _ bool) {
					calls = append(calls, obj.Name)
					if wait {
						ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
						defer cancel()
						removed <- f.inf.RemoveEventHandlerAndWait(ctx, reg)
					} else {
						removed <- f.inf.RemoveEventHandler(reg)
					}
				}}
				var err error
				reg, err = f.inf.AddEventHandler(h, mirror.HandlerOptions{})
				require.NoError(t, err)
				f.start()
				f.synced()
				f.src.Put(item{Name: "a", Val: 1})
				f.src.Put(item{Name: "b", Val: 1})
				err = <-removed
				if wait {
					require.ErrorIs(t, err, context.DeadlineExceeded, "it waited for its own call")
				} else {
					require.NoError(t, err)
				}
				f.src.Put(item{Name: "c", Val: 1})
				synctest.Wait()
				assert.Equal(t, []string{"a"}, calls, "no call after the one that removed it")
				f.stop()
			})
		})
	}
}
