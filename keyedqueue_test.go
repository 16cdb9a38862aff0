package mirror

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// keyedModel is the obvious implementation of a keyedQueue: a slice in
// queue order and a map.
type keyedModel struct {
	order []int
	vals  map[int]int
}

// checkKeyedQueue fails unless q holds exactly what m holds, in the same
// order, and finds every key of 0..keys-1 that m holds and no other.
func checkKeyedQueue(t *testing.T, q *keyedQueue[int, int], m *keyedModel, keys int) {
	t.Helper()
	require.Equal(t, len(m.order), q.len())
	i := 0
	for k, v := range q.all() {
		require.Equal(t, m.order[i], k, "position %d", i)
		require.Equal(t, m.vals[k], *v, "key %d", k)
		i++
	}
	for k := range keys {
		v, ok := q.find(k)
		want, queued := m.vals[k]
		require.Equal(t, queued, ok, "find(%d)", k)
		if ok {
			require.Equal(t, want, *v, "find(%d)", k)
		}
	}
	used := 0
	for _, s := range q.slots {
		if s != 0 && q.base+s&offMask >= q.epoch {
			used++
		}
	}
	require.Equal(t, used, q.used, "used counts the slots at or above epoch")
	require.LessOrEqual(t, q.used, q.limit)
	require.Zero(t, len(q.slots)&(len(q.slots)-1), "the table's size is a power of two")
}

// The index must find exactly the queued keys through every way its slots
// are reused: pops that leave dead slots behind, drains that free the
// whole table, rebuilds of a queue that never drains, growth, shrinking,
// and a Replace's reserve.
func TestKeyedQueue_FindsExactlyTheQueuedKeys(t *testing.T) {
	tests := []struct {
		name string
		keys int // keys are 0..keys-1
		// backlog is the length around which pushes and pops alternate;
		// 0 drains the queue after every burst.
		backlog, burst, rounds int
		reserve                bool
	}{
		{name: "small bursts, drained", keys: 20, burst: 10, rounds: 200},
		{name: "large bursts, drained", keys: 3000, burst: 2500, rounds: 6},
		{name: "reserve before each burst", keys: 3000, burst: 2000, rounds: 6, reserve: true},
		{name: "never drains, short backlog", keys: 500, backlog: 8, burst: 5, rounds: 300},
		{name: "never drains, long backlog", keys: 5000, backlog: 1000, burst: 300, rounds: 30},
		{name: "bursts then a trickle", keys: 2000, burst: 2000, rounds: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(tt.keys)))
			var q keyedQueue[int, int]
			m := &keyedModel{vals: map[int]int{}}
			val := 0
			push := func() {
				k := rng.IntN(tt.keys)
				val++
				v, queued := q.findOrPush(k)
				_, want := m.vals[k]
				require.Equal(t, want, queued, "findOrPush(%d)", k)
				if !queued {
					m.order = append(m.order, k)
				}
				*v = val
				m.vals[k] = val
			}
			pop := func() {
				k, v := q.pop()
				require.Equal(t, m.order[0], k)
				require.Equal(t, m.vals[k], v)
				m.order = m.order[1:]
				delete(m.vals, k)
			}
			for round := range tt.rounds {
				if tt.reserve && q.len() == 0 {
					q.reserve(tt.burst)
				}
				for range tt.burst {
					push()
				}
				checkKeyedQueue(t, &q, m, tt.keys)
				for q.len() > tt.backlog {
					pop()
				}
				checkKeyedQueue(t, &q, m, tt.keys)
				if tt.name == "bursts then a trickle" && round == tt.rounds-1 {
					for range 50 {
						push()
						pop()
						checkKeyedQueue(t, &q, m, tt.keys)
					}
				}
			}
		})
	}
}

// A queue that fills and drains again and again, as a relisting informer's
// does, must not build its index afresh for every burst.
func TestKeyedQueue_KeepsItsTableAcrossBursts(t *testing.T) {
	var q keyedQueue[int, int]
	const burst = 5000
	var table *uint64
	for round := range 4 {
		for k := range burst {
			q.findOrPush(k + round) // mostly the same keys, a few new
		}
		if round == 0 {
			table = &q.slots[0]
		}
		require.Same(t, table, &q.slots[0], "round %d reuses the table", round)
		for q.len() > 0 {
			q.pop()
		}
		require.Same(t, table, &q.slots[0], "draining keeps the table")
		_, ok := q.find(round)
		require.False(t, ok, "a drained queue finds nothing")
	}
}

// After a large burst the table must follow the bursts down, so that a
// queue does not keep for ever the memory of its largest burst.
func TestKeyedQueue_ShrinksItsTableWhenBurstsGetSmaller(t *testing.T) {
	var q keyedQueue[int, int]
	for k := range 100_000 {
		q.findOrPush(k)
	}
	for q.len() > 0 {
		q.pop()
	}
	large := len(q.slots)
	for i := range 30 {
		q.findOrPush(i)
		q.pop()
	}
	assert.LessOrEqual(t, len(q.slots), 4*minSlots, "a trickle after a burst of %d slots", large)
	v, queued := q.findOrPush(7)
	assert.False(t, queued)
	*v = 1
	v, ok := q.find(7)
	require.True(t, ok)
	assert.Equal(t, 1, *v)
}

// A slot holds its entry's number as an offset of offBits bits; a queue
// that pushes more entries than that over its life must still find its
// keys. The queue here starts just short of the offset's limit.
func TestKeyedQueue_FindsKeysPastTheSlotOffsetLimit(t *testing.T) {
	var q keyedQueue[int, int]
	const start = 1 << (offBits + 1)
	q.order.base, q.order.head, q.order.tail = start, start, start
	q.reserve(1000) // no growth, whose rebuild would rebase
	q.base, q.epoch = start-offMask+100, start-offMask+100
	m := &keyedModel{vals: map[int]int{}}
	for k := range 300 { // crosses the limit with keys queued
		v, queued := q.findOrPush(k)
		require.False(t, queued)
		*v = k
		m.order = append(m.order, k)
		m.vals[k] = k
	}
	assert.Greater(t, q.base, uint64(start-offMask+100), "rebased")
	checkKeyedQueue(t, &q, m, 300)
	for range 150 {
		k, _ := q.pop()
		m.order = m.order[1:]
		delete(m.vals, k)
	}
	checkKeyedQueue(t, &q, m, 300)
}
