package mirrorprom_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/memsource"
	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// item is what the tests mirror. The informer cannot key an item marked
// Bad, which the source can: the queue refuses it (a store error).
type item struct {
	Name string
	Val  int
	Bad  bool
}

func sourceKey(it item) (string, error) { return it.Name, nil }

func itemKey(it item) (string, error) {
	if it.Bad {
		return "", errors.New("test: item without a key")
	}
	return it.Name, nil
}

// faultySource is a memsource whose watches can be told to report the next
// change as an object the source could not produce (an source.Error), before
// delivering it.
type faultySource struct {
	*memsource.Source[item]
	skipNext atomic.Bool
}

func (s *faultySource) Watch(ctx context.Context, opts source.WatchOptions) (source.Watcher[item], error) {
	w, err := s.Source.Watch(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &faultyWatcher{Watcher: w, s: s}, nil
}

type faultyWatcher struct {
	source.Watcher[item]
	s    *faultySource
	held *source.Event[item]
}

func (w *faultyWatcher) Next(ctx context.Context) (source.Event[item], error) {
	if ev := w.held; ev != nil {
		w.held = nil
		return *ev, nil
	}
	ev, err := w.Watcher.Next(ctx)
	if err == nil && ev.Type != source.Bookmark && w.s.skipNext.CompareAndSwap(true, false) {
		w.held = &ev
		return source.Event[item]{Type: source.Error, Err: &mirror.ObjectError{Key: ev.Object.Name, Err: errors.New("test: undecodable")}}, nil
	}
	return ev, err
}

// pausing wraps a Metrics so that a test can hold the informer's apply
// loop in a call of Applied. With the in-order queue the loop calls it
// between batches, outside every lock, so the Reflector goes on queueing
// and a scrape goes through while the loop is held.
type pausing struct {
	mirror.Metrics
	hold    atomic.Bool // the next Applied waits for release
	release chan struct{}
}

func (p *pausing) Informer(name string, src mirror.StatsSource) mirror.InformerMetrics {
	return &pausingInformer{p.Metrics.Informer(name, src), p}
}

type pausingInformer struct {
	mirror.InformerMetrics
	p *pausing
}

func (pi *pausingInformer) Applied(d time.Duration) {
	pi.InformerMetrics.Applied(d)
	if pi.p.hold.CompareAndSwap(true, false) {
		<-pi.p.release
	}
}

// Each metric moves as the informer works over a memsource: the initial
// list, changes, a queue that backs up, a handler that stalls and one
// that panics, an idle source, a cut watch, a watch that times out, a
// relist after compaction and one after an error, an object the source
// cannot produce and one the queue refuses; and Stop takes the series
// away. Scraped through promhttp's handler, without a socket, so that the
// informer runs on fake time.
func TestMetrics_EachMetricMovesAsTheInformerWorks(t *testing.T) {
	synctest.Test(t, testEachMetricMoves)
}

func testEachMetricMoves(t *testing.T) {
	m, registry := newMetrics(t)
	src := &faultySource{Source: memsource.New(sourceKey, memsource.Options{})}
	for _, name := range []string{"a", "b", "c"} {
		src.Put(item{Name: name})
	}
	paused := &pausing{Metrics: m, release: make(chan struct{})}
	var reported atomic.Int64
	inf := mirror.NewInformer(src, mirror.InformerOptions[string, item]{
		Name:         "items",
		KeyFunc:      itemKey,
		Metrics:      paused,
		ErrorHandler: func(error) { reported.Add(1) },
		ListWatch:    mirror.ListWatchOptions{WatchTimeout: time.Hour},
	})
	var holdHandler atomic.Bool
	handlerRelease := make(chan struct{})
	_, err := inf.AddEventHandler(mirror.HandlerFuncs[item]{
		UpdateFunc: func(item, item) {
			if holdHandler.CompareAndSwap(true, false) {
				<-handlerRelease
			}
		},
		DeleteFunc: func(item, bool) { panic("test: a handler that panics on deletes") },
	}, mirror.HandlerOptions{Name: "slow"})
	require.NoError(t, err)
	_, err = inf.AddEventHandler(mirror.HandlerFuncs[item]{}, mirror.HandlerOptions{Name: "audit"})
	require.NoError(t, err)

	const name = "items"
	scrapeNow := func() scrape { return scrapeHandler(t, registry) }
	get := func(s scrape, metric string, labels ...string) float64 {
		t.Helper()
		return s.get(t, metric, append([]string{"name", name}, labels...)...)
	}
	revision := func() float64 { return float64(src.Revision()) }
	require.Empty(t, scrapeNow().named(name), "no series before Run")

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	synctest.Wait()

	// The initial list.
	s := scrapeNow()
	assert.Equal(t, 3.0, get(s, "mirror_cache_objects"))
	assert.Equal(t, 1.0, get(s, "mirror_lists_total", "cause", "initial"))
	assert.Zero(t, get(s, "mirror_lists_total", "cause", "expired"))
	assert.Zero(t, get(s, "mirror_lists_total", "cause", "error"))
	assert.Equal(t, 1.0, get(s, "mirror_list_duration_seconds_count", "cause", "initial"))
	assert.Equal(t, 3.0, get(s, "mirror_list_objects_sum", "cause", "initial"))
	assert.Equal(t, 1.0, get(s, "mirror_watches_total"))
	assert.Equal(t, revision(), get(s, "mirror_cache_resource_version"))
	assert.Equal(t, 3.0, get(s, "mirror_handler_deliveries_total", "handler", "slow"))
	assert.Equal(t, 3.0, get(s, "mirror_handler_deliveries_total", "handler", "audit"))
	assert.Positive(t, get(s, "mirror_handler_delivery_latency_seconds_count", "handler", "audit"))
	assert.Positive(t, get(s, "mirror_apply_latency_seconds_count"))
	assert.Positive(t, get(s, "mirror_queue_adds_total"))
	assert.Zero(t, get(s, "mirror_queue_depth"))
	assert.Zero(t, get(s, "mirror_staleness_seconds"), "confirmed by the list, just now")
	assert.Zero(t, get(s, "mirror_source_failing"))

	// A change: queued, applied, delivered.
	before := s
	time.Sleep(time.Second) // a sample of each latency is due
	src.Put(item{Name: "a", Val: 1})
	synctest.Wait()
	s = scrapeNow()
	assert.Equal(t, get(before, "mirror_queue_adds_total")+1, get(s, "mirror_queue_adds_total"))
	assert.Equal(t, get(before, "mirror_watch_events_total")+1, get(s, "mirror_watch_events_total"))
	assert.Equal(t, revision(), get(s, "mirror_cache_resource_version"))
	assert.Equal(t, get(before, "mirror_apply_latency_seconds_count")+1, get(s, "mirror_apply_latency_seconds_count"))
	assert.Equal(t, 4.0, get(s, "mirror_handler_deliveries_total", "handler", "audit"))

	// The apply loop held between two batches: the queue backs up,
	// and what waited says so once applied.
	before = s
	paused.hold.Store(true)
	time.Sleep(time.Second)
	src.Put(item{Name: "b", Val: 1})
	synctest.Wait()
	for i := range 3 {
		time.Sleep(time.Second)
		src.Put(item{Name: "c", Val: i})
	}
	synctest.Wait()
	s = scrapeNow()
	assert.Equal(t, 3.0, get(s, "mirror_queue_depth"))
	assert.Equal(t, get(before, "mirror_queue_adds_total")+4, get(s, "mirror_queue_adds_total"))
	time.Sleep(5 * time.Second)
	paused.release <- struct{}{}
	synctest.Wait()
	s = scrapeNow()
	assert.Zero(t, get(s, "mirror_queue_depth"))
	assert.GreaterOrEqual(t, get(s, "mirror_apply_latency_seconds_count")-get(before, "mirror_apply_latency_seconds_count"), 2.0)
	assert.GreaterOrEqual(t, get(s, "mirror_apply_latency_seconds_sum")-get(before, "mirror_apply_latency_seconds_sum"), 5.0,
		"the changes queued while the loop was held waited 5s at least")

	// A handler that stalls: its backlog grows, the other's does not;
	// what it waited for says so once delivered. Its deletes panic.
	before = s
	holdHandler.Store(true)
	time.Sleep(time.Second)
	src.Put(item{Name: "a", Val: 2})
	synctest.Wait()
	time.Sleep(time.Second)
	src.Put(item{Name: "b", Val: 2})
	time.Sleep(time.Second)
	src.Delete("c")
	synctest.Wait()
	s = scrapeNow()
	assert.Equal(t, 2.0, get(s, "mirror_handler_backlog", "handler", "slow"))
	assert.Zero(t, get(s, "mirror_handler_backlog", "handler", "audit"))
	assert.Equal(t, 2.0, get(s, "mirror_cache_objects"))
	time.Sleep(3 * time.Second)
	handlerRelease <- struct{}{}
	synctest.Wait()
	s = scrapeNow()
	assert.Zero(t, get(s, "mirror_handler_backlog", "handler", "slow"))
	assert.Equal(t, get(before, "mirror_handler_deliveries_total", "handler", "slow")+3, get(s, "mirror_handler_deliveries_total", "handler", "slow"))
	assert.Equal(t, 1.0, get(s, "mirror_handler_panics_total", "handler", "slow"))
	assert.Zero(t, get(s, "mirror_handler_panics_total", "handler", "audit"))
	assert.GreaterOrEqual(t, get(s, "mirror_handler_delivery_latency_seconds_sum", "handler", "slow")-
		get(before, "mirror_handler_delivery_latency_seconds_sum", "handler", "slow"), 3.0,
		"the notifications published while the handler was stalled waited 3s at least")

	// An idle source: the staleness grows until a bookmark confirms the
	// mirror current.
	src.Bookmark()
	synctest.Wait()
	assert.Zero(t, get(scrapeNow(), "mirror_staleness_seconds"))
	time.Sleep(30 * time.Second)
	assert.Equal(t, 30.0, get(scrapeNow(), "mirror_staleness_seconds"))

	// A cut watch, and a source unreachable for a minute: it fails
	// until the watch is back, which is a restart; no relist.
	before = scrapeNow()
	src.FailNext(1_000_000, fmt.Errorf("test: down: %w", source.ErrUnavailable))
	src.CutWatches()
	time.Sleep(time.Minute)
	synctest.Wait()
	s = scrapeNow()
	assert.Equal(t, 1.0, get(s, "mirror_source_failing"))
	assert.Greater(t, get(s, "mirror_errors_total", "kind", "watch"), get(before, "mirror_errors_total", "kind", "watch"))
	assert.GreaterOrEqual(t, get(s, "mirror_staleness_seconds"), 90.0, "no event nor bookmark since")
	src.FailNext(0, nil)
	time.Sleep(time.Minute)
	synctest.Wait()
	s = scrapeNow()
	assert.Zero(t, get(s, "mirror_source_failing"))
	assert.Equal(t, get(before, "mirror_watch_restarts_total", "cause", "unavailable")+1, get(s, "mirror_watch_restarts_total", "cause", "unavailable"))
	assert.Equal(t, get(before, "mirror_watches_total")+1, get(s, "mirror_watches_total"))
	assert.Equal(t, get(before, "mirror_lists_total", "cause", "expired"), get(s, "mirror_lists_total", "cause", "expired"))

	// A watch that ends at its timeout is reopened: a restart.
	before = s
	time.Sleep(2 * time.Hour)
	s = scrapeNow()
	assert.GreaterOrEqual(t, get(s, "mirror_watch_restarts_total", "cause", "closed")-get(before, "mirror_watch_restarts_total", "cause", "closed"), 1.0)
	assert.Zero(t, get(s, "mirror_watch_restarts_total", "cause", "short"))

	// Cut off while the history is compacted: a relist, cause expired.
	before = s
	src.FailNext(1, fmt.Errorf("test: down: %w", source.ErrUnavailable))
	src.CutWatches()
	src.Delete("a")
	src.Compact(src.Revision())
	time.Sleep(time.Minute)
	synctest.Wait()
	s = scrapeNow()
	assert.Equal(t, 1.0, get(s, "mirror_lists_total", "cause", "expired"))
	assert.Equal(t, 1.0, get(s, "mirror_list_duration_seconds_count", "cause", "expired"))
	assert.Equal(t, 1.0, get(s, "mirror_list_objects_sum", "cause", "expired"), "b alone is left")
	assert.Equal(t, 1.0, get(s, "mirror_cache_objects"))
	assert.Equal(t, revision(), get(s, "mirror_cache_resource_version"))
	assert.Greater(t, get(s, "mirror_errors_total", "kind", "watch"), get(before, "mirror_errors_total", "kind", "watch"))

	// A watch that fails otherwise: a relist after an error, whose first
	// attempt fails too.
	before = s
	src.FailNext(2, errors.New("test: broken"))
	src.CutWatches()
	time.Sleep(time.Minute)
	synctest.Wait()
	s = scrapeNow()
	assert.Equal(t, 1.0, get(s, "mirror_lists_total", "cause", "error"))
	assert.Equal(t, 1.0, get(s, "mirror_errors_total", "kind", "list"))
	assert.Equal(t, 1.0, get(s, "mirror_list_objects_count", "cause", "error"))

	// An object the source cannot produce, and one the queue refuses.
	before = s
	src.skipNext.Store(true)
	src.Put(item{Name: "d"})
	src.Put(item{Name: "e", Bad: true})
	synctest.Wait()
	s = scrapeNow()
	assert.Equal(t, get(before, "mirror_errors_total", "kind", "skipped")+1, get(s, "mirror_errors_total", "kind", "skipped"))
	assert.Equal(t, get(before, "mirror_errors_total", "kind", "store")+1, get(s, "mirror_errors_total", "kind", "store"))
	assert.Equal(t, 2.0, get(s, "mirror_cache_objects"), "b and d")
	assert.Positive(t, reported.Load())

	// Run returns: the informer's series go.
	cancel()
	require.NoError(t, <-done)
	assert.Empty(t, scrapeNow().values, "every series was the informer's")
}

// Before the first list the staleness counts from the start of Run: an
// informer that never reaches its source is seen falling behind.
func TestMetrics_StalenessCountsFromTheStartUntilTheFirstList(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, registry := newMetrics(t)
		src := memsource.New(sourceKey, memsource.Options{})
		src.FailNext(1_000_000, fmt.Errorf("test: refused: %w", source.ErrUnavailable))
		inf := mirror.NewInformer(src, mirror.InformerOptions[string, item]{
			Name: "unreached", KeyFunc: itemKey, Metrics: m, ErrorHandler: func(error) {},
		})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- inf.Run(ctx) }()
		time.Sleep(time.Minute)
		synctest.Wait()
		s := scrapeHandler(t, registry)
		assert.Equal(t, 60.0, s.get(t, "mirror_staleness_seconds", "name", "unreached"))
		assert.Equal(t, 1.0, s.get(t, "mirror_source_failing", "name", "unreached"))
		assert.Positive(t, s.get(t, "mirror_errors_total", "name", "unreached", "kind", "list"))
		assert.Zero(t, s.get(t, "mirror_lists_total", "name", "unreached", "cause", "initial"))
		cancel()
		require.NoError(t, <-done)
	})
}

// One Metrics serves several informers, each under its name; when one
// stops, the other's series stay.
func TestMetrics_InformersShareOneMetricsUnderTheirNames(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, registry := newMetrics(t)
		start := func(name string, objects int) (stop func()) {
			src := memsource.New(sourceKey, memsource.Options{})
			for i := range objects {
				src.Put(item{Name: strconv.Itoa(i)})
			}
			inf := mirror.NewInformer(src, mirror.InformerOptions[string, item]{Name: name, KeyFunc: itemKey, Metrics: m})
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() { done <- inf.Run(ctx) }()
			return func() {
				cancel()
				require.NoError(t, <-done)
			}
		}
		stopA := start("a", 2)
		stopB := start("b", 5)
		synctest.Wait()
		s := scrapeHandler(t, registry)
		assert.Equal(t, 2.0, s.get(t, "mirror_cache_objects", "name", "a"))
		assert.Equal(t, 5.0, s.get(t, "mirror_cache_objects", "name", "b"))

		stopA()
		s = scrapeHandler(t, registry)
		assert.Empty(t, s.named("a"))
		assert.Equal(t, 5.0, s.get(t, "mirror_cache_objects", "name", "b"))
		assert.Equal(t, 5.0, s.get(t, "mirror_list_objects_sum", "name", "b", "cause", "initial"))
		stopB()
		assert.Empty(t, scrapeHandler(t, registry).values)
	})
}
