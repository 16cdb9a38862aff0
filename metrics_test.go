package mirror_test

import (
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/listwatch/mirror"
)

// recordedMetrics is a Metrics that keeps what it is told.
type recordedMetrics struct {
	mu        sync.Mutex
	name      string
	src       mirror.StatsSource
	lists     []string // cause:objects
	applied   []time.Duration
	delivered map[string][]time.Duration
	stopped   bool
}

func (m *recordedMetrics) Informer(name string, src mirror.StatsSource) mirror.InformerMetrics {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.name, m.src = name, src
	m.delivered = map[string][]time.Duration{}
	return m
}

func (m *recordedMetrics) Listed(cause mirror.ListCause, objects int, took time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lists = append(m.lists, cause.String()+":"+strconv.Itoa(objects))
}

func (m *recordedMetrics) Applied(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.applied = append(m.applied, d)
}

func (m *recordedMetrics) Delivered(handler string, d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.delivered[handler] = append(m.delivered[handler], d)
}

func (m *recordedMetrics) Stop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stopped = true
}

func TestInformer_MetricsHearOfListsAndSampledLatencies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &recordedMetrics{}
		f := newFixture(t, func(o *mirror.InformerOptions[string, item]) {
			o.Name = "items"
			o.Metrics = m
		})
		f.src.Put(item{Name: "a", Val: 1})
		f.src.Put(item{Name: "b", Val: 1})
		_, err := f.inf.AddEventHandler(&recorder{}, mirror.HandlerOptions{Name: "audit"})
		require.NoError(t, err)
		f.start()
		f.synced()

		// A handler stuck in its first call until the gate opens: the
		// notifications published meanwhile wait, and the samples say so.
		gate := make(chan struct{})
		_, err = f.inf.AddEventHandler(mirror.HandlerFuncs[item]{UpdateFunc: func(item, item) { <-gate }},
			mirror.HandlerOptions{Name: "slow"})
		require.NoError(t, err)
		for i := range 5 {
			time.Sleep(20 * time.Millisecond)
			f.src.Put(item{Name: "a", Val: 10 + i})
		}
		synctest.Wait()
		time.Sleep(5 * time.Millisecond)
		close(gate)
		synctest.Wait()

		f.missWhileDown(func() { f.src.Delete("b") })
		f.stop()

		m.mu.Lock()
		defer m.mu.Unlock()
		assert.Equal(t, "items", m.name)
		assert.Equal(t, []string{"initial:2", "expired:1"}, m.lists, "the relist after the history was compacted")
		assert.NotEmpty(t, m.applied, "a sample of the events' waits in the queue")
		assert.NotEmpty(t, m.delivered["audit"], "a sample of the deliveries to each handler")
		require.NotEmpty(t, m.delivered["slow"])
		assert.GreaterOrEqual(t, slices.Max(m.delivered["slow"]), 5*time.Millisecond)
		for _, d := range m.applied {
			assert.GreaterOrEqual(t, d, time.Duration(0))
		}
		assert.True(t, m.stopped, "Stop once Run returned")
	})
}

func TestInformer_StatsSayWhatTheInformerHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, nil)
		for _, n := range []string{"a", "b", "c"} {
			f.src.Put(item{Name: n, Val: 1})
		}
		gate := make(chan struct{})
		_, err := f.inf.AddEventHandler(mirror.HandlerFuncs[item]{
			UpdateFunc: func(item, item) { <-gate },
			DeleteFunc: func(item, bool) { panic("boom") },
		}, mirror.HandlerOptions{Name: "h"})
		require.NoError(t, err)
		f.start()
		f.synced()

		f.src.Put(item{Name: "a", Val: 2})
		synctest.Wait() // the handler is in the call, waiting
		f.src.Put(item{Name: "a", Val: 3})
		f.src.Delete("c")
		synctest.Wait()
		st := f.inf.Stats()
		assert.Equal(t, 2, st.Objects)
		assert.Zero(t, st.QueueDepth, "applied to the cache; the handler is what waits")
		assert.Equal(t, strconv.FormatInt(f.src.Revision(), 10), f.inf.Freshness().ResourceVersion, "the version the cache applied")
		require.Len(t, st.Handlers, 1)
		assert.Equal(t, "h", st.Handlers[0].Name)
		assert.Equal(t, 2, st.Handlers[0].Backlog, "the second update and the delete")
		assert.EqualValues(t, 1, st.Reflector.Lists)
		assert.Positive(t, st.QueueAdds)

		close(gate)
		synctest.Wait()
		st = f.inf.Stats()
		assert.Zero(t, st.Handlers[0].Backlog)
		assert.EqualValues(t, 3+2+1, st.Handlers[0].Delivered, "three adds, two updates, one delete")
		assert.EqualValues(t, 1, st.Handlers[0].Panics)
		f.stop()
	})
}

func TestInformer_StatsBeforeRun(t *testing.T) {
	f := newFixture(t, nil)
	st := f.inf.Stats()
	assert.Zero(t, st.Objects)
	assert.Zero(t, st.Reflector)
	assert.Zero(t, f.inf.Freshness())
}

func TestInformer_StatsCountTheChangesTheCacheRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, func(o *mirror.InformerOptions[string, item]) {
			o.Indexers = mirror.Indexers[item]{"val": func(it item) ([]string, error) {
				if it.Val < 0 {
					return nil, errors.New("no index for a negative value")
				}
				return []string{strconv.Itoa(it.Val)}, nil
			}}
		})
		f.src.Put(item{Name: "a", Val: 1})
		f.startRecording()
		f.src.Put(item{Name: "a", Val: -1})
		synctest.Wait()
		assert.EqualValues(t, 1, f.inf.Stats().ApplyErrors)
		var ie *mirror.IndexError
		require.ErrorAs(t, f.errs.all()[0], &ie)
		f.stop()
	})
}
