package shard

import (
	"slices"
)

// Assign returns the owner of each of n shards among members: a slice of
// n member IDs, or nil if there are no members. Every member computes the
// same assignment from the same set, whatever its order, and duplicates
// count once.
//
// Each shard first goes to the member of highest random weight for it
// (rendezvous hashing), so that a join or a leave moves about
// 1/len(members) of the shards; then, while a member holds more than an
// eighth over its fair share (n/len(members)) or less than an eighth
// under, the shard whose move loses least weight moves to a member that
// can take it. So the most shards a member holds is at most 1.27 times
// the fewest, give or take the rounding of small shares.
func Assign(members []string, n int) []string {
	ids := slices.Clone(members)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	if len(ids) == 0 || n <= 0 {
		return nil
	}
	seeds := make([]uint64, len(ids))
	for i, id := range ids {
		seeds[i] = Hash(id)
	}
	weight := func(m, s int) uint64 { return mix(seeds[m] ^ mix(uint64(s)+1)) }
	owner := make([]int, n)
	held := make([]int, len(ids))
	for s := range n {
		best := 0
		for m := 1; m < len(ids); m++ {
			if weight(m, s) > weight(best, s) {
				best = m
			}
		}
		owner[s] = best
		held[best]++
	}
	// Each member keeps between lo and hi shards: within an eighth of
	// the fair share either way, so that the most a member holds is at most
	// 1.27 times the fewest, and few shards move for balance's sake.
	lo := min(int(float64(n)/float64(len(ids))/1.125+0.999999), n/len(ids))
	hi := max(int(float64(n)/float64(len(ids))*1.125), (n+len(ids)-1)/len(ids))
	for {
		over, under := false, false
		for m := range ids {
			over = over || held[m] > hi
			under = under || held[m] < lo
		}
		if !over && !under {
			break
		}
		// The cheapest move that mends an excess or a shortfall: from a
		// member over hi (or, if none is, above lo) to one under lo (or,
		// if none is, below hi).
		bs, bt := -1, -1
		var bcost uint64
		for s := range n {
			m := owner[s]
			if over && held[m] <= hi || !over && held[m] <= lo {
				continue
			}
			wm := weight(m, s)
			for t := range ids {
				if under && held[t] >= lo || !under && held[t] >= hi {
					continue
				}
				wt := weight(t, s)
				var cost uint64
				if wm > wt {
					cost = wm - wt
				}
				if bs < 0 || cost < bcost {
					bs, bt, bcost = s, t, cost
				}
			}
		}
		held[owner[bs]]--
		owner[bs] = bt
		held[bt]++
	}
	out := make([]string, n)
	for s, m := range owner {
		out[s] = ids[m]
	}
	return out
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
