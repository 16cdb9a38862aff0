package shard

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestHash_IsFNV1a64(t *testing.T) {
	// FNV-1a's published test vectors.
	assert.Equal(t, uint64(0xcbf29ce484222325), Hash(""))
	assert.Equal(t, uint64(0xaf63dc4c8601ec8c), Hash("a"))
	assert.Equal(t, uint64(0x85944171f73967e8), Hash("foobar"))
}

func TestRangeOf_CoversTheSpaceInOrder(t *testing.T) {
	for _, n := range []int{1, 2, 3, 7, 255, 256, 1000} {
		var next uint64
		for s := range n {
			r := RangeOf(s, n)
			require.Equal(t, next, r.First, "n=%d shard %d starts where the last ended", n, s)
			require.LessOrEqual(t, r.First, r.Last)
			assert.Equal(t, s, Of(r.First, n))
			assert.Equal(t, s, Of(r.Last, n))
			assert.True(t, r.Contains(r.First) && r.Contains(r.Last))
			if s > 0 {
				assert.Equal(t, s-1, Of(r.First-1, n))
			}
			next = r.Last + 1
		}
		assert.Equal(t, uint64(math.MaxUint64), RangeOf(n-1, n).Last, "n=%d: the last shard ends at the top", n)
	}
}

func TestOf_256ShardsAreTheTopByte(t *testing.T) {
	for _, h := range []uint64{0, 1, 0x00ffffffffffffff, 0x0100000000000000, 0xab12345678901234, math.MaxUint64} {
		assert.Equal(t, int(h>>56), Of(h, 256))
	}
}

func TestKeyHash_SpreadsKeysThatShareAPrefix(t *testing.T) {
	perShard := map[int]int{}
	for i := range 2560 {
		perShard[Of(KeyHash(fmt.Sprintf("k%04d", i)), DefaultShards)]++
	}
	assert.Greater(t, len(perShard), DefaultShards*9/10, "keys k0000..k2559 land in most shards")
	for s, n := range perShard {
		assert.Less(t, n, 40, "shard %d holds %d of 2,560 keys", s, n)
	}
}
