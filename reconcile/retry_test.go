package reconcile_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/listwatch/mirror/reconcile"
)

// jsonLog is a logger that keeps its records, to read back.
type jsonLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *jsonLog) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(lockedWriter{&l.mu, &l.buf}, nil))
}

func (l *jsonLog) records(t *testing.T) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var records []map[string]any
	dec := json.NewDecoder(bytes.NewReader(l.buf.Bytes()))
	for dec.More() {
		var rec map[string]any
		require.NoError(t, dec.Decode(&rec))
		records = append(records, rec)
	}
	return records
}

// TestLoop_MaxRetriesGivesUpOnKey: with MaxRetries 2, a key that always
// fails is reconciled three times and given up: the last report says so,
// naming the key, the attempts and the last error; the queue forgets the
// key; a later change reconciles it afresh, with its three attempts again.
// With MaxRetries zero the key is retried on.
func TestLoop_MaxRetriesGivesUpOnKey(t *testing.T) {
	tests := []struct {
		name         string
		maxRetries   int
		wantRequeues []int // NumRequeues seen by each call, before the change
	}{
		{name: "MaxRetries 2", maxRetries: 2, wantRequeues: []int{0, 1, 2}},
		{name: "MaxRetries 0 retries on", maxRetries: 0, wantRequeues: []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var mu sync.Mutex
				var requeues []int
				mk := func(g *rig) reconcile.Reconciler[string] {
					return reconcile.Func[string](func(ctx context.Context, key string) (reconcile.Result, error) {
						mu.Lock()
						defer mu.Unlock()
						requeues = append(requeues, g.loop.Queue().NumRequeues(key))
						return reconcile.Result{}, fmt.Errorf("attempt %d: %w", len(requeues), errFlaky)
					})
				}
				var errs errorLog
				g := startRig(t, mk, reconcile.Options{Name: "test", MaxRetries: tt.maxRetries, ErrorHandler: errs.handle}, item{Name: "a"})
				// 5ms·2¹⁵ is about 164 s: the 16th call is due within the hour.
				time.Sleep(time.Hour)
				synctest.Wait()
				mu.Lock()
				if tt.maxRetries == 0 {
					assert.Greater(t, len(requeues), len(tt.wantRequeues), "calls")
					requeues = requeues[:len(tt.wantRequeues)]
				}
				assert.Equal(t, tt.wantRequeues, requeues, "NumRequeues seen by each call")
				mu.Unlock()
				if tt.maxRetries == 0 {
					require.NoError(t, g.stop())
					return
				}

				checkGaveUp := func(reported []error) {
					t.Helper()
					require.Len(t, reported, tt.maxRetries+1)
					for _, err := range reported[:tt.maxRetries] {
						var e *reconcile.Error[string]
						require.ErrorAs(t, err, &e)
						assert.False(t, e.Dropped, "dropped before its last attempt: %v", err)
					}
					var e *reconcile.Error[string]
					require.ErrorAs(t, reported[tt.maxRetries], &e)
					assert.True(t, e.Dropped)
					assert.Equal(t, tt.maxRetries, e.Retries)
					assert.ErrorIs(t, e, errFlaky)
					assert.NotErrorIs(t, e, reconcile.ErrTerminal)
					assert.Regexp(t, `^reconcile "test": key a: gave up after 3 attempts: attempt [36]: flaky$`, e.Error())
				}
				checkGaveUp(errs.all())
				assert.Zero(t, g.loop.Queue().NumRequeues("a"), "the queue forgot the key")

				// A later change: the key is reconciled afresh.
				errs = errorLog{}
				g.put(t, item{Name: "a", Val: 1})
				time.Sleep(time.Hour)
				synctest.Wait()
				mu.Lock()
				assert.Equal(t, append(tt.wantRequeues, tt.wantRequeues...), requeues, "NumRequeues seen by each call")
				mu.Unlock()
				checkGaveUp(errs.all())
				require.NoError(t, g.stop())
			})
		})
	}
}

// TestLoop_LogsGivingUp: without an ErrorHandler, giving up on a key is
// logged once at Error level, naming the key, the attempts and the last
// error.
func TestLoop_LogsGivingUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log jsonLog
		r := reconcile.Func[string](func(ctx context.Context, key string) (reconcile.Result, error) {
			return reconcile.Result{}, errFlaky
		})
		g := startRig(t, func(*rig) reconcile.Reconciler[string] { return r },
			reconcile.Options{Name: "logged", MaxRetries: 1, Logger: log.logger()}, item{Name: "a"})
		time.Sleep(time.Hour)
		synctest.Wait()
		require.NoError(t, g.stop())

		records := log.records(t)
		require.Len(t, records, 2)
		for i, rec := range records {
			assert.Equal(t, "ERROR", rec["level"])
			assert.Equal(t, "logged", rec["loop"])
			assert.Equal(t, "a", rec["key"])
			assert.Equal(t, "flaky", rec["err"])
			assert.EqualValues(t, i+1, rec["attempts"])
			assert.Equal(t, i == 1, rec["dropped"])
		}
		assert.Equal(t, "reconcile gave up on key", records[1]["msg"])
	})
}
