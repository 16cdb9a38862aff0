package shard

import (
	"cmp"
	"slices"
)

// Assign returns the owner of each of n shards among members: a slice of
// n member IDs, or nil if there are no members. Every member computes the
// same assignment from the same set, whatever its order, and duplicates
// count once.
//
// Assign ranks the pairs of member and shard by rendezvous hashing (the
// highest random weight of the pair wins) and gives each shard to its
// highest-ranked member that has fewer than ceil(n/len(members)) shards.
// So no member holds more than that, and a member that joins or leaves
// moves about 1/len(members) of the shards.
func Assign(members []string, n int) []string {
	ids := slices.Clone(members)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	if len(ids) == 0 || n <= 0 {
		return nil
	}
	type pair struct {
		w uint64
		m int32
		s int32
	}
	pairs := make([]pair, 0, len(ids)*n)
	for mi, id := range ids {
		seed := Hash(id)
		for s := range n {
			pairs = append(pairs, pair{w: mix(seed ^ mix(uint64(s)+1)), m: int32(mi), s: int32(s)})
		}
	}
	slices.SortFunc(pairs, func(a, b pair) int {
		if c := cmp.Compare(b.w, a.w); c != 0 {
			return c
		}
		if c := cmp.Compare(a.m, b.m); c != 0 {
			return c
		}
		return cmp.Compare(a.s, b.s)
	})
	// Each member gets floor or ceil of n/len(members) shards: the first
	// n%len(members) to fill up get the ceiling.
	floor, extra := n/len(ids), n%len(ids)
	held := make([]int, len(ids))
	owner := make([]string, n)
	left := n
	for _, p := range pairs {
		if owner[p.s] != "" || held[p.m] > floor || held[p.m] == floor && extra == 0 {
			continue
		}
		if held[p.m] == floor {
			extra--
		}
		owner[p.s] = ids[p.m]
		held[p.m]++
		if left--; left == 0 {
			break
		}
	}
	return owner
}

// mix is SplitMix64's finaliser: it spreads the bits of x, so that the
// weights of one member's shards are unrelated.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
