package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
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
	"github.com/listwatch/mirror/workqueue"
)

type item struct {
	Name string
	Val  int
}

func itemKey(i item) (string, error) { return i.Name, nil }

// rig is a memsource, a running informer over it and a loop watching it.
type rig struct {
	src  *memsource.Source[item]
	inf  *mirror.Informer[string, item]
	loop *reconcile.Loop[string]
	reg  *mirror.Registration

	stopLoop, stopInf context.CancelFunc
	loopDone          chan error
	infDone           chan struct{}
}

// startRig runs an informer over a source holding objs and a loop watching
// it, of the reconciler mk returns, which may use the rig. The returned
// rig's stop ends both.
func startRig(t *testing.T, mk func(g *rig) reconcile.Reconciler[string], opts reconcile.Options, objs ...item) *rig {
	t.Helper()
	src := memsource.New(itemKey, memsource.Options{})
	for _, o := range objs {
		_, err := src.Put(o)
		require.NoError(t, err)
	}
	g := &rig{
		src:      src,
		inf:      mirror.NewInformer(src, mirror.InformerOptions[string, item]{KeyFunc: itemKey}),
		loopDone: make(chan error, 1),
		infDone:  make(chan struct{}),
	}
	g.loop = reconcile.New(mk(g), opts)
	var err error
	g.reg, err = reconcile.Watch(g.loop, g.inf, mirror.HandlerOptions{})
	require.NoError(t, err)
	var infCtx, loopCtx context.Context
	infCtx, g.stopInf = context.WithCancel(t.Context())
	loopCtx, g.stopLoop = context.WithCancel(t.Context())
	go func() {
		_ = g.inf.Run(infCtx)
		close(g.infDone)
	}()
	go func() { g.loopDone <- g.loop.Run(loopCtx) }()
	return g
}

// stop ends the loop, then the informer, and returns the loop's Run's
// error.
func (g *rig) stop() error {
	g.stopLoop()
	err := <-g.loopDone
	g.stopInf()
	<-g.infDone
	return err
}

func (g *rig) put(t *testing.T, o item) {
	t.Helper()
	_, err := g.src.Put(o)
	require.NoError(t, err)
}

// errorLog collects what a loop reports.
type errorLog struct {
	mu   sync.Mutex
	errs []error
}

func (l *errorLog) handle(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, err)
}

func (l *errorLog) all() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.errs)
}

// TestLoop_LiveChangeGoesAheadOfInitialList: with one worker and a
// backlog of initial-list keys, a key changed live is reconciled next, not
// after the backlog; a loop that ranks every origin alike (as client-go's
// FIFO does) reconciles it last.
func TestLoop_LiveChangeGoesAheadOfInitialList(t *testing.T) {
	const backlog = 50
	tests := []struct {
		name     string
		priority func(mirror.Origin) workqueue.Priority
		wantPos  int
	}{
		{name: "origin priorities", wantPos: 1},
		{
			name:     "one priority for all",
			priority: func(mirror.Origin) workqueue.Priority { return workqueue.PriorityLive },
			wantPos:  backlog,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var objs []item
				for i := range backlog {
					objs = append(objs, item{Name: fmt.Sprintf("k%03d", i)})
				}
				var mu sync.Mutex
				var order []string
				all := make(chan struct{})
				mk := func(g *rig) reconcile.Reconciler[string] {
					return reconcile.Func[string](func(ctx context.Context, key string) (reconcile.Result, error) {
						mu.Lock()
						order = append(order, key)
						n := len(order)
						mu.Unlock()
						if n == 1 {
							// The live change arrives while the backlog waits.
							g.put(t, item{Name: "live", Val: 1})
							synctest.Wait()
						}
						if n == backlog+1 {
							close(all)
						}
						return reconcile.Result{}, nil
					})
				}
				g := startRig(t, mk, reconcile.Options{Workers: 1, Priority: tt.priority}, objs...)
				<-all
				require.NoError(t, g.stop())
				assert.Equal(t, tt.wantPos, slices.Index(order, "live"), "position of the live key in %v", order)
			})
		})
	}
}

// step is what a scripted Reconcile does on one call.
type step struct {
	res    reconcile.Result
	err    error
	panic  any
	change bool // change the key during the call, so it is queued again at Done
}

var errFlaky = errors.New("flaky")

// TestLoop_Outcomes pins what the loop does with each outcome of
// Reconcile: an error retries after the key's backoff (the queue's
// AddRateLimited), a success forgets the retries, RequeueAfter reconciles
// again after the delay, a terminal error is reported and dropped, a
// panic is reported with its stack and retried.
func TestLoop_Outcomes(t *testing.T) {
	const base = workqueue.DefaultBaseDelay
	tests := []struct {
		name         string
		script       []step
		wantRequeues []int           // NumRequeues seen by each call
		wantGaps     []time.Duration // the least time between calls; less than twice it
		wantReported int
		wantDropped  bool // the last error reported dropped the key
		check        func(t *testing.T, err error)
	}{
		{
			name:         "an error retries after the key's backoff",
			script:       []step{{err: errFlaky}, {err: errFlaky}, {}},
			wantRequeues: []int{0, 1, 2},
			wantGaps:     []time.Duration{base, 2 * base},
			wantReported: 2,
			check:        func(t *testing.T, err error) { assert.ErrorIs(t, err, errFlaky) },
		},
		{
			name:         "a success forgets the retries",
			script:       []step{{err: errFlaky}, {change: true}, {}},
			wantRequeues: []int{0, 1, 0},
			wantGaps:     []time.Duration{base, 0},
			wantReported: 1,
		},
		{
			name:         "RequeueAfter reconciles again after the delay",
			script:       []step{{res: reconcile.Result{RequeueAfter: time.Minute}}, {}},
			wantRequeues: []int{0, 0},
			wantGaps:     []time.Duration{time.Minute},
		},
		{
			name:         "an error wins over RequeueAfter",
			script:       []step{{res: reconcile.Result{RequeueAfter: time.Hour}, err: errFlaky}, {}},
			wantRequeues: []int{0, 1},
			wantGaps:     []time.Duration{base},
			wantReported: 1,
		},
		{
			name:         "a Terminal error is reported and dropped",
			script:       []step{{err: reconcile.Terminal(errFlaky)}},
			wantRequeues: []int{0},
			wantReported: 1,
			wantDropped:  true,
			check: func(t *testing.T, err error) {
				assert.ErrorIs(t, err, errFlaky)
				assert.ErrorIs(t, err, reconcile.ErrTerminal)
			},
		},
		{
			name:         "an error wrapping ErrTerminal is dropped",
			script:       []step{{err: fmt.Errorf("bad spec: %w", reconcile.ErrTerminal)}},
			wantRequeues: []int{0},
			wantReported: 1,
			wantDropped:  true,
		},
		{
			name:         "a terminal error forgets the retries",
			script:       []step{{err: errFlaky}, {err: reconcile.Terminal(errFlaky), change: true}, {}},
			wantRequeues: []int{0, 1, 0},
			wantGaps:     []time.Duration{base, 0},
			wantReported: 2,
			wantDropped:  true,
		},
		{
			name:         "a source's refusal is retried",
			script:       []step{{err: fmt.Errorf("read: %w", mirror.ErrPermanent)}, {}},
			wantRequeues: []int{0, 1},
			wantGaps:     []time.Duration{base},
			wantReported: 1,
		},
		{
			name:         "a panic is reported with its stack and retried",
			script:       []step{{panic: "boom"}, {}},
			wantRequeues: []int{0, 1},
			wantGaps:     []time.Duration{base},
			wantReported: 1,
			check: func(t *testing.T, err error) {
				var p *mirror.PanicError
				require.ErrorAs(t, err, &p)
				assert.Equal(t, "boom", p.Value)
				assert.Contains(t, string(p.Stack), "reconcile_test.TestLoop_Outcomes", "the stack shows the panic")
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var mu sync.Mutex
				var times []time.Time
				var requeues []int
				mk := func(g *rig) reconcile.Reconciler[string] {
					return reconcile.Func[string](func(ctx context.Context, key string) (reconcile.Result, error) {
						mu.Lock()
						n := len(times)
						times = append(times, time.Now())
						requeues = append(requeues, g.loop.Queue().NumRequeues(key))
						mu.Unlock()
						if n >= len(tt.script) {
							return reconcile.Result{}, nil // counted as one call too many
						}
						s := tt.script[n]
						if s.change {
							g.put(t, item{Name: key, Val: n + 1})
							synctest.Wait() // the change is queued
						}
						if s.panic != nil {
							panic(s.panic)
						}
						return s.res, s.err
					})
				}
				var errs errorLog
				g := startRig(t, mk, reconcile.Options{Name: "test", ErrorHandler: errs.handle}, item{Name: "a"})
				time.Sleep(3 * time.Hour) // every delay has passed, many times over
				synctest.Wait()
				require.NoError(t, g.stop())

				assert.Equal(t, tt.wantRequeues, requeues, "NumRequeues seen by each call")
				for i, want := range tt.wantGaps {
					if i+1 >= len(times) {
						break
					}
					gap := times[i+1].Sub(times[i])
					assert.GreaterOrEqual(t, gap, want, "between calls %d and %d", i, i+1)
					if want > 0 {
						assert.Less(t, gap, 2*want, "between calls %d and %d", i, i+1)
					}
				}
				reported := errs.all()
				require.Len(t, reported, tt.wantReported)
				if len(reported) == 0 {
					return
				}
				last := reported[len(reported)-1]
				var e *reconcile.Error[string]
				require.ErrorAs(t, last, &e)
				assert.Equal(t, "a", e.Key)
				assert.Equal(t, "test", e.Loop)
				assert.Equal(t, tt.wantDropped, e.Dropped)
				if tt.check != nil {
					tt.check(t, last)
				}
			})
		})
	}
}

// TestLoop_KeyNeverReconciledByTwoWorkersAtOnce: four workers, changes to
// three keys at random moments, and Reconcile calls of random length: no
// key is in two calls at once, and each key's last state is reconciled.
func TestLoop_KeyNeverReconciledByTwoWorkersAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		keys := []string{"a", "b", "c"}
		rng := rand.New(rand.NewPCG(1, 2))
		var rngMu sync.Mutex
		jitter := func(n int) time.Duration {
			rngMu.Lock()
			defer rngMu.Unlock()
			return time.Duration(rng.IntN(n)) * time.Millisecond
		}
		var mu sync.Mutex
		inFlight := map[string]bool{}
		lastSeen := map[string]int{}
		var overlaps []string
		calls := 0
		mk := func(g *rig) reconcile.Reconciler[string] {
			return reconcile.Func[string](func(ctx context.Context, key string) (reconcile.Result, error) {
				mu.Lock()
				if inFlight[key] {
					overlaps = append(overlaps, key)
				}
				inFlight[key] = true
				calls++
				mu.Unlock()
				obj, _ := g.inf.GetByKey(key)
				time.Sleep(jitter(5))
				mu.Lock()
				inFlight[key] = false
				lastSeen[key] = obj.Val
				mu.Unlock()
				return reconcile.Result{}, nil
			})
		}
		var objs []item
		for _, k := range keys {
			objs = append(objs, item{Name: k})
		}
		g := startRig(t, mk, reconcile.Options{Workers: 4}, objs...)
		last := map[string]int{}
		for i := range 300 {
			k := keys[i%len(keys)]
			if i%7 == 0 {
				k = keys[0] // one key changes more often than the others
			}
			last[k] = i + 1
			g.put(t, item{Name: k, Val: i + 1})
			time.Sleep(jitter(3))
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		require.NoError(t, g.stop())
		assert.Empty(t, overlaps, "keys reconciled by two workers at once")
		assert.Equal(t, last, lastSeen, "each key's last state was reconciled")
		assert.Greater(t, calls, 2*len(keys), "the workers overlapped on some keys' changes")
	})
}

// TestLoop_CancelStopsCleanly: when ctx ends, Run returns nil once the
// calls of Reconcile in progress have returned, with the queue shut down
// and its handler removed from the informer, and no goroutine of its own
// left (the bubble ends).
func TestLoop_CancelStopsCleanly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		started := make(chan string, 2)
		var mu sync.Mutex
		returned := 0
		r := reconcile.Func[string](func(ctx context.Context, key string) (reconcile.Result, error) {
			started <- key
			<-ctx.Done()
			time.Sleep(time.Second) // slow to notice
			mu.Lock()
			returned++
			mu.Unlock()
			return reconcile.Result{}, ctx.Err()
		})
		var errs errorLog
		g := startRig(t, func(*rig) reconcile.Reconciler[string] { return r }, reconcile.Options{Workers: 2, ErrorHandler: errs.handle},
			item{Name: "a"}, item{Name: "b"}, item{Name: "c"})
		<-started
		<-started
		require.Len(t, g.inf.Stats().Handlers, 1)

		g.stopLoop()
		require.NoError(t, <-g.loopDone)
		mu.Lock()
		assert.Equal(t, 2, returned, "Reconcile calls returned before Run")
		mu.Unlock()
		assert.Empty(t, errs.all(), "a Reconcile ended by the loop's stop is not a failure")
		_, err := g.loop.Queue().Get(context.Background())
		assert.ErrorIs(t, err, workqueue.ErrShutdown)
		assert.Empty(t, g.inf.Stats().Handlers, "the loop's handler is removed")

		g.put(t, item{Name: "d"}) // the informer runs on, without the loop
		synctest.Wait()
		assert.Zero(t, g.loop.Queue().Len())
		g.stopInf()
		<-g.infDone
	})
}

// TestLoop_StopBeforeSync: a loop whose informers have not synced when
// ctx ends returns nil without reconciling anything.
func TestLoop_StopBeforeSync(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := memsource.New(itemKey, memsource.Options{})
		inf := mirror.NewInformer(src, mirror.InformerOptions[string, item]{KeyFunc: itemKey})
		loop := reconcile.New(reconcile.Func[string](func(context.Context, string) (reconcile.Result, error) {
			t.Error("Reconcile called")
			return reconcile.Result{}, nil
		}), reconcile.Options{})
		_, err := reconcile.Watch(loop, inf, mirror.HandlerOptions{})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { done <- loop.Run(ctx) }() // the informer never runs
		synctest.Wait()
		cancel()
		require.NoError(t, <-done)
		assert.Empty(t, inf.Stats().Handlers)
	})
}

// TestLoop_RunReturnsSyncFailure: an informer whose source refuses it
// for good before its first sync makes Run return that refusal.
func TestLoop_RunReturnsSyncFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := memsource.New(itemKey, memsource.Options{})
		src.FailNext(1000, fmt.Errorf("denied: %w", mirror.ErrPermanent))
		inf := mirror.NewInformer(src, mirror.InformerOptions[string, item]{
			KeyFunc:      itemKey,
			ErrorHandler: func(error) {},
		})
		loop := reconcile.New(reconcile.Func[string](func(context.Context, string) (reconcile.Result, error) {
			t.Error("Reconcile called")
			return reconcile.Result{}, nil
		}), reconcile.Options{Name: "refused"})
		_, err := reconcile.Watch(loop, inf, mirror.HandlerOptions{})
		require.NoError(t, err)
		// Bounded, so that a loop that does not wait for the sync fails
		// rather than hangs.
		ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
		infDone := make(chan struct{})
		go func() {
			_ = inf.Run(ctx)
			close(infDone)
		}()
		err = loop.Run(ctx)
		require.ErrorIs(t, err, mirror.ErrPermanent)
		assert.Empty(t, inf.Stats().Handlers)
		cancel()
		<-infDone
	})
}

// TestLoop_RunsOnce: Run and Watch after Run return ErrStarted.
func TestLoop_RunsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		loop := reconcile.New(reconcile.Func[string](func(context.Context, string) (reconcile.Result, error) {
			return reconcile.Result{}, nil
		}), reconcile.Options{})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { done <- loop.Run(ctx) }()
		synctest.Wait()
		assert.ErrorIs(t, loop.Run(ctx), reconcile.ErrStarted)
		inf := mirror.NewInformer(memsource.New(itemKey, memsource.Options{}), mirror.InformerOptions[string, item]{KeyFunc: itemKey})
		_, err := reconcile.Watch(loop, inf, mirror.HandlerOptions{})
		assert.ErrorIs(t, err, reconcile.ErrStarted)
		cancel()
		require.NoError(t, <-done)
		assert.ErrorIs(t, loop.Run(t.Context()), reconcile.ErrStarted)
	})
}
