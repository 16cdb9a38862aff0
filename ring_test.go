package mirror

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// checkRing compares r with the model (oldest first) and checks the
// capacity rules: zero or a power of two of at least ringMinCap, and, above
// the keep capacity, more than a quarter full (otherwise Pop should have
// shrunk it).
func checkRing(t testing.TB, r *Ring[int], model []int) {
	t.Helper()
	require.Equal(t, len(model), r.Len(), "Len")
	if got := slices.Collect(r.All()); !slices.Equal(got, model) {
		require.Failf(t, "All differs from the model", "got %v, want %v", got, model)
	}
	v, ok := r.Peek()
	if len(model) == 0 {
		require.False(t, ok, "Peek on empty ring")
	} else {
		require.True(t, ok, "Peek")
		require.Equal(t, model[0], v, "Peek")
	}
	c := r.Cap()
	require.GreaterOrEqual(t, c, r.Len(), "Cap >= Len")
	if c != 0 {
		require.Equal(t, 1, bits.OnesCount(uint(c)), "Cap %d is a power of two", c)
		require.GreaterOrEqual(t, c, ringMinCap, "Cap at least the minimum")
	}
	if c > r.keepCap() {
		require.Greater(t, r.Len(), c/4, "a ring above the keep capacity is more than a quarter full")
	}
}

func TestRing_ZeroValueIsEmpty(t *testing.T) {
	var r Ring[int]
	_, ok := r.Pop()
	assert.False(t, ok)
	_, ok = r.Peek()
	assert.False(t, ok)
	assert.Zero(t, r.Len())
	assert.Zero(t, r.Cap(), "nothing is allocated before the first Push")
	assert.Empty(t, slices.Collect(r.All()))
}

func TestRing_FIFOAcrossWrapAround(t *testing.T) {
	tests := []struct {
		name   string
		offset int // values pushed and popped first, to move head
		fill   int // values in the ring when it is read back
	}{
		{name: "no wrap", offset: 0, fill: ringMinCap},
		{name: "wraps by one", offset: 1, fill: ringMinCap},
		{name: "wraps by half", offset: ringMinCap / 2, fill: ringMinCap - 1},
		{name: "wrapped then grown", offset: ringMinCap - 3, fill: 3 * ringMinCap},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r Ring[int]
			for i := range tt.offset {
				r.Push(-i)
				_, ok := r.Pop()
				require.True(t, ok)
			}
			var model []int
			for i := range tt.fill {
				r.Push(i)
				model = append(model, i)
			}
			checkRing(t, &r, model)
			for _, want := range model {
				got, ok := r.Pop()
				require.True(t, ok)
				require.Equal(t, want, got)
			}
			_, ok := r.Pop()
			require.False(t, ok)
		})
	}
}

func TestRing_GrowsByDoublingWhenFull(t *testing.T) {
	var r Ring[int]
	r.Push(0)
	require.Equal(t, ringMinCap, r.Cap(), "first Push allocates the minimum")
	for i := 1; i < ringMinCap; i++ {
		r.Push(i)
	}
	require.Equal(t, ringMinCap, r.Cap(), "a ring grows only when full")
	r.Push(ringMinCap)
	require.Equal(t, 2*ringMinCap, r.Cap())
	for i := ringMinCap + 1; i < 5*ringMinCap; i++ {
		r.Push(i)
	}
	require.Equal(t, 8*ringMinCap, r.Cap())
}

func TestRing_ShrinksBackToKeepCapacityWhenDrained(t *testing.T) {
	var r Ring[int]
	keep := r.keepCap()
	require.Equal(t, ringKeepBytes/8, keep, "keeps 64 KiB of 8-byte values")
	n := 4*keep - 10
	for i := range n {
		r.Push(i)
	}
	require.Equal(t, 4*keep, r.Cap())
	caps := []int{r.Cap()}
	for i := range n {
		v, ok := r.Pop()
		require.True(t, ok)
		require.Equal(t, i, v)
		if c := r.Cap(); c != caps[len(caps)-1] {
			caps = append(caps, c)
		}
	}
	assert.Equal(t, []int{4 * keep, 2 * keep, keep}, caps, "halves one step at a time")
	assert.Zero(t, r.Len())
}

func TestRing_BurstsWithinKeepCapacityReuseStorage(t *testing.T) {
	var r Ring[[64]byte]
	keep := r.keepCap()
	require.Equal(t, 1024, keep)
	for range keep {
		r.Push([64]byte{})
	}
	for range keep {
		r.Pop()
	}
	allocs := testing.AllocsPerRun(10, func() {
		for range keep {
			r.Push([64]byte{})
		}
		for range keep {
			r.Pop()
		}
	})
	assert.Zero(t, allocs, "a burst that fits reuses the drained ring")
}

func TestRing_KeepCapacityOfZeroSizeValuesIsMinimum(t *testing.T) {
	var r Ring[struct{}]
	assert.Equal(t, ringMinCap, r.keepCap())
}

func TestRing_NoResizeThrashAtBoundary(t *testing.T) {
	keep := (&Ring[int]{}).keepCap()
	tests := []struct {
		name     string
		push     int  // values pushed first
		pop      int  // then values popped, to sit at a threshold
		popFirst bool // alternate Pop, Push rather than Push, Pop
	}{
		{name: "full, push first", push: 2 * ringMinCap},
		{name: "full, pop first", push: 2 * ringMinCap, popFirst: true},
		{name: "quarter full, push first", push: 4*keep + 1, pop: 3 * keep},
		{name: "quarter full, pop first", push: 4*keep + 1, pop: 3 * keep, popFirst: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r Ring[int]
			for i := range tt.push {
				r.Push(i)
			}
			for range tt.pop {
				_, _ = r.Pop()
			}
			resizes, c := 0, r.Cap()
			for i := range 100 {
				if tt.popFirst {
					_, _ = r.Pop()
					r.Push(i)
				} else {
					r.Push(i)
					_, _ = r.Pop()
				}
				if r.Cap() != c {
					resizes, c = resizes+1, r.Cap()
				}
			}
			assert.LessOrEqual(t, resizes, 1, "alternating push and pop at a threshold resizes at most once")
		})
	}
}

func TestRing_PopZeroesSlot(t *testing.T) {
	var r Ring[*int]
	for i := range 3 {
		r.Push(&i)
	}
	head := r.head
	_, ok := r.Pop()
	require.True(t, ok)
	assert.Nil(t, r.buf[head], "popped slot no longer references the value")
	_, _ = r.Pop()
	_, _ = r.Pop()
	for i, p := range r.buf {
		assert.Nil(t, p, "slot %d", i)
	}
}

func TestRing_ShrinkDropsReferences(t *testing.T) {
	var r Ring[*int]
	n := 4 * r.keepCap()
	for i := range n {
		r.Push(&i)
	}
	for range n - 1 {
		_, _ = r.Pop()
	}
	require.Equal(t, r.keepCap(), r.Cap(), "shrunk")
	live := 0
	for _, p := range r.buf {
		if p != nil {
			live++
		}
	}
	assert.Equal(t, 1, live, "only the value still queued is referenced")
}

func TestRing_AllOldestFirstWithoutRemoving(t *testing.T) {
	var r Ring[int]
	for i := range 20 {
		r.Push(i)
	}
	for range 5 {
		_, _ = r.Pop()
	}
	for i := 20; i < 30; i++ {
		r.Push(i)
	}
	want := []int{5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29}
	assert.Equal(t, want, slices.Collect(r.All()))
	assert.Equal(t, len(want), r.Len(), "All does not remove")

	var first []int
	for v := range r.All() {
		first = append(first, v)
		if len(first) == 3 {
			break
		}
	}
	assert.Equal(t, []int{5, 6, 7}, first, "early break stops the iteration")
}

func TestRing_AllSurvivesClearDuringIteration(t *testing.T) {
	var r Ring[int]
	for i := range 4 {
		r.Push(i)
	}
	assert.NotPanics(t, func() {
		for range r.All() {
			r.Clear()
		}
	})
}

func TestRing_ClearReleasesStorage(t *testing.T) {
	var r Ring[int]
	for i := range 100 {
		r.Push(i)
	}
	r.Clear()
	assert.Zero(t, r.Len())
	assert.Zero(t, r.Cap())
	_, ok := r.Pop()
	assert.False(t, ok)
	r.Push(7)
	v, ok := r.Pop()
	assert.True(t, ok)
	assert.Equal(t, 7, v, "usable after Clear")
}

// ringOp applies one operation, chosen by op, to both the ring and the
// model, and checks that they agree.
func ringOp(t testing.TB, r *Ring[int], model []int, op byte, v int) []int {
	t.Helper()
	switch op % 8 {
	case 0, 1, 2, 3: // pushes slightly outnumber pops, so the ring grows
		r.Push(v)
		model = append(model, v)
	case 4, 5, 6:
		got, ok := r.Pop()
		require.Equal(t, len(model) > 0, ok, "Pop ok")
		if ok {
			require.Equal(t, model[0], got, "Pop value")
			model = slices.Delete(model, 0, 1)
		}
	case 7:
		if op%64 == 7 { // rarely, so the ring gets a chance to grow
			r.Clear()
			model = model[:0]
			require.Zero(t, r.Cap())
		}
	}
	checkRing(t, r, model)
	return model
}

func TestRing_MatchesSliceModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for run := range 20 {
		var r Ring[int]
		var model []int
		// Alternate phases biased to push and to pop, so runs climb
		// through several capacities and come back down.
		for phase := range 6 {
			for i := range 200 {
				op := byte(rng.IntN(256))
				if phase%2 == 1 && op%8 < 4 && rng.IntN(2) == 0 {
					op += 4 // bias this phase towards Pop
				}
				model = ringOp(t, &r, model, op, run*10000+phase*1000+i)
			}
		}
	}
}

func FuzzRing(f *testing.F) {
	f.Add([]byte{0, 0, 0, 4, 4, 4, 4})
	f.Add(slices.Repeat([]byte{0}, 100))
	f.Add(append(slices.Repeat([]byte{1}, 70), slices.Repeat([]byte{5}, 70)...))
	f.Add([]byte{0, 1, 2, 7, 0, 71, 4})
	f.Fuzz(func(t *testing.T, ops []byte) {
		var r Ring[int]
		var model []int
		for i, op := range ops {
			model = ringOp(t, &r, model, op, i)
		}
	})
}

func BenchmarkRing_PushPopSteadyState(b *testing.B) {
	for _, depth := range []int{0, 100, 10_000} {
		b.Run(fmt.Sprint("depth=", depth), func(b *testing.B) {
			var r Ring[*int]
			v := new(int)
			for range depth {
				r.Push(v)
			}
			b.ReportAllocs()
			for b.Loop() {
				r.Push(v)
				r.Pop()
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "values/s")
		})
	}
}
