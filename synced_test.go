package mirror

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// newFakeInformer returns an informer over a new fakeLW, its errors
// dropped.
func newFakeInformer() (*Informer[string, tobj], *fakeLW) {
	lw := newFakeLW()
	return NewInformer[string, tobj](lw, InformerOptions[string, tobj]{KeyFunc: tobjKey, ErrorHandler: func(error) {}}), lw
}

// runInformer runs inf until the test ends.
func runInformer(t *testing.T, inf *Informer[string, tobj]) {
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = inf.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

func TestWaitForSync_ContextEndNamesTheLastFailureAndKeepsWaitingUntilThen(t *testing.T) {
	refused := fmt.Errorf("dial tcp 127.0.0.1:2379: connection refused: %w", source.ErrUnavailable)
	tests := []struct {
		name string
		// fail makes the source's lists fail; otherwise they hang.
		fail bool
		// wait waits for the informer, with a synced one beside it if
		// the test uses WaitForCacheSync.
		wait func(ctx context.Context, inf, synced *Informer[string, tobj]) error
	}{
		{
			name: "Informer.WaitForSync, source failing",
			fail: true,
			wait: func(ctx context.Context, inf, _ *Informer[string, tobj]) error { return inf.WaitForSync(ctx) },
		},
		{
			name: "WaitForCacheSync, source failing",
			fail: true,
			wait: func(ctx context.Context, inf, synced *Informer[string, tobj]) error {
				return WaitForCacheSync(ctx, synced, inf)
			},
		},
		{
			name: "Informer.WaitForSync, source slow",
			wait: func(ctx context.Context, inf, _ *Informer[string, tobj]) error { return inf.WaitForSync(ctx) },
		},
		{
			name: "WaitForCacheSync, source slow",
			wait: func(ctx context.Context, inf, synced *Informer[string, tobj]) error {
				return WaitForCacheSync(ctx, synced, inf)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				inf, lw := newFakeInformer()
				if tt.fail {
					for range 100 {
						lw.listErr(refused)
					}
				}
				synced, slw := newFakeInformer()
				slw.page("1", "")
				runInformer(t, inf)
				runInformer(t, synced)

				ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
				defer cancel()
				done := make(chan error, 1)
				go func() { done <- tt.wait(ctx, inf, synced) }()
				time.Sleep(30 * time.Second) // many failed lists
				synctest.Wait()
				select {
				case err := <-done:
					t.Fatalf("the wait ended before its context: %v", err)
				default:
				}
				err := <-done

				require.ErrorIs(t, err, context.DeadlineExceeded)
				if !tt.fail {
					assert.Equal(t, context.DeadlineExceeded, err, "nothing else to say")
					return
				}
				assert.ErrorIs(t, err, source.ErrUnavailable, "the cause")
				assert.Contains(t, err.Error(), "mirror: not synced: context deadline exceeded; last error: ")
				assert.Contains(t, err.Error(), "connection refused")
			})
		})
	}
}

func TestWaitForCacheSync_PermanentRefusalStillEndsTheWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		inf, lw := newFakeInformer()
		forbidden := fmt.Errorf("403 forbidden: %w", ErrPermanent)
		for range defaultSyncFailureLimit {
			lw.listErr(forbidden)
		}
		synced, slw := newFakeInformer()
		slw.page("1", "")
		runInformer(t, inf)
		runInformer(t, synced)

		err := WaitForCacheSync(t.Context(), synced, inf)
		require.ErrorIs(t, err, ErrPermanent)
		assert.NoError(t, t.Context().Err(), "before the context ended")
		assert.False(t, errors.Is(err, context.Canceled))
	})
}
