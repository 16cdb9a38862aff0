package mirror

import (
	"runtime"
	"strconv"
	"testing"
	"unsafe"
	"weak"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// feedNote is the notification numbered i in these tests.
func feedNote(i int) notification[string, string] {
	return notification[string, string]{kind: notifyAdd, key: "k", obj: strconv.Itoa(i)}
}

// readAll reads p's feed up to end, at most max notifications per read,
// and returns the objects read and the position after them.
func readAll(f *feed[string, string], p feedPos[string, string], end uint64, max int) ([]string, feedPos[string, string]) {
	var got []string
	buf := make([]notification[string, string], max)
	for {
		n, next := f.read(p, buf, end)
		p = next
		if n == 0 {
			return got, p
		}
		for _, x := range buf[:n] {
			got = append(got, x.obj)
		}
	}
}

func wantObjs(from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, strconv.Itoa(i))
	}
	return out
}

func TestFeed_ReadsInAppendOrderAcrossChunksUpToEnd(t *testing.T) {
	const total = 3*feedChunkLen + 5
	tests := []struct {
		name string
		max  int // notifications per read
		end  int // read up to
	}{
		{"one at a time", 1, total},
		{"odd batches", 7, total},
		{"a chunk at a time", feedChunkLen, total},
		{"more than there is", 5 * feedChunkLen, total},
		{"stops at end inside a chunk", 7, feedChunkLen + 3},
		{"stops at a chunk boundary", 9, 2 * feedChunkLen},
		{"nothing published", 7, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var f feed[string, string]
			p := f.follow()
			for i := range total {
				f.append(feedNote(i))
			}
			got, p := readAll(&f, p, uint64(tt.end), tt.max)
			assert.Equal(t, wantObjs(0, tt.end), got)
			assert.Equal(t, uint64(tt.end), p.seq)
			// The rest reads on from where the first reader stopped.
			rest, _ := readAll(&f, p, total, tt.max)
			assert.Equal(t, wantObjs(tt.end, total), rest)
		})
	}
}

func TestFeed_ReusesAChunkOnlyOnceEveryFollowerHasPassedIt(t *testing.T) {
	var f feed[string, string]
	fast, slow := f.follow(), f.follow()
	first := f.tail
	for i := range 3 * feedChunkLen {
		f.append(feedNote(i))
	}

	_, fast = readAll(&f, fast, f.seq, 10)
	assert.Empty(t, f.free, "a chunk was reused while a follower had yet to read it")
	got, slow := readAll(&f, slow, 2*feedChunkLen+1, 10)
	require.Equal(t, wantObjs(0, 2*feedChunkLen+1), got, "the slow follower read what the fast one left")
	require.Len(t, f.free, 2, "the first two chunks, passed by both, are kept for reuse")
	assert.Same(t, first, f.free[0])
	for _, c := range f.free {
		assert.Equal(t, [feedChunkLen]notification[string, string]{}, c.items, "a kept chunk still holds notifications")
		assert.Nil(t, c.next)
	}

	// The next chunk is a kept one, and both followers read it whole.
	for i := 3 * feedChunkLen; i < 4*feedChunkLen; i++ {
		f.append(feedNote(i))
	}
	assert.Len(t, f.free, 1)
	got, _ = readAll(&f, fast, f.seq, 10)
	assert.Equal(t, wantObjs(3*feedChunkLen, 4*feedChunkLen), got)
	got, _ = readAll(&f, slow, f.seq, 10)
	assert.Equal(t, wantObjs(2*feedChunkLen+1, 4*feedChunkLen), got)
}

func TestFeed_ChunksFilledWithoutFollowersAreReused(t *testing.T) {
	var f feed[string, string]
	used := map[*feedChunk[string, string]]bool{}
	for i := range 6 * feedChunkLen {
		f.append(feedNote(i))
		used[f.tail] = true
	}
	assert.Len(t, used, 2, "chunks nobody reads alternate instead of piling up")
	p := f.follow()
	f.append(feedNote(-1))
	got, _ := readAll(&f, p, f.seq, 10)
	assert.Equal(t, []string{"-1"}, got)
}

// appendTracked appends n notifications to f and returns weak pointers to
// every chunk they went to.
func appendTracked(f *feed[string, string], from, n int) []weak.Pointer[feedChunk[string, string]] {
	var chunks []weak.Pointer[feedChunk[string, string]]
	var last *feedChunk[string, string]
	for i := from; i < from+n; i++ {
		f.append(feedNote(i))
		if f.tail != last {
			last = f.tail
			chunks = append(chunks, weak.Make(last))
		}
	}
	return chunks
}

func countLive(chunks []weak.Pointer[feedChunk[string, string]]) int {
	runtime.GC()
	n := 0
	for _, c := range chunks {
		if c.Value() != nil {
			n++
		}
	}
	return n
}

// TestFeed_ShrinksBackWhenFollowersCatchUp pins the buffer contract: a
// burst grows the feed, and once every follower has read it, the feed
// holds its last chunk and the chunks it keeps for reuse, which are
// empty.
func TestFeed_ShrinksBackWhenFollowersCatchUp(t *testing.T) {
	const burst = 40 * feedChunkLen
	keep := max(1, feedKeepBytes/int(unsafe.Sizeof(feedChunk[string, string]{})))
	require.Less(t, keep+1, burst/feedChunkLen, "the burst must outgrow what the feed keeps")

	var f feed[string, string]
	a, b := f.follow(), f.follow()
	chunks := appendTracked(&f, 0, burst)
	_, a = readAll(&f, a, f.seq, 100)
	assert.Equal(t, len(chunks), countLive(chunks), "a follower behind keeps the burst")

	_, b = readAll(&f, b, f.seq, 100)
	assert.LessOrEqual(t, countLive(chunks), keep+1, "caught-up followers leave only the last chunk and the kept ones")
	runtime.KeepAlive(a)
	runtime.KeepAlive(b)
}

func TestFeed_UnfollowedFollowerDoesNotKeepChunks(t *testing.T) {
	var f feed[string, string]
	f.follow() // a listener removed before it read anything: its position is dropped
	p := f.follow()
	chunks := appendTracked(&f, 0, 10*feedChunkLen)
	_, p = readAll(&f, p, f.seq, 100)
	f.unfollow()
	assert.Equal(t, 1, countLive(chunks), "only the last chunk is left")
	assert.Empty(t, f.free, "a chunk the removed follower never passed was reused")
	runtime.KeepAlive(p)
}
