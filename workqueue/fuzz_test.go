package workqueue

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// This file checks Queue against queueModel, a deliberately naive
// reference (a map, linear scans) written from the contract, on operation
// sequences decoded from bytes, run by one goroutine in a bubble: random
// ones in TestQueue_MatchesModel and fuzzer-made ones in FuzzQueue.
// Aging is either off or so long that nothing ages, so the model needs
// none; aging has tests of its own. The retry counts Done keeps are
// modelled loosely: kept for keepFails, and gone by keepFails and
// MaxWait/4; in between the model follows the queue.

const (
	modelKeys      = 8
	modelBaseDelay = 5 * time.Millisecond
	modelMaxDelay  = 80 * time.Millisecond
)

var modelPriorities = []Priority{PriorityLive, PriorityBackground, PriorityResync, 5}

type modelKey struct {
	queued, delayed, working bool // queued with working: to be queued at Done
	prio                     Priority
	seq                      uint64 // order among queued keys of one priority
	at                       time.Duration
	dseq                     uint64 // order among delayed keys due at one time
	fails                    int
	remembered               bool // let go of by Done, kept for fails
	doneAt                   time.Duration
}

type queueModel struct {
	keys      map[int]*modelKey
	now       time.Duration
	seq, dseq uint64
	closed    bool
}

func (m *queueModel) queue(k *modelKey) {
	m.seq++
	k.queued, k.seq = true, m.seq
}

func (m *queueModel) add(key int, p Priority) {
	if m.closed {
		return
	}
	k := m.keys[key]
	switch {
	case k == nil:
		k = &modelKey{prio: p}
		m.keys[key] = k
		m.queue(k)
	case k.queued:
		if p > k.prio {
			k.prio = p
			if !k.working {
				m.queue(k) // to the back of its new priority
			}
		}
	case k.delayed:
		k.delayed = false
		k.prio = max(k.prio, p)
		m.queue(k)
	default:
		k.prio = p
		k.remembered = false
		m.queue(k)
	}
}

func (m *queueModel) addAfter(key int, d time.Duration) {
	if m.closed {
		return
	}
	k := m.keys[key]
	if d <= 0 {
		p := PriorityLive
		if k != nil {
			p = k.prio
		}
		m.add(key, p)
		return
	}
	switch {
	case k == nil:
		k = &modelKey{prio: PriorityLive}
		m.keys[key] = k
		fallthrough
	case !k.queued && !k.delayed:
		k.remembered = false
		m.dseq++
		k.delayed, k.at, k.dseq = true, m.now+d, m.dseq
	case k.delayed:
		k.at = min(k.at, m.now+d)
	}
}

func (m *queueModel) addRateLimited(key int) {
	if m.closed {
		return
	}
	k := m.keys[key]
	if k == nil {
		k = &modelKey{prio: PriorityLive}
		m.keys[key] = k
	}
	d := modelBaseDelay
	for range k.fails {
		d = min(2*d, modelMaxDelay)
	}
	k.fails++
	m.addAfter(key, d)
}

// next returns the key Get hands out: highest priority, then first
// queued.
func (m *queueModel) next() (int, bool) {
	best, found := 0, false
	for key, k := range m.keys {
		if !k.queued || k.working {
			continue
		}
		if b := m.keys[best]; !found || k.prio > b.prio || k.prio == b.prio && k.seq < b.seq {
			best, found = key, true
		}
	}
	return best, found
}

func (m *queueModel) get() (int, bool) {
	if m.closed {
		return 0, false
	}
	key, ok := m.next()
	if ok {
		k := m.keys[key]
		k.queued, k.working = false, true
	}
	return key, ok
}

func (m *queueModel) done(key int) {
	k := m.keys[key]
	if k == nil || !k.working {
		return
	}
	k.working = false
	switch {
	case k.queued:
		m.queue(k)
	case k.delayed:
	case k.fails > 0 && !m.closed:
		k.remembered, k.doneAt = true, m.now
	default:
		delete(m.keys, key)
	}
}

func (m *queueModel) forget(key int) {
	if k := m.keys[key]; k != nil {
		k.fails = 0
		if k.remembered {
			delete(m.keys, key)
		}
	}
}

// settle drops the remembered keys the queue has let go of, once it may
// have, and fails if one is held past the bound.
func (m *queueModel) settle(t *testing.T, q *Queue[int], maxWait time.Duration) {
	if maxWait < 0 {
		maxWait = DefaultMaxWait
	}
	for key, k := range m.keys {
		if !k.remembered || m.now-k.doneAt < keepFails {
			continue
		}
		_, held := q.index[key]
		if !held {
			delete(m.keys, key)
			continue
		}
		require.LessOrEqual(t, m.now-k.doneAt, keepFails+maxWait/4, "key %d kept too long", key)
	}
}

func (m *queueModel) advance(d time.Duration) {
	end := m.now + d
	for !m.closed {
		var due *modelKey
		for _, k := range m.keys {
			if k.delayed && k.at <= end && (due == nil || k.at < due.at || k.at == due.at && k.dseq < due.dseq) {
				due = k
			}
		}
		if due == nil {
			break
		}
		due.delayed = false
		m.queue(due)
	}
	m.now = end
}

func (m *queueModel) shutDown() {
	m.closed = true
	for key, k := range m.keys {
		k.queued, k.delayed = false, false
		if !k.working {
			delete(m.keys, key)
		}
	}
}

func (m *queueModel) stats() (depth []PriorityDepth, delayed, working int) {
	byPrio := map[Priority]int{}
	for _, k := range m.keys {
		switch {
		case k.queued && !k.working:
			byPrio[k.prio]++
		case k.delayed:
			delayed++
		}
		if k.working {
			working++
		}
	}
	for p, n := range byPrio {
		depth = append(depth, PriorityDepth{p, n})
	}
	slices.SortFunc(depth, func(a, b PriorityDepth) int { return int(b.Priority - a.Priority) })
	return depth, delayed, working
}

// runModel decodes ops from data and runs them on a queue and the model,
// comparing as it goes. It runs in a bubble.
func runModel(t *testing.T, data []byte) {
	if len(data) == 0 {
		return
	}
	maxWait := time.Duration(-1)
	if data[0]&1 != 0 {
		maxWait = time.Hour // nothing ages: each op sleeps at most 40 ms
	}
	q := New[int](Options{MaxWait: maxWait, BaseDelay: modelBaseDelay, MaxDelay: modelMaxDelay})
	defer q.ShutDown()
	m := &queueModel{keys: map[int]*modelKey{}}
	data = data[1:]
	next := func() int {
		if len(data) == 0 {
			return 0
		}
		b := data[0]
		data = data[1:]
		return int(b)
	}
	for i := 0; len(data) > 0; i++ {
		op, arg := next(), next()
		key := arg % modelKeys
		switch op % 11 {
		case 0, 1:
			p := modelPriorities[arg/modelKeys%len(modelPriorities)]
			q.AddWithPriority(key, p)
			m.add(key, p)
		case 2:
			d := time.Duration(arg/modelKeys%4) * 10 * time.Millisecond
			q.AddAfter(key, d)
			m.addAfter(key, d)
		case 3:
			q.AddRateLimited(key)
			m.addRateLimited(key)
		case 4:
			q.Forget(key)
			m.forget(key)
		case 5, 6:
			want, ok := m.get()
			got, err := q.Get(endedCtx)
			if !ok {
				require.Error(t, err, "op %d: Get handed out %d", i, got)
				continue
			}
			require.NoError(t, err, "op %d: Get, want %d", i, want)
			require.Equal(t, want, got, "op %d: Get", i)
		case 7, 8:
			q.Done(key)
			m.done(key)
		case 9:
			d := time.Duration(1+arg%40) * time.Millisecond
			sleep(d)
			m.advance(d)
		case 10:
			if arg%16 == 0 {
				q.ShutDown()
				m.shutDown()
			}
		}
		m.settle(t, q, maxWait)
		want := 0
		if k := m.keys[key]; k != nil {
			want = k.fails
		}
		require.Equal(t, want, q.NumRequeues(key), "op %d: NumRequeues(%d)", i, key)
		depth, delayed, working := m.stats()
		s := q.Stats()
		require.Equal(t, depth, s.Depth, "op %d: depth", i)
		require.Equal(t, delayed, s.Delayed, "op %d: delayed", i)
		require.Equal(t, working, s.InProcess, "op %d: in process", i)
		require.Equal(t, len(m.keys), len(q.index), "op %d: keys held", i)
	}
	if m.closed {
		_, err := q.Get(context.Background())
		require.ErrorIs(t, err, ErrShutdown)
	}
}

func TestQueue_MatchesModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	runs := 300
	if testing.Short() {
		runs = 50
	}
	for range runs {
		data := make([]byte, 1+2*rng.IntN(400))
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		synctest.Test(t, func(t *testing.T) { runModel(t, data) })
		if t.Failed() {
			t.Logf("data: %x", data)
			return
		}
	}
}

func FuzzQueue(f *testing.F) {
	f.Add([]byte{0, 0, 1, 0, 9, 5, 0, 0, 0, 7, 1})
	f.Add([]byte{1, 2, 9, 3, 1, 9, 40, 5, 0, 3, 1, 7, 1, 9, 39, 5, 0})
	f.Add([]byte{1, 0, 17, 5, 0, 0, 1, 0, 9, 7, 1, 5, 0, 10, 0, 7, 9})
	f.Fuzz(func(t *testing.T, data []byte) {
		synctest.Test(t, func(t *testing.T) { runModel(t, data) })
	})
}
