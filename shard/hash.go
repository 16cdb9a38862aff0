package shard

import (
	"hash/fnv"
	"math/bits"
)

// DefaultShards is the number of shards a Member divides the hash space
// into when MemberOptions.Shards is zero.
const DefaultShards = 256

// Hash returns the 64-bit FNV-1a hash of s: the hash Kubernetes' sharded
// list and watch (KEP-5866) computes of an object's field (its UID), so
// that a shard's Range can be asked of a kube-apiserver as a selector.
// Its high bits, which place a hash in a shard, are spread well only for
// long, random strings such as UIDs: short keys that share a prefix land
// in few shards. Place keys with KeyHash.
func Hash(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// KeyHash returns a 64-bit hash of key whose bits are all well spread
// (FNV-1a, then SplitMix64's finaliser), so that any set of distinct keys
// spreads evenly over the shards.
func KeyHash(key string) uint64 { return mix(Hash(key)) }

// Of returns the shard, in [0, n), whose Range holds hash h. n must be
// positive.
func Of(h uint64, n int) int {
	hi, _ := bits.Mul64(h, uint64(n))
	return int(hi)
}

// Range is a contiguous range of the 64-bit hash space, both ends
// included.
type Range struct {
	// First is the range's smallest hash.
	First uint64
	// Last is the range's largest hash.
	Last uint64
}

// Contains reports whether h lies in r.
func (r Range) Contains(h uint64) bool { return r.First <= h && h <= r.Last }

// RangeOf returns the hashes shard s of n holds: the hashes h with
// Of(h, n) == s. The n ranges are contiguous, in shard order, and cover
// the whole space.
func RangeOf(s, n int) Range {
	return Range{First: lowest(s, n), Last: lowest(s+1, n) - 1}
}

// lowest returns the smallest hash of shard s of n (0 for s == n, the
// wrapped end of the space): ceil(s * 2^64 / n).
func lowest(s, n int) uint64 {
	if s >= n {
		return 0
	}
	q, r := bits.Div64(uint64(s), 0, uint64(n))
	if r != 0 {
		q++
	}
	return q
}
