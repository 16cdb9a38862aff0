package mirror_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
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

// item is the object type of the informer tests.
type item struct {
	Name  string
	Group string
	Val   int
	// Gen tells apart objects created one after the other under one
	// name, as etcd's CreateRevision or Kubernetes' UID do.
	Gen int
}

func itemKey(it item) (string, error) {
	if it.Name == "" {
		return "", errors.New("item has no name")
	}
	return it.Name, nil
}

// event is one handler call, as a recorder saw it.
type event struct {
	Op      string // add, update, delete
	Old     item
	Obj     item
	Initial bool // add: isInInitialList
	Unknown bool // delete: finalStateUnknown
}

func (e event) String() string {
	switch e.Op {
	case "add":
		return fmt.Sprintf("add %s=%d initial=%v", e.Obj.Name, e.Obj.Val, e.Initial)
	case "update":
		return fmt.Sprintf("update %s %d->%d", e.Obj.Name, e.Old.Val, e.Obj.Val)
	}
	return fmt.Sprintf("delete %s=%d unknown=%v", e.Obj.Name, e.Obj.Val, e.Unknown)
}

// recorder is a Handler that records every call.
type recorder struct {
	mu     sync.Mutex
	events []event
	gate   chan struct{} // if not nil, every call waits for a receive
}

func (r *recorder) wait() {
	if r.gate != nil {
		<-r.gate
	}
}

func (r *recorder) OnAdd(obj item, initial bool) {
	r.wait()
	r.record(event{Op: "add", Obj: obj, Initial: initial})
}

func (r *recorder) OnUpdate(old, obj item) {
	r.wait()
	r.record(event{Op: "update", Old: old, Obj: obj})
}

func (r *recorder) OnDelete(obj item, unknown bool) {
	r.wait()
	r.record(event{Op: "delete", Obj: obj, Unknown: unknown})
}

func (r *recorder) record(e event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

// take returns and forgets the recorded events.
func (r *recorder) take() []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	ev := r.events
	r.events = nil
	return ev
}

// strings renders events sorted, for comparisons where order across keys
// is not part of the contract.
func sorted(evs []event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.String()
	}
	slices.Sort(out)
	return out
}

func rendered(evs []event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.String()
	}
	return out
}

// fixture runs an informer over a memsource inside a synctest bubble.
type fixture struct {
	t      *testing.T
	src    *memsource.Source[item]
	inf    *mirror.Informer[string, item]
	errs   *errorLog
	cancel context.CancelFunc
	done   chan error
}

type errorLog struct {
	mu   sync.Mutex
	errs []error
}

func (l *errorLog) add(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, err)
}

func (l *errorLog) all() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.errs)
}

func newFixture(t *testing.T, configure func(*mirror.InformerOptions[string, item])) *fixture {
	return newFixtureOver(t, nil, configure)
}

// newFixtureOver is newFixture whose informer reads the memsource through
// wrap, if not nil.
func newFixtureOver(t *testing.T, wrap func(*memsource.Source[item]) source.ListWatcher[item], configure func(*mirror.InformerOptions[string, item])) *fixture {
	f := &fixture{t: t, src: memsource.New(itemKey, memsource.Options{}), errs: &errorLog{}}
	var lw source.ListWatcher[item] = f.src
	if wrap != nil {
		lw = wrap(f.src)
	}
	opts := mirror.InformerOptions[string, item]{
		KeyFunc:      itemKey,
		ErrorHandler: f.errs.add,
		Indexers: mirror.Indexers[item]{
			"group": func(it item) ([]string, error) { return []string{it.Group}, nil },
		},
	}
	if configure != nil {
		configure(&opts)
	}
	f.inf = mirror.NewInformer(lw, opts)
	return f
}

func (f *fixture) start() {
	ctx, cancel := context.WithCancel(f.t.Context())
	f.cancel = cancel
	f.done = make(chan error, 1)
	go func() { f.done <- f.inf.Run(ctx) }()
}

// stop cancels Run and checks that it returns; synctest.Test then checks
// that no goroutine it started is left.
func (f *fixture) stop() {
	f.cancel()
	require.NoError(f.t, <-f.done)
}

// startRecording registers a recorder, starts the informer, waits until
// it has synced and returns the recorder with the initial adds taken.
func (f *fixture) startRecording() *recorder {
	rec := &recorder{}
	_, err := f.inf.AddEventHandler(rec, mirror.HandlerOptions{})
	require.NoError(f.t, err)
	f.start()
	f.synced()
	rec.take()
	return rec
}

func (f *fixture) synced() {
	synctest.Wait()
	require.True(f.t, f.inf.HasSynced(), "informer not synced")
}

// missWhileDown has the informer miss what change does: its watch is cut
// and the next call fails, change runs, and the history is compacted up to
// the source's revision after it, so that only a relist can find out. It
// returns once fake time has passed any backoff and the informer is idle.
func (f *fixture) missWhileDown(change func()) {
	f.src.FailNext(1, fmt.Errorf("test: down: %w", source.ErrUnavailable))
	f.src.CutWatches()
	change()
	f.src.Compact(f.src.Revision())
	time.Sleep(time.Minute)
	synctest.Wait()
}

// cacheState returns the informer's cache as name → value.
func (f *fixture) cacheState() map[string]int {
	m := map[string]int{}
	for k, v := range f.inf.All() {
		m[k] = v.Val
	}
	return m
}

func (f *fixture) sourceState() map[string]int {
	m := map[string]int{}
	for k, v := range f.src.Snapshot() {
		m[k] = v.Val
	}
	return m
}

func TestInformer_AddsUpdatesDeletesReachCacheAndHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, nil)
		f.src.Put(item{Name: "a", Group: "x", Val: 1})
		rec := &recorder{}
		reg, err := f.inf.AddEventHandler(rec, mirror.HandlerOptions{})
		require.NoError(t, err)
		f.start()
		f.synced()
		require.True(t, reg.HasSynced())
		assert.Equal(t, []string{"add a=1 initial=true"}, rendered(rec.take()))

		f.src.Put(item{Name: "b", Group: "y", Val: 1})
		f.src.Put(item{Name: "a", Group: "x", Val: 2})
		f.src.Delete("b")
		synctest.Wait()
		// Order across keys is the in-order queue's promise, tested
		// on its own; DeltaFIFO groups by key.
		assert.Equal(t, []string{"add b=1 initial=false", "delete b=1 unknown=false", "update a 1->2"}, sorted(rec.take()))
		assert.Equal(t, map[string]int{"a": 2}, f.cacheState())
		got, ok := f.inf.GetByKey("a")
		require.True(t, ok)
		assert.Equal(t, 2, got.Val)
		f.stop()
	})
}

func TestInformer_RelistDeliversTombstonesForMissedDeletes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, func(o *mirror.InformerOptions[string, item]) {
			// With versions, a relisted object that did not change
			// (a) is a resync, not an update.
			o.ResourceVersion = func(it item) string { return strconv.Itoa(it.Val) }
		})
		for _, n := range []string{"a", "b", "c"} {
			f.src.Put(item{Name: n, Val: 1})
		}
		rec := f.startRecording()

		// While the watch is down, b is deleted and c changed, and
		// the history that would tell is compacted away: only a
		// relist can find out.
		f.missWhileDown(func() {
			f.src.Delete("b")
			f.src.Put(item{Name: "c", Val: 2})
		})

		assert.Equal(t, []string{"delete b=1 unknown=true", "update c 1->2"}, sorted(rec.take()))
		assert.Equal(t, f.sourceState(), f.cacheState())
		assert.GreaterOrEqual(t, f.inf.Stats().Reflector.Relists, int64(1))
		f.stop()
	})
}

func TestInformer_ResyncGoesOnlyToDueHandlers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, nil)
		f.src.Put(item{Name: "a", Val: 1})
		fast, slow, never := &recorder{}, &recorder{}, &recorder{}
		for h, period := range map[*recorder]time.Duration{fast: 10 * time.Second, slow: 30 * time.Second, never: -1} {
			_, err := f.inf.AddEventHandler(h, mirror.HandlerOptions{ResyncPeriod: period})
			require.NoError(t, err)
		}
		f.start()
		f.synced()
		for _, r := range []*recorder{fast, slow, never} {
			r.take()
		}
		time.Sleep(35 * time.Second)
		synctest.Wait()
		// 35 s: fast resynced at 10, 20, 30 s; slow at 30 s.
		assert.Equal(t, slices.Repeat([]string{"update a 1->1"}, 3), rendered(fast.take()))
		assert.Equal(t, []string{"update a 1->1"}, rendered(slow.take()))
		assert.Empty(t, never.take())
		f.stop()
	})
}

func TestInformer_LateHandlerReplaysCacheAsInitialAdds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, nil)
		f.src.Put(item{Name: "a", Val: 1})
		f.src.Put(item{Name: "b", Val: 1})
		f.start()
		f.synced()

		gate := make(chan struct{})
		late := &recorder{gate: gate}
		reg, err := f.inf.AddEventHandler(late, mirror.HandlerOptions{})
		require.NoError(t, err)
		synctest.Wait()
		assert.False(t, reg.HasSynced(), "synced before its replay was handled")
		gate <- struct{}{}
		gate <- struct{}{}
		synctest.Wait()
		assert.True(t, reg.HasSynced())
		require.NoError(t, reg.WaitForSync(t.Context()))
		assert.Equal(t, []string{"add a=1 initial=true", "add b=1 initial=true"}, sorted(late.take()))

		close(gate)
		f.src.Put(item{Name: "a", Val: 2})
		synctest.Wait()
		assert.Equal(t, []string{"update a 1->2"}, rendered(late.take()))
		f.stop()
	})
}

func TestInformer_RegistrationSyncsPerHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, nil)
		for i := range 3 {
			f.src.Put(item{Name: fmt.Sprint(i), Val: i})
		}
		quick := &recorder{}
		gate := make(chan struct{})
		stuck := &recorder{gate: gate}
		rq, err := f.inf.AddEventHandler(quick, mirror.HandlerOptions{})
		require.NoError(t, err)
		rs, err := f.inf.AddEventHandler(stuck, mirror.HandlerOptions{})
		require.NoError(t, err)
		assert.False(t, rq.HasSynced(), "synced before Run")
		f.start()
		f.synced()
		assert.True(t, rq.HasSynced())
		assert.False(t, rs.HasSynced())

		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		require.ErrorIs(t, mirror.WaitForCacheSync(ctx, f.inf, rq, rs), context.DeadlineExceeded)
		close(gate)
		require.NoError(t, mirror.WaitForCacheSync(t.Context(), f.inf, rq, rs))
		f.stop()
	})
}

func TestInformer_EmptyInitialListSyncs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, nil)
		reg, err := f.inf.AddEventHandler(&recorder{}, mirror.HandlerOptions{})
		require.NoError(t, err)
		f.start()
		require.NoError(t, mirror.WaitForCacheSync(t.Context(), f.inf, reg))
		f.stop()
	})
}

func TestInformer_RemovedHandlerGetsNothingMore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, nil)
		gate := make(chan struct{})
		gone := &recorder{gate: gate}
		stays := &recorder{}
		reg, err := f.inf.AddEventHandler(gone, mirror.HandlerOptions{})
		require.NoError(t, err)
		_, err = f.inf.AddEventHandler(stays, mirror.HandlerOptions{})
		require.NoError(t, err)
		f.start()
		f.synced()

		f.src.Put(item{Name: "a", Val: 1})
		f.src.Put(item{Name: "a", Val: 2})
		synctest.Wait() // gone is inside OnAdd, waiting on gate

		removed := make(chan error, 1)
		go func() { removed <- f.inf.RemoveEventHandlerAndWait(t.Context(), reg) }()
		synctest.Wait()
		select {
		case <-removed:
			t.Fatal("RemoveEventHandlerAndWait returned while the handler was still running")
		default:
		}
		close(gate)
		require.NoError(t, <-removed)

		f.src.Put(item{Name: "a", Val: 3})
		synctest.Wait()
		assert.Equal(t, []string{"add a=1 initial=false"}, rendered(gone.take()), "the call in progress finishes; nothing after")
		assert.Equal(t, []string{"add a=1 initial=false", "update a 1->2", "update a 2->3"}, rendered(stays.take()))
		require.NoError(t, f.inf.RemoveEventHandler(reg), "removing twice does nothing, as in client-go")
		f.stop()
	})
}

func TestInformer_TransformRunsBeforeCacheAndHandlers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, func(o *mirror.InformerOptions[string, item]) {
			o.Transform = func(it item) (item, error) {
				it.Val *= 10
				return it, nil
			}
		})
		f.src.Put(item{Name: "a", Val: 1})
		rec := &recorder{}
		_, err := f.inf.AddEventHandler(rec, mirror.HandlerOptions{})
		require.NoError(t, err)
		f.start()
		f.synced()
		f.src.Put(item{Name: "a", Val: 2})
		synctest.Wait()
		assert.Equal(t, []string{"add a=10 initial=true", "update a 10->20"}, rendered(rec.take()))
		assert.Equal(t, map[string]int{"a": 20}, f.cacheState())
		f.stop()
	})
}

func TestInformer_IndexesFollowChanges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, nil)
		f.src.Put(item{Name: "a", Group: "x"})
		f.src.Put(item{Name: "b", Group: "x"})
		f.start()
		f.synced()
		f.src.Put(item{Name: "b", Group: "y"})
		f.src.Put(item{Name: "c", Group: "y"})
		synctest.Wait()
		keys, err := f.inf.IndexKeys("group", "x")
		require.NoError(t, err)
		assert.Equal(t, []string{"a"}, keys)
		objs, err := f.inf.ByIndex("group", "y")
		require.NoError(t, err)
		names := []string{}
		for _, o := range objs {
			names = append(names, o.Name)
		}
		slices.Sort(names)
		assert.Equal(t, []string{"b", "c"}, names)
		f.stop()
	})
}

func TestInformer_InOrderQueueDeliversInSourceOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, nil)
		rec := &recorder{}
		_, err := f.inf.AddEventHandler(rec, mirror.HandlerOptions{})
		require.NoError(t, err)
		f.start()
		f.synced()

		// Interleave changes to many keys; a per-key queue would group
		// them by key.
		var want []string
		vals := map[string]int{}
		for i := range 2000 {
			name := fmt.Sprintf("k%02d", (i*7)%50)
			old, seen := vals[name]
			vals[name] = i
			f.src.Put(item{Name: name, Val: i})
			if seen {
				want = append(want, fmt.Sprintf("update %s %d->%d", name, old, i))
			} else {
				want = append(want, fmt.Sprintf("add %s=%d initial=false", name, i))
			}
			if i%97 == 0 {
				f.src.Delete(name)
				delete(vals, name)
				want = append(want, fmt.Sprintf("delete %s=%d unknown=false", name, i))
			}
		}
		synctest.Wait()
		assert.Equal(t, want, rendered(rec.take()))
		f.stop()
	})
}

func TestInformer_StalledHandlerIsBoundedByKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const keys, events = 1000, 100_000
		f := newFixture(t, nil)
		gate := make(chan struct{})
		var stalledMu sync.Mutex
		stalledSeen := map[string]int{}
		stalled := mirror.HandlerFuncs[item]{
			AddFunc: func(obj item, _ bool) {
				<-gate
				stalledMu.Lock()
				stalledSeen[obj.Name] = obj.Val
				stalledMu.Unlock()
			},
			UpdateFunc: func(_, obj item) {
				<-gate
				stalledMu.Lock()
				stalledSeen[obj.Name] = obj.Val
				stalledMu.Unlock()
			},
			DeleteFunc: func(obj item, _ bool) {
				<-gate
				stalledMu.Lock()
				delete(stalledSeen, obj.Name)
				stalledMu.Unlock()
			},
		}
		var quickCount atomic.Int64
		quick := mirror.HandlerFuncs[item]{
			AddFunc:    func(item, bool) { quickCount.Add(1) },
			UpdateFunc: func(_, _ item) { quickCount.Add(1) },
			DeleteFunc: func(item, bool) { quickCount.Add(1) },
		}
		rs, err := f.inf.AddEventHandler(stalled, mirror.HandlerOptions{MaxBacklog: 100})
		require.NoError(t, err)
		_, err = f.inf.AddEventHandler(quick, mirror.HandlerOptions{})
		require.NoError(t, err)
		f.start()
		f.synced()

		maxBacklog, notifications := 0, 0
		want := map[string]int{}
		for i := range events {
			name := fmt.Sprintf("k%04d", i%keys)
			if i%7 == 3 {
				if _, ok := want[name]; ok {
					notifications++
				}
				f.src.Delete(name)
				delete(want, name)
			} else {
				f.src.Put(item{Name: name, Val: i})
				want[name] = i
				notifications++
			}
			if i%1000 == 999 {
				synctest.Wait()
				maxBacklog = max(maxBacklog, rs.Backlog())
			}
		}
		synctest.Wait()
		// The other handler kept pace with every event.
		assert.Equal(t, int64(notifications), quickCount.Load())
		assert.LessOrEqual(t, maxBacklog, keys, "stalled handler's backlog grew past the number of keys")
		assert.Greater(t, maxBacklog, 100, "the handler was not behind at all")

		close(gate)
		synctest.Wait()
		stalledMu.Lock()
		assert.Equal(t, want, stalledSeen, "the stalled handler did not end at the final state of every key")
		stalledMu.Unlock()
		assert.Zero(t, rs.Backlog())
		f.stop()
	})
}

func TestInformer_PanickingHandlerIsReportedAndOthersGoOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, nil)
		bad := mirror.HandlerFuncs[item]{AddFunc: func(obj item, _ bool) { panic("boom " + obj.Name) }}
		good := &recorder{}
		_, err := f.inf.AddEventHandler(bad, mirror.HandlerOptions{})
		require.NoError(t, err)
		_, err = f.inf.AddEventHandler(good, mirror.HandlerOptions{})
		require.NoError(t, err)
		f.start()
		f.synced()
		f.src.Put(item{Name: "a"})
		f.src.Put(item{Name: "b"})
		synctest.Wait()
		assert.Len(t, good.take(), 2)
		var panics []string
		for _, err := range f.errs.all() {
			var pe *mirror.HandlerPanicError
			if errors.As(err, &pe) {
				panics = append(panics, fmt.Sprint(pe.Value))
				assert.NotEmpty(t, pe.Stack)
			}
		}
		assert.Equal(t, []string{"boom a", "boom b"}, panics)
		f.stop()
	})
}

func TestInformer_FailingKeyFunctionSkipsOnlyThatObject(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, func(o *mirror.InformerOptions[string, item]) {
			o.KeyFunc = func(it item) (string, error) {
				if it.Group == "bad" {
					return "", errors.New("bad group")
				}
				return it.Name, nil
			}
		})
		f.src.Put(item{Name: "a"})
		f.src.Put(item{Name: "b", Group: "bad"})
		f.start()
		f.synced()
		f.src.Put(item{Name: "c", Group: "bad"})
		f.src.Put(item{Name: "d"})
		synctest.Wait()
		assert.Equal(t, map[string]int{"a": 0, "d": 0}, f.cacheState())
		var keyErrs int
		for _, err := range f.errs.all() {
			var ke *mirror.KeyError
			if errors.As(err, &ke) {
				keyErrs++
			}
		}
		assert.Equal(t, 2, keyErrs)
		f.stop()
	})
}

func TestInformer_FailingTransformLeavesTheChangeOutButNeverADeletion(t *testing.T) {
	errNegative := errors.New("negative")
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, func(o *mirror.InformerOptions[string, item]) {
			o.Transform = func(it item) (item, error) {
				if it.Val < 0 {
					return it, errNegative
				}
				return it, nil
			}
		})
		for i, n := range []string{"a", "b", "c"} {
			f.src.Put(item{Name: n, Val: i + 1})
		}
		rec := f.startRecording()

		// An update that fails leaves the cache as it was; the deletion
		// that follows carries b's failing state, and still deletes.
		f.src.Put(item{Name: "a", Val: -1})
		f.src.Put(item{Name: "b", Val: -2})
		f.src.Delete("b")
		synctest.Wait()
		assert.Equal(t, []string{"delete b=2 unknown=false"}, rendered(rec.take()))
		assert.Equal(t, map[string]int{"a": 1, "c": 3}, f.cacheState())

		// A relist that lists a and c in states that fail keeps what the
		// cache holds for them: they are not gone.
		f.missWhileDown(func() { f.src.Put(item{Name: "c", Val: -3}) })
		assert.Empty(t, rendered(rec.take()))
		assert.Equal(t, map[string]int{"a": 1, "c": 3}, f.cacheState())

		var failed int
		for _, err := range f.errs.all() {
			if errors.Is(err, errNegative) {
				failed++
			}
		}
		assert.Equal(t, 4, failed, "a's and b's updates, b's deletion, and the relist (a and c, reported together)")
		f.stop()
	})
}

func TestInformer_ListReadInPagesIsAppliedWhole(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, func(o *mirror.InformerOptions[string, item]) {
			o.ListWatch.PageSize = 2
			o.KeyFunc = func(it item) (string, error) {
				if it.Group == "bad" {
					return "", errors.New("bad group")
				}
				return it.Name, nil
			}
			o.Transform = func(it item) (item, error) {
				it.Val *= 10
				return it, nil
			}
		})
		for i, n := range []string{"a", "b", "c", "d", "e"} {
			it := item{Name: n, Val: i + 1}
			if n == "c" {
				it.Group = "bad"
			}
			f.src.Put(it)
		}
		rec := &recorder{}
		_, err := f.inf.AddEventHandler(rec, mirror.HandlerOptions{})
		require.NoError(t, err)
		f.start()
		f.synced()
		assert.Equal(t, []string{
			"add a=10 initial=true", "add b=20 initial=true", "add d=40 initial=true", "add e=50 initial=true",
		}, rendered(rec.take()))

		// A relist, read in pages too, applies only what changed.
		f.missWhileDown(func() {
			f.src.Delete("b")
			f.src.Put(item{Name: "d", Val: 6})
		})
		assert.Equal(t, []string{
			"delete b=20 unknown=true", "update a 10->10", "update d 40->60", "update e 50->50",
		}, sorted(rec.take()))
		assert.Equal(t, map[string]int{"a": 10, "d": 60, "e": 50}, f.cacheState())
		var keyErrs int
		for _, err := range f.errs.all() {
			var ke *mirror.KeyError
			if errors.As(err, &ke) {
				keyErrs++
			}
		}
		assert.Equal(t, 2, keyErrs, "c, on each list")
		f.stop()
	})
}

func TestInformer_RunTwiceFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, nil)
		f.start()
		f.synced()
		require.ErrorIs(t, f.inf.Run(t.Context()), mirror.ErrStarted)
		f.stop()
	})
}

// TestInformer_RelistDuringApplyLosesAndResurrectsNothing holds the
// in-order queue's consumer inside a batch (its index function blocks)
// while a relist arrives: the queue's lock is free then, so the relist is
// queued behind the batch and diffed against a cache that includes it.
// A relist diffed against the cache as it was before the batch would
// delete b and resurrect nothing it should not; here b stays, a and c get
// exactly one delete each.
func TestInformer_RelistDuringApplyLosesAndResurrectsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gate := make(chan struct{})
		f := newFixture(t, func(o *mirror.InformerOptions[string, item]) {
			o.ResourceVersion = func(it item) string { return strconv.Itoa(it.Val) }
			o.Indexers["gate"] = func(it item) ([]string, error) {
				if it.Group == "slow" {
					<-gate
				}
				return nil, nil
			}
		})
		f.src.Put(item{Name: "a", Val: 1})
		f.src.Put(item{Name: "c", Val: 1})
		rec := &recorder{}
		_, err := f.inf.AddEventHandler(rec, mirror.HandlerOptions{})
		require.NoError(t, err)
		f.start()
		f.synced()
		rec.take()

		f.src.Put(item{Name: "b", Group: "slow", Val: 1})
		f.src.Delete("c")
		synctest.Wait() // the consumer is inside the batch holding b (and c's delete)

		// Missed while disconnected: a is deleted, and compaction forces
		// a relist, which lands in the queue while the batch is applied.
		f.src.CutWatches()
		f.src.Compact(f.src.Revision())
		f.src.Delete("a")
		f.src.Compact(f.src.Revision())
		time.Sleep(time.Minute) // fake time: past any backoff
		synctest.Wait()
		require.GreaterOrEqual(t, f.inf.Stats().Reflector.Relists, int64(1), "no relist happened")

		close(gate)
		synctest.Wait()
		assert.Equal(t, []string{"add b=1 initial=false", "delete a=1 unknown=true", "delete c=1 unknown=false"}, sorted(rec.take()))
		assert.Equal(t, f.sourceState(), f.cacheState())
		f.stop()
	})
}

// keyOnlyDeletes is a source whose deletions carry the key alone, marked
// KeyOnly, as the etcd adapter's do by default.
type keyOnlyDeletes struct{ *memsource.Source[item] }

func (s keyOnlyDeletes) Watch(ctx context.Context, opts source.WatchOptions) (source.Watcher[item], error) {
	w, err := s.Source.Watch(ctx, opts)
	if err != nil {
		return nil, err
	}
	return keyOnlyWatcher{w}, nil
}

type keyOnlyWatcher struct{ source.Watcher[item] }

func (w keyOnlyWatcher) Next(ctx context.Context) (source.Event[item], error) {
	ev, err := w.Watcher.Next(ctx)
	if ev.Type == source.Deleted {
		ev.Object, ev.KeyOnly = item{Name: ev.Object.Name}, true
	}
	return ev, err
}

func TestInformer_KeyOnlyDeletionReachesHandlersWithTheLastStateApplied(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		wrap := func(src *memsource.Source[item]) source.ListWatcher[item] { return keyOnlyDeletes{src} }
		f := newFixtureOver(t, wrap, func(o *mirror.InformerOptions[string, item]) {
			o.Transform = func(it item) (item, error) {
				it.Group = "t-" + it.Group
				return it, nil
			}
		})
		f.src.Put(item{Name: "listed", Group: "x", Val: 1})
		f.src.Put(item{Name: "changed", Group: "x", Val: 1})
		rec := f.startRecording()

		f.src.Put(item{Name: "changed", Group: "y", Val: 2})
		f.src.Put(item{Name: "watched", Group: "z", Val: 3})
		synctest.Wait() // applied before the deletions are queued
		f.src.Put(item{Name: "queued", Group: "q", Val: 4})
		for _, n := range []string{"listed", "changed", "watched", "queued"} {
			f.src.Delete(n)
		}
		synctest.Wait()

		var deletes []event
		for _, e := range rec.take() {
			if e.Op == "delete" {
				deletes = append(deletes, e)
			}
		}
		// Each carries the state last applied (transformed, as it was
		// cached), observed: not a key alone, not a tombstone.
		assert.ElementsMatch(t, []event{
			{Op: "delete", Obj: item{Name: "listed", Group: "t-x", Val: 1}},
			{Op: "delete", Obj: item{Name: "changed", Group: "t-y", Val: 2}},
			{Op: "delete", Obj: item{Name: "watched", Group: "t-z", Val: 3}},
			{Op: "delete", Obj: item{Name: "queued", Group: "t-q", Val: 4}},
		}, deletes)
		assert.Empty(t, f.cacheState())
		assert.Empty(t, f.errs.all())
		f.stop()
	})
}
