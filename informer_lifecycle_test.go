package mirror_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/memsource"
	"github.com/listwatch/mirror/source"
)

func TestInformer_AddEventHandlerAfterRunReturnedFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, nil)
		f.src.Put(item{Name: "a", Val: 1})
		f.startRecording()
		f.stop()

		late := &recorder{}
		reg, err := f.inf.AddEventHandler(late, mirror.HandlerOptions{})
		require.ErrorIs(t, err, mirror.ErrStopped)
		assert.Nil(t, reg)
		synctest.Wait()
		assert.Empty(t, late.take(), "a handler refused is never called")
	})
}

// AddEventHandler refuses as soon as Run's context has ended, not only
// once Run has noticed: whether Run is watching or still loading its
// checkpoint, a handler added after the cancel would never be called.
func TestInformer_AddEventHandlerFailsOnceRunsContextHasEnded(t *testing.T) {
	for _, tt := range []struct {
		name string
		// start starts Run and returns its cancel, a function that lets
		// it go on, and the channel its result comes on.
		start func(t *testing.T) (*mirror.Informer[string, item], context.CancelFunc, func(), chan error)
	}{
		{"while watching", func(t *testing.T) (*mirror.Informer[string, item], context.CancelFunc, func(), chan error) {
			f := newFixture(t, nil)
			f.src.Put(item{Name: "a", Val: 1})
			f.startRecording()
			return f.inf, f.cancel, func() {}, f.done
		}},
		{"while loading a checkpoint", func(t *testing.T) (*mirror.Informer[string, item], context.CancelFunc, func(), chan error) {
			inf, cancel, release, done := loadingInformer(t, memsource.New(itemKey, memsource.Options{}), &errorLog{})
			return inf, cancel, release, done
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				inf, cancel, release, done := tt.start(t)
				cancel()
				late := &recorder{}
				reg, err := inf.AddEventHandler(late, mirror.HandlerOptions{})
				require.ErrorIs(t, err, mirror.ErrStopped)
				assert.Nil(t, reg)
				release()
				require.NoError(t, <-done)
				assert.Empty(t, late.take(), "a handler refused is never called")
			})
		})
	}
}

func TestInformer_RemoveEventHandlerActsOnlyOnItsOwnRegistrations(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, nil)
		other := newFixture(t, nil)
		rec := &recorder{}
		reg, err := f.inf.AddEventHandler(rec, mirror.HandlerOptions{})
		require.NoError(t, err)
		f.start()
		f.synced()

		require.Error(t, other.inf.RemoveEventHandler(reg), "another informer's registration")
		require.Error(t, other.inf.RemoveEventHandlerAndWait(t.Context(), reg))
		require.Error(t, f.inf.RemoveEventHandler(nil))
		f.src.Put(item{Name: "a", Val: 1})
		synctest.Wait()
		assert.Equal(t, []string{"add a=1 initial=false"}, rendered(rec.take()), "still registered with its own informer")

		require.NoError(t, f.inf.RemoveEventHandler(reg))
		require.NoError(t, f.inf.RemoveEventHandler(reg), "a second removal does nothing")
		require.NoError(t, f.inf.RemoveEventHandlerAndWait(t.Context(), reg))
		f.stop()
	})
}

// TestInformer_HandlersAddedAndRemovedWhileRunReturnsAreNeverCalledAfter
// races registration against shutdown, many times; run it with -race.
func TestInformer_HandlersAddedAndRemovedWhileRunReturnsAreNeverCalledAfter(t *testing.T) {
	rounds := 200
	if testing.Short() {
		rounds = 50
	}
	for round := range rounds {
		src := memsource.New(itemKey, memsource.Options{})
		for i := range 20 {
			src.Put(item{Name: fmt.Sprint(i), Val: i})
		}
		inf := mirror.NewInformer(src, mirror.InformerOptions[string, item]{KeyFunc: itemKey})
		var returned atomic.Bool
		var lateCalls atomic.Int64
		h := mirror.HandlerFuncs[item]{
			AddFunc: func(item, bool) {
				if returned.Load() {
					lateCalls.Add(1)
				}
			},
			UpdateFunc: func(item, item) {
				if returned.Load() {
					lateCalls.Add(1)
				}
			},
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() {
			err := inf.Run(ctx)
			returned.Store(true)
			done <- err
		}()

		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for i := range 10 {
					reg, err := inf.AddEventHandler(h, mirror.HandlerOptions{})
					if err != nil {
						assert.ErrorIs(t, err, mirror.ErrStopped)
						return
					}
					if i%2 == 0 {
						assert.NoError(t, inf.RemoveEventHandler(reg))
					}
				}
			})
		}
		wg.Go(func() {
			for i := range 50 {
				src.Put(item{Name: fmt.Sprint(i % 20), Val: round*100 + i})
			}
		})
		// Stop at a different point each round.
		for range round % 7 {
			runtime.Gosched()
		}
		cancel()
		require.NoError(t, <-done)
		wg.Wait()

		// After Run returned: registration fails, and nothing
		// that was registered is called any more.
		_, err := inf.AddEventHandler(h, mirror.HandlerOptions{})
		require.ErrorIs(t, err, mirror.ErrStopped)
		src.Put(item{Name: "after", Val: 1})
		require.Zero(t, lateCalls.Load(), "round %d: a handler was called after Run returned", round)
	}
}

// refusingSource fails every List with err until it is allowed to serve.
type refusingSource struct {
	*memsource.Source[item]
	err     error
	allowed atomic.Bool
	lists   atomic.Int64
}

func (s *refusingSource) List(ctx context.Context, opts source.ListOptions) (source.ListResult[item], error) {
	s.lists.Add(1)
	if !s.allowed.Load() {
		return source.ListResult[item]{}, s.err
	}
	return s.Source.List(ctx, opts)
}

func TestInformer_SourceThatRefusesForGoodEndsTheWaitForSync(t *testing.T) {
	errForbidden := fmt.Errorf("source: 403 forbidden: %w", mirror.ErrPermanent)
	synctest.Test(t, func(t *testing.T) {
		src := &refusingSource{Source: memsource.New(itemKey, memsource.Options{}), err: errForbidden}
		src.Put(item{Name: "a", Val: 1})
		f := newFixtureOver(t, func(*memsource.Source[item]) source.ListWatcher[item] { return src }, nil)
		reg, err := f.inf.AddEventHandler(&recorder{}, mirror.HandlerOptions{})
		require.NoError(t, err)
		f.start()

		for _, s := range []mirror.SyncWaiter{f.inf, reg} {
			err := mirror.WaitForCacheSync(t.Context(), s)
			require.ErrorIs(t, err, mirror.ErrPermanent)
			require.ErrorIs(t, err, errForbidden)
		}
		assert.EqualValues(t, 3, src.lists.Load(), "gives up after the default three refusals")
		require.ErrorIs(t, mirror.WaitForCacheSync(t.Context(), f.inf, reg), errForbidden, "together, the first refusal")
		assert.False(t, f.inf.HasSynced())

		// The Reflector keeps trying: once allowed, the informer syncs.
		src.allowed.Store(true)
		time.Sleep(time.Minute)
		synctest.Wait()
		require.True(t, f.inf.HasSynced())
		require.NoError(t, mirror.WaitForCacheSync(t.Context(), f.inf, reg))
		assert.Equal(t, map[string]int{"a": 1}, f.cacheState())
		f.stop()
	})
}

func TestInformer_TransientFailuresNeverEndTheWaitForSync(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := &refusingSource{Source: memsource.New(itemKey, memsource.Options{}),
			err: fmt.Errorf("source: no leader: %w", source.ErrUnavailable)}
		f := newFixtureOver(t, func(*memsource.Source[item]) source.ListWatcher[item] { return src },
			func(o *mirror.InformerOptions[string, item]) { o.SyncFailureLimit = 1 })
		f.start()

		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
		defer cancel()
		require.ErrorIs(t, mirror.WaitForCacheSync(ctx, f.inf), context.DeadlineExceeded)
		assert.Greater(t, src.lists.Load(), int64(10), "kept trying all along")
		f.stop()
	})
}

// lockedBuffer is a bytes.Buffer safe for concurrent writers.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestInformer_IsLoudByDefault changes slog's default logger: it must not
// run in parallel with other tests.
func TestInformer_IsLoudByDefault(t *testing.T) {
	logs := &lockedBuffer{}
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(logs, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })

	synctest.Test(t, func(t *testing.T) {
		src := memsource.New(itemKey, memsource.Options{})
		src.Put(item{Name: "a", Val: 1})
		// No Logger, no ErrorHandler.
		inf := mirror.NewInformer(src, mirror.InformerOptions[string, item]{Name: "items", KeyFunc: itemKey})
		_, err := inf.AddEventHandler(mirror.HandlerFuncs[item]{
			AddFunc: func(item, bool) { panic("handler bug") },
		}, mirror.HandlerOptions{Name: "audit"})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { done <- inf.Run(ctx) }()
		synctest.Wait()
		src.Put(item{Name: "b", Val: 1}) // panics again: logged once
		synctest.Wait()
		cancel()
		require.NoError(t, <-done)
	})
	out := logs.String()
	assert.Contains(t, out, "level=ERROR")
	assert.Contains(t, out, "informer=items")
	assert.Contains(t, out, "handler=audit")
	assert.Contains(t, out, "handler bug")
	assert.Contains(t, out, "goroutine", "the stack")
	assert.Equal(t, 1, strings.Count(out, "level=ERROR"), "the same panic again is left out for a while")
}
