package mirror

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
)

// syncedAsCtxEnds is a SyncWaiter that syncs as its caller's context
// ends: it ends that context, then returns nil.
type syncedAsCtxEnds struct{ end context.CancelFunc }

func (w syncedAsCtxEnds) WaitForSync(context.Context) error {
	w.end()
	return nil
}

// syncedWaiter has synced.
type syncedWaiter struct{}

func (syncedWaiter) WaitForSync(context.Context) error { return nil }

func TestWaitForCacheSync_EveryWaiterSyncedIsNilEvenIfTheContextEndedSince(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	err := WaitForCacheSync(ctx, syncedWaiter{}, syncedAsCtxEnds{cancel})
	assert.NoError(t, err, "every waiter synced")
}
