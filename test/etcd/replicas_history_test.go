package etcd

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/listwatch/mirror/reconcile"
	"github.com/listwatch/mirror/shard"
	"github.com/stretchr/testify/require"
)

// fault is one fault a test made to a replica: when (wall-clock Unix
// nanoseconds), until when for a freeze, and the shards the replica held
// then, for a kill or a leave.
type fault struct {
	replica   string
	at, until int64
	shards    []int
}

// faultLog is the faults of one run.
type faultLog struct {
	kills, leaves, freezes []fault
}

// readHistories reads the calls of the history files at paths: their
// whole lines, so that a file being written can be read.
func readHistories(t testing.TB, paths ...string) []callRecord {
	t.Helper()
	var out []callRecord
	for _, p := range paths {
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		for line := range strings.Lines(string(b)) {
			if !strings.HasSuffix(line, "\n") {
				break // being written
			}
			var r callRecord
			require.NoError(t, json.Unmarshal([]byte(line), &r), "%s: %q", p, line)
			out = append(out, r)
		}
	}
	return out
}

// callHistory is the calls of a run's replicas, by key and by shard, each in
// the order they started.
type callHistory struct {
	byKey   map[string][]callRecord
	byShard map[int][]callRecord
	shards  int
}

func newCallHistory(calls []callRecord, shards int) *callHistory {
	h := &callHistory{byKey: map[string][]callRecord{}, byShard: map[int][]callRecord{}, shards: shards}
	for _, c := range calls {
		h.byKey[c.Key] = append(h.byKey[c.Key], c)
		h.byShard[c.Shard] = append(h.byShard[c.Shard], c)
	}
	byStart := func(a, b callRecord) int { return int(a.Start - b.Start) }
	for _, cs := range h.byKey {
		slices.SortFunc(cs, byStart)
	}
	for _, cs := range h.byShard {
		slices.SortFunc(cs, byStart)
	}
	return h
}

// frozenIn reports whether c is a call of a replica that was frozen while
// the call was in progress: the one case where a call may outlive its
// replica's hold on the shard.
func frozenIn(c callRecord, freezes []fault) bool {
	for _, f := range freezes {
		if c.Replica == f.replica && c.Start <= f.until && c.End >= f.at {
			return true
		}
	}
	return false
}

// at formats a history time.
func at(ns int64) string { return time.Unix(0, ns).Format("15:04:05.000000") }

func (c callRecord) String() string {
	return fmt.Sprintf("%s [%s, %s] token %d write %q", c.Replica, at(c.Start), at(c.End), c.Token, c.Write)
}

// maxViolations caps the violations a check lists.
const maxViolations = 10

// overlaps returns the pairs of calls by two replicas on one key that
// were in progress at once. A call of a frozen replica may overlap its
// successor's (nothing stops a frozen process), provided its write, if
// sent after the successor's call began, was refused.
func (h *callHistory) overlaps(freezes []fault) []string {
	var out []string
	for key, cs := range h.byKey {
		for i, a := range cs {
			for _, b := range cs[i+1:] {
				if b.Start >= a.End {
					break // sorted by start: none later overlaps a
				}
				if a.Replica == b.Replica {
					continue
				}
				if frozenIn(a, freezes) && !(a.Write == writeAccepted && a.WriteAt >= b.Start) {
					continue
				}
				out = append(out, fmt.Sprintf("key %s: %v and %v", key, a, b))
				if len(out) == maxViolations {
					return out
				}
			}
		}
	}
	return out
}

// staleStarts returns the calls that began on a shard after a call with a
// later claim's token had begun on it: work started by a replica that
// had lost the shard. A call of a frozen replica in progress across the
// freeze is not one, but its write must then have been refused, as a
// later claim stood before it began.
func (h *callHistory) staleStarts(freezes []fault) []string {
	var out []string
	for s, cs := range h.byShard {
		var newest callRecord
		for _, c := range cs {
			switch {
			case c.Token == 0:
				out = append(out, fmt.Sprintf("shard %d: key %s: %v without a token", s, c.Key, c))
			case c.Token > newest.Token:
				newest = c
			case c.Token < newest.Token && (!frozenIn(c, freezes) || c.Write == writeAccepted):
				out = append(out, fmt.Sprintf("shard %d: key %s: %v began after key %s: %v", s, c.Key, c, newest.Key, newest))
			}
			if len(out) == maxViolations {
				return out
			}
		}
	}
	return out
}

// unconverged checks every key of names (under prefix) against its final
// value, keys (without prefix; absent if deleted): the last accepted
// write sent before end must have seen that value, and for a key that
// exists, have been made by the replica final gives its shard.
func (h *callHistory) unconverged(keys map[string]string, final map[int]string, names []string, prefix string, end int64) []string {
	var out []string
	for _, name := range names {
		key := prefix + name
		val, exists := keys[name]
		var last callRecord
		for _, c := range h.byKey[key] {
			if c.Write == writeAccepted && c.WriteAt < end && c.Rev > last.Rev {
				last = c
			}
		}
		owner := final[shard.Of(reconcile.KeyHash(key), h.shards)]
		switch {
		case last.Rev == 0:
			out = append(out, fmt.Sprintf("key %s: no accepted write", key))
		case last.Exists != exists || last.Seen != val:
			out = append(out, fmt.Sprintf("key %s: last write (%v) saw %q (exists %v), want %q (exists %v)", key, last, last.Seen, last.Exists, val, exists))
		case exists && last.Replica != owner:
			out = append(out, fmt.Sprintf("key %s: last write by %s, its shard's final owner is %s", key, last.Replica, owner))
		}
		if len(out) == maxViolations {
			break
		}
	}
	return out
}

// takeover returns how long after f the last of f's shards that has
// keys (busy) was first reconciled by another replica, and how many of
// them never were.
func (h *callHistory) takeover(f fault, busy map[int]bool) (time.Duration, int) {
	var worst time.Duration
	missing := 0
	for _, s := range f.shards {
		if !busy[s] {
			continue
		}
		i := slices.IndexFunc(h.byShard[s], func(c callRecord) bool { return c.Replica != f.replica && c.Start > f.at })
		if i < 0 {
			missing++
			continue
		}
		worst = max(worst, time.Duration(h.byShard[s][i].Start-f.at))
	}
	return worst, missing
}

// frozenCalls describes the calls of f's replica in progress across the
// freeze f, and their writes.
func (h *callHistory) frozenCalls(f fault) string {
	n, outcomes := 0, map[string]int{}
	for _, cs := range h.byKey {
		for _, c := range cs {
			if frozenIn(c, []fault{f}) {
				n++
				w := c.Write
				if w != writeNone && c.WriteAt < f.at {
					w += " (sent before the freeze)"
				}
				outcomes[w]++
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d calls in progress across the freeze of %v", n, time.Duration(f.until-f.at).Round(time.Millisecond))
	for _, w := range slices.Sorted(maps.Keys(outcomes)) {
		name := w
		if w == writeNone {
			name = "no write (context ended)"
		}
		fmt.Fprintf(&b, "; %s: %d", name, outcomes[w])
	}
	return b.String()
}

// busyShards returns the shards that hold at least one of names (under
// prefix).
func busyShards(names []string, prefix string, shards int) map[int]bool {
	out := map[int]bool{}
	for _, n := range names {
		out[shard.Of(reconcile.KeyHash(prefix+n), shards)] = true
	}
	return out
}
