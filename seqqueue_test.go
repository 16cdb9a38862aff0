package mirror

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSeqQueue_KeepsOrderAndSequenceNumbersAcrossChunks(t *testing.T) {
	var q seqQueue[int]
	seqOf := map[int]uint64{} // value -> sequence number push returned
	next, want := 0, []int{}
	check := func() {
		t.Helper()
		var got []int
		for seq := range q.seqs() {
			got = append(got, *q.at(seq))
		}
		require.Equal(t, nilIfEmpty(want), got)
		require.Equal(t, len(want), q.len())
		for _, v := range want {
			require.Equal(t, v, *q.at(seqOf[v]), "an entry keeps its sequence number")
		}
		// Only chunks holding queued entries are kept (plus a spare).
		require.LessOrEqual(t, len(q.chunks), (len(want)+chunkLen-1)/chunkLen+1)
	}
	// Interleave pushes and pops so that chunks fill, empty and are
	// reused.
	for round := range 6 {
		for range 300 * (round + 1) {
			seqOf[next] = q.push(next)
			want = append(want, next)
			next++
		}
		check()
		for range 280 * (round + 1) {
			require.Equal(t, want[0], q.pop())
			want = want[1:]
		}
		check()
	}
	for len(want) > 0 {
		require.Equal(t, want[0], q.pop())
		want = want[1:]
	}
	check()
	assert.LessOrEqual(t, len(q.chunks), 1, "memory follows the length down")
}
