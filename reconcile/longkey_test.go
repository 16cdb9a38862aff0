package reconcile_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/listwatch/mirror/reconcile"
)

func TestLoop_AHugeKeyIsCutInErrorsAndLogs(t *testing.T) {
	key := strings.Repeat("k", 1<<20)
	for _, handler := range []bool{true, false} {
		name := map[bool]string{true: "reported", false: "logged"}[handler]
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var buf bytes.Buffer
				var mu sync.Mutex
				var texts []string
				opts := reconcile.Options{Name: "huge", MaxRetries: 1, Logger: slog.New(slog.NewJSONHandler(&buf, nil))}
				if handler {
					opts.ErrorHandler = func(err error) {
						mu.Lock()
						defer mu.Unlock()
						texts = append(texts, err.Error())
					}
				}
				failed := make(chan struct{})
				l := reconcile.New[string](reconcile.Func[string](func(ctx context.Context, key string) (reconcile.Result, error) {
					defer close(failed)
					return reconcile.Result{}, reconcile.Terminal(errors.New("bad"))
				}), opts)
				ctx, cancel := context.WithCancel(t.Context())
				done := make(chan error)
				go func() { done <- l.Run(ctx) }()
				l.Queue().Add(key)
				<-failed
				synctest.Wait()
				cancel()
				require.NoError(t, <-done)
				if !handler {
					texts = strings.Split(strings.TrimSpace(buf.String()), "\n")
				}
				require.Len(t, texts, 1)
				assert.LessOrEqual(t, len(texts[0]), 4096, "a bounded report")
				assert.True(t, strings.Contains(texts[0], "bytes cut]"), "the key is cut, and says so")
			})
		})
	}
}
