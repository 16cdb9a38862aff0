package reconcile_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/listwatch/mirror/reconcile"
)

// deep panics depth calls down.
func deep(depth int) int {
	if depth == 0 {
		panic("deep down")
	}
	return deep(depth-1) + 1
}

func TestLoop_APanicsLoggedLineStaysUnder4KBWithItsStack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		failed := make(chan struct{})
		l := reconcile.New[string](reconcile.Func[string](func(ctx context.Context, key string) (reconcile.Result, error) {
			defer close(failed)
			deep(300)
			return reconcile.Result{}, nil
		}), reconcile.Options{MaxRetries: 1, Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { done <- l.Run(ctx) }()
		l.Queue().Add("k")
		<-failed
		synctest.Wait()
		cancel()
		require.NoError(t, <-done)
		line := strings.TrimSpace(buf.String())
		assert.LessOrEqual(t, len(line), 4096, "a line under 4 KB")
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &rec))
		stack, _ := rec["stack"].(string)
		assert.Contains(t, stack, "reconcile_test.deep", "the frames nearest the panic are kept")
	})
}
