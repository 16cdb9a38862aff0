package reconcile_test

import (
	"bytes"
	"context"
	"log/slog"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/listwatch/mirror/reconcile"
)

// nilErr is an error whose Error dereferences its receiver: a typed nil
// of it, returned as an error, panics when asked for its text.
type nilErr struct{ msg string }

func (e *nilErr) Error() string { return e.msg }

func TestLoop_ATypedNilErrorIsReportedNotAPanic(t *testing.T) {
	t.Run("Error", func(t *testing.T) {
		e := &reconcile.Error[string]{Key: "k", Err: (*nilErr)(nil)}
		var text string
		require.NotPanics(t, func() { text = e.Error() })
		assert.Contains(t, text, "key k")
	})
	t.Run("logged", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var buf bytes.Buffer
			reported := make(chan struct{})
			l := reconcile.New[string](reconcile.Func[string](func(ctx context.Context, key string) (reconcile.Result, error) {
				defer close(reported)
				var err *nilErr // the classic mistake: a typed nil as an error
				return reconcile.Result{}, err
			}), reconcile.Options{MaxRetries: 1, Logger: slog.New(slog.NewTextHandler(&buf, nil))})
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error)
			go func() { done <- l.Run(ctx) }()
			l.Queue().Add("k")
			<-reported
			synctest.Wait()
			cancel()
			require.NoError(t, <-done)
			assert.Contains(t, buf.String(), "reconcile failed")
		})
	})
}
