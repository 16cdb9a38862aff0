package reconcile_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/memsource"
	"github.com/listwatch/mirror/reconcile"
)

type config struct {
	ID string
	On bool
}

func configKey(c config) (string, error) { return c.ID, nil }

// TestLoop_TwoInformers: one loop watches two informers of different
// object types and one key type. Run waits for both to sync before the
// first Reconcile, and the keys of both, initial and live, are reconciled.
func TestLoop_TwoInformers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		items := memsource.New(itemKey, memsource.Options{})
		configs := memsource.New(configKey, memsource.Options{})
		for _, k := range []string{"a", "b"} {
			_, err := items.Put(item{Name: k})
			require.NoError(t, err)
		}
		for _, k := range []string{"b", "c"} {
			_, err := configs.Put(config{ID: k})
			require.NoError(t, err)
		}
		itemInf := mirror.NewInformer(items, mirror.InformerOptions[string, item]{KeyFunc: itemKey})
		configInf := mirror.NewInformer(configs, mirror.InformerOptions[string, config]{KeyFunc: configKey})

		var regs []*mirror.Registration
		var mu sync.Mutex
		var seen []string
		loop := reconcile.New(reconcile.Func[string](func(ctx context.Context, key string) (reconcile.Result, error) {
			for _, r := range regs {
				assert.True(t, r.HasSynced(), "Reconcile before every watched handler synced")
			}
			_, isItem := itemInf.GetByKey(key)
			_, isConfig := configInf.GetByKey(key)
			assert.True(t, isItem || isConfig, "key %q in neither cache", key)
			mu.Lock()
			seen = append(seen, key)
			mu.Unlock()
			return reconcile.Result{}, nil
		}), reconcile.Options{Workers: 2})
		reg, err := reconcile.Watch(loop, itemInf, mirror.HandlerOptions{})
		require.NoError(t, err)
		regs = append(regs, reg)
		reg, err = reconcile.Watch(loop, configInf, mirror.HandlerOptions{})
		require.NoError(t, err)
		regs = append(regs, reg)

		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		wg.Go(func() { assert.NoError(t, loop.Run(ctx)) })
		synctest.Wait()
		// The loop waits for the config informer, which is not running.
		wg.Go(func() { _ = itemInf.Run(ctx) })
		time.Sleep(time.Minute)
		synctest.Wait()
		mu.Lock()
		assert.Empty(t, seen, "reconciled before the config informer synced")
		mu.Unlock()

		wg.Go(func() { _ = configInf.Run(ctx) })
		synctest.Wait()
		_, err = items.Put(item{Name: "d"})
		require.NoError(t, err)
		_, err = configs.Put(config{ID: "e", On: true})
		require.NoError(t, err)
		time.Sleep(time.Minute)
		synctest.Wait()
		cancel()
		wg.Wait()

		slices.Sort(seen)
		seen = slices.Compact(seen)
		assert.Equal(t, []string{"a", "b", "c", "d", "e"}, seen)
	})
}

// TestLoop_LogsFailures: without an ErrorHandler, a failure is logged
// through Logger at Error level, with the key, and the stack of a panic.
func TestLoop_LogsFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		var bufMu sync.Mutex
		logger := slog.New(slog.NewJSONHandler(lockedWriter{&bufMu, &buf}, nil))
		calls := 0
		r := reconcile.Func[string](func(ctx context.Context, key string) (reconcile.Result, error) {
			calls++
			if calls == 1 {
				panic("boom")
			}
			return reconcile.Result{}, reconcile.Terminal(errors.New("no such thing"))
		})
		g := startRig(t, func(*rig) reconcile.Reconciler[string] { return r },
			reconcile.Options{Name: "logged", Logger: logger}, item{Name: "a"})
		time.Sleep(time.Minute)
		synctest.Wait()
		require.NoError(t, g.stop())

		bufMu.Lock()
		defer bufMu.Unlock()
		var records []map[string]any
		dec := json.NewDecoder(&buf)
		for dec.More() {
			var rec map[string]any
			require.NoError(t, dec.Decode(&rec))
			records = append(records, rec)
		}
		require.Len(t, records, 2)
		for _, rec := range records {
			assert.Equal(t, "ERROR", rec["level"])
			assert.Equal(t, "logged", rec["loop"])
			assert.Equal(t, "a", rec["key"])
		}
		assert.Equal(t, `panic (string): "boom"`, records[0]["err"])
		assert.Contains(t, records[0]["stack"], "watch_test.go", "the panic's stack")
		assert.Equal(t, false, records[0]["dropped"])
		assert.Equal(t, "no such thing", records[1]["err"])
		assert.Equal(t, true, records[1]["dropped"])
		assert.NotContains(t, records[1], "stack")
	})
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}
