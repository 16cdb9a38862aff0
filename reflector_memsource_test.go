package mirror_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/memsource"
	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// These tests run a Reflector against memsource, a real versioned source,
// with the faults a remote source has: cut watches, failing calls and
// compacted history.

type kv struct {
	Key string
	Val int
}

func kvKey(o kv) (string, error) { return o.Key, nil }

var (
	errSourceDown = fmt.Errorf("test: source down: %w", source.ErrUnavailable)
	errSourceBoom = errors.New("test: boom")
)

// modelStore applies what a Reflector hands it the way a DeltaFIFO feeding
// an informer's cache would: Add, Update and Delete change one key, and
// Replace removes every key the list lacks, as a tombstone. It also notes
// every call that does not fit its content (an Add of a key it holds, an
// Update or Delete of one it lacks): with correct resource versions there
// are none.
type modelStore struct {
	mu       sync.Mutex
	items    map[string]kv
	removals map[string]int // per key: real deletes and tombstones
	deletes  int
	tombs    int
	stray    []string
}

func newModelStore() *modelStore {
	return &modelStore{items: map[string]kv{}, removals: map[string]int{}}
}

func (m *modelStore) Add(o kv) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.items[o.Key]; ok {
		m.stray = append(m.stray, "add of present "+o.Key)
	}
	m.items[o.Key] = o
	return nil
}

func (m *modelStore) Update(o kv) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.items[o.Key]; !ok {
		m.stray = append(m.stray, "update of absent "+o.Key)
	}
	m.items[o.Key] = o
	return nil
}

func (m *modelStore) Delete(o kv) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.items[o.Key]; !ok {
		// A DeltaFIFO would drop it; that it came at all means a change
		// was applied twice.
		m.stray = append(m.stray, "delete of absent "+o.Key)
		return nil
	}
	delete(m.items, o.Key)
	m.removals[o.Key]++
	m.deletes++
	return nil
}

func (m *modelStore) Replace(list []kv, _ string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	items := make(map[string]kv, len(list))
	for _, o := range list {
		items[o.Key] = o
	}
	for k := range m.items {
		if _, ok := items[k]; !ok {
			m.removals[k]++
			m.tombs++
		}
	}
	m.items = items
	return nil
}

func (m *modelStore) Resync() error { return nil }

func (m *modelStore) snapshot() map[string]kv {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := make(map[string]kv, len(m.items))
	for k, v := range m.items {
		c[k] = v
	}
	return c
}

// runReflector runs r until the returned function is called, which stops
// it and waits for Run to return.
func runReflector(t *testing.T, r *mirror.Reflector[kv]) (stop func()) {
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}

// settle lets fake time pass, a minute at a time, until the store holds
// exactly what src holds and the Reflector has seen src's newest revision.
func settle(t *testing.T, src *memsource.Source[kv], r *mirror.Reflector[kv], store *modelStore) {
	t.Helper()
	for i := 0; ; i++ {
		synctest.Wait()
		if r.Freshness().ResourceVersion == strconv.FormatInt(src.Revision(), 10) &&
			assert.ObjectsAreEqual(src.Snapshot(), store.snapshot()) {
			return
		}
		require.Less(t, i, 30, "no convergence after %d fake minutes", i)
		time.Sleep(time.Minute) // advance the fake clock
	}
}

func TestReflector_ConvergesOnMemsourceUnderFaults(t *testing.T) {
	const (
		keys   = 200
		rounds = 50
	)
	for _, streaming := range []bool{false, true} {
		for _, seed := range []uint64{1, 2, 3} {
			t.Run(fmt.Sprintf("streaming=%v/seed=%d", streaming, seed), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					rng := rand.New(rand.NewPCG(seed, 42))
					src := memsource.New(kvKey, memsource.Options{HistoryLimit: 1000})
					store := newModelStore()
					var errsMu sync.Mutex
					var errs []error
					r := mirror.NewReflector[kv](src, store, mirror.ReflectorOptions{
						ResyncPeriod: 30 * time.Second,
						ErrorHandler: func(err error) {
							errsMu.Lock()
							errs = append(errs, err)
							errsMu.Unlock()
						},
						ListWatch: mirror.ListWatchOptions{PageSize: 16, InitialBackoff: 100 * time.Millisecond, MaxBackoff: 2 * time.Second, StreamingList: streaming},
					})
					srcDeletes := map[string]int{}
					ops, n := 0, 0
					mutate := func(count int) {
						for range count {
							k := "k" + strconv.Itoa(rng.IntN(keys))
							if rng.IntN(5) < 2 {
								if _, ok := src.Delete(k); ok {
									srcDeletes[k]++
								}
							} else {
								n++
								src.Put(kv{k, n})
							}
							ops++
						}
					}
					mutate(keys) // something to list
					stop := runReflector(t, r)

					for range rounds {
						mutate(20 + rng.IntN(100))
						if rng.IntN(2) == 0 {
							synctest.Wait() // let a running watch catch up
						}
						switch rng.IntN(10) { // 6 to 9: no fault
						case 0: // a dropped connection
							src.CutWatches()
						case 1: // down for a while: watches and lists fail
							src.FailNext(1+rng.IntN(4), errSourceDown)
							src.CutWatches()
						case 2: // changes missed while away, then compacted
							src.CutWatches()
							mutate(50)
							src.Compact(src.Revision())
						case 3:
							src.Bookmark()
						case 4: // an error that makes the Reflector relist
							src.FailNext(1, errSourceBoom)
							src.CutWatches()
						case 5: // compaction mid-stream; a lagging watch expires
							src.Compact(src.Revision() - int64(rng.IntN(20)))
						}
						if rng.IntN(2) == 0 {
							synctest.Wait()
							time.Sleep(time.Duration(rng.IntN(20000)) * time.Millisecond) // advance the fake clock
						}
					}
					src.FailNext(0, nil)
					settle(t, src, r, store)
					stop()

					store.mu.Lock()
					defer store.mu.Unlock()
					assert.Empty(t, store.stray, "every change applied once, in a state it fits")
					for k, n := range store.removals {
						assert.LessOrEqual(t, n, srcDeletes[k], "key %s removed more often than deleted at the source", k)
					}
					errsMu.Lock()
					for _, err := range errs {
						assert.True(t, errors.Is(err, source.ErrUnavailable) || errors.Is(err, source.ErrExpired) ||
							errors.Is(err, errSourceBoom), "reported error of an unknown kind: %v", err)
					}
					errsMu.Unlock()
					st := r.Stats()
					t.Logf("%d ops; %d deletes, %d tombstones; %+v", ops, store.deletes, store.tombs, st)
					assert.GreaterOrEqual(t, ops, 3000)
					assert.Positive(t, store.tombs, "relists found deletions they had missed")
					assert.Positive(t, st.Relists)
					assert.Positive(t, st.WatchRestarts)
				})
			})
		}
	}
}

// recordingLW passes calls to a ListWatcher and records their options;
// before passing a call on, it runs the hook set for it, if any.
type recordingLW struct {
	lw source.ListWatcher[kv]

	mu      sync.Mutex
	lists   []source.ListOptions
	watches []source.WatchOptions
	onList  func(call int, opts source.ListOptions) error
	onWatch func(call int, opts source.WatchOptions) error
}

func (l *recordingLW) List(ctx context.Context, opts source.ListOptions) (source.ListResult[kv], error) {
	l.mu.Lock()
	l.lists = append(l.lists, opts)
	hook, call, lw := l.onList, len(l.lists), l.lw
	l.mu.Unlock()
	if hook != nil {
		if err := hook(call, opts); err != nil {
			return source.ListResult[kv]{}, err
		}
	}
	return lw.List(ctx, opts)
}

func (l *recordingLW) Watch(ctx context.Context, opts source.WatchOptions) (source.Watcher[kv], error) {
	l.mu.Lock()
	l.watches = append(l.watches, opts)
	hook, call, lw := l.onWatch, len(l.watches), l.lw
	l.mu.Unlock()
	if hook != nil {
		if err := hook(call, opts); err != nil {
			return nil, err
		}
	}
	return lw.Watch(ctx, opts)
}

func (l *recordingLW) Lists() []source.ListOptions {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.lists)
}

func (l *recordingLW) Watches() []source.WatchOptions {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.watches)
}

func fill(src *memsource.Source[kv], n int) {
	for i := range n {
		src.Put(kv{fmt.Sprintf("k%02d", i), i})
	}
}

func TestReflector_MemsourceExpiredContinuationRelistsFromScratch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := memsource.New(kvKey, memsource.Options{})
		fill(src, 10)
		lw := &recordingLW{lw: src}
		lw.onList = func(call int, opts source.ListOptions) error {
			if call == 2 { // the first continuation: the source moves on and compacts
				src.Put(kv{"new", 1})
				src.Delete("k00")
				src.Compact(src.Revision())
			}
			return nil
		}
		store := newModelStore()
		r := mirror.NewReflector[kv](lw, store, mirror.ReflectorOptions{ListWatch: mirror.ListWatchOptions{PageSize: 4}})
		stop := runReflector(t, r)
		settle(t, src, r, store)
		stop()

		lists := lw.Lists()
		require.Len(t, lists, 5)
		assert.Equal(t, source.ListOptions{ResourceVersion: "0", Limit: 4}, lists[0])
		assert.NotEmpty(t, lists[1].Continue)
		assert.Equal(t, source.ListOptions{ResourceVersion: "", Limit: 4}, lists[2], "from scratch, consistent")
		assert.Equal(t, int64(1), r.Stats().Lists, "one list completed")
		assert.Empty(t, store.stray)
	})
}

func TestReflector_MemsourceTooLargeVersionRelistsConsistently(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// The Reflector first talks to a primary at revision 51, then to
		// a lagging replica at revision 21 (each starts at 1).
		primary := memsource.New(kvKey, memsource.Options{})
		fill(primary, 50)
		replica := memsource.New(kvKey, memsource.Options{})
		fill(replica, 20)
		lw := &recordingLW{lw: primary}
		store := newModelStore()
		r := mirror.NewReflector[kv](lw, store, mirror.ReflectorOptions{})
		stop := runReflector(t, r)
		settle(t, primary, r, store)

		lw.mu.Lock()
		lw.lw = replica
		lw.onWatch = func(call int, opts source.WatchOptions) error {
			if opts.ResourceVersion == "51" {
				return errSourceBoom // the rewatch fails: relist at 51
			}
			return nil
		}
		lw.mu.Unlock()
		primary.CutWatches()
		replica.Put(kv{"k00", 100})
		settle(t, replica, r, store)
		stop()

		var rvs []string
		for _, o := range lw.Lists() {
			rvs = append(rvs, o.ResourceVersion)
		}
		assert.Equal(t, []string{"0", "51", ""}, rvs, "one consistent relist, no loop at 51")
		assert.Equal(t, replica.Snapshot(), store.snapshot())
	})
}

func TestReflector_MemsourceUnavailableWatchDoesNotRelist(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := memsource.New(kvKey, memsource.Options{})
		fill(src, 30)
		store := newModelStore()
		r := mirror.NewReflector[kv](src, store, mirror.ReflectorOptions{})
		stop := runReflector(t, r)
		settle(t, src, r, store)

		src.FailNext(3, errSourceDown)
		src.CutWatches()
		src.Put(kv{"k00", 100})
		src.Delete("k01")
		settle(t, src, r, store)
		stop()

		st := r.Stats()
		assert.Equal(t, int64(1), st.Lists, "no relist")
		assert.Equal(t, int64(0), st.Relists)
		assert.Equal(t, int64(4), st.Errors, "the cut and three failed watches")
		assert.Equal(t, int64(1), st.WatchRestarts, "one watch opened again")
		assert.Equal(t, 1, store.deletes)
		assert.Zero(t, store.tombs)
	})
}

func TestReflector_MemsourceNewSourceWatchCutBeforeAnyEventLosesNothing(t *testing.T) {
	// A new source lists empty. Its first watch is cut before any event and
	// the source stays down while a key is created: the watch opened again
	// must start at the list's version, not "now", or the key is lost until
	// some later change or relist.
	for _, streaming := range []bool{false, true} {
		t.Run(fmt.Sprintf("streaming=%v", streaming), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				src := memsource.New(kvKey, memsource.Options{})
				lw := &recordingLW{lw: src}
				store := newModelStore()
				r := mirror.NewReflector[kv](lw, store, mirror.ReflectorOptions{ListWatch: mirror.ListWatchOptions{StreamingList: streaming}})
				stop := runReflector(t, r)
				settle(t, src, r, store)
				listed := r.Freshness().ResourceVersion
				require.Len(t, lw.Watches(), 1, "the first watch is open")

				// Down: the cut watch and the next attempt fail, so the
				// watch that works opens after the change.
				src.FailNext(1, errSourceDown)
				src.CutWatches()
				src.Put(kv{"a", 1})
				settle(t, src, r, store)
				stop()

				assert.Equal(t, map[string]kv{"a": {"a", 1}}, store.snapshot())
				st := r.Stats()
				assert.Equal(t, int64(1), st.Lists, "no relist")
				assert.Zero(t, st.Relists)
				assert.Equal(t, int64(1), st.WatchRestarts, "one watch opened again")
				watches := lw.Watches()
				require.Len(t, watches, 3, "the first watch, the failed one and the one that works")
				for _, w := range watches[1:] {
					assert.Equal(t, listed, w.ResourceVersion, "a rewatch starts at the list's version")
				}
				assert.Empty(t, store.stray)
			})
		})
	}
}
