package shard

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func members(n int, prefix string) []string {
	ms := make([]string, n)
	for i := range ms {
		ms[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return ms
}

func TestAssign_IsTheSameWhateverTheOrder(t *testing.T) {
	ms := members(7, "replica")
	want := Assign(ms, 256)
	for range 5 {
		shuffled := append([]string(nil), ms...)
		rand.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		shuffled = append(shuffled, shuffled[0]) // a duplicate counts once
		assert.Equal(t, want, Assign(shuffled, 256))
	}
}

func TestAssign_GivesEveryShardToAMember(t *testing.T) {
	assert.Nil(t, Assign(nil, 256))
	assert.Equal(t, []string{"a"}, Assign([]string{"a", "b"}, 1)[:1])
	for _, n := range []int{1, 2, 5, 300} {
		ms := members(n, "m")
		owners := Assign(ms, 256)
		require.Len(t, owners, 256)
		for s, o := range owners {
			assert.Contains(t, ms, o, "shard %d", s)
		}
	}
}

func TestAssign_Balanced(t *testing.T) {
	for n := 1; n <= 32; n++ {
		counts := map[string]int{}
		for _, o := range Assign(members(n, "replica"), 256) {
			counts[o]++
		}
		lo, hi := 256, 0
		for _, c := range counts {
			lo, hi = min(lo, c), max(hi, c)
		}
		require.Len(t, counts, n)
		assert.LessOrEqual(t, float64(hi)/float64(lo), 1.3, "%d members: most %d, fewest %d", n, hi, lo)
	}
}

func TestAssign_AJoinMovesAboutOneNth(t *testing.T) {
	// Over many groups, a join moves on average no more than 1.2/N of the
	// shards, N counting the newcomer, for groups of up to 8.
	for n := 2; n <= 8; n++ {
		moved, trials := 0, 60
		for trial := range trials {
			ms := members(n, fmt.Sprintf("g%d", trial))
			before, after := Assign(ms[:n-1], 256), Assign(ms, 256)
			for s := range after {
				if before[s] != after[s] {
					moved++
				}
			}
		}
		share := float64(moved) / float64(trials) / 256
		assert.LessOrEqual(t, share, 1.2/float64(n), "join to %d members moved %.3f of the shards", n, share)
	}
}
