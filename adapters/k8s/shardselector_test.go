package k8s

import (
	"context"
	"fmt"
	"math"
	"net/url"
	"testing"

	"github.com/listwatch/mirror/shard"
	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
)

func TestHeldRanges_MergesAdjacentShards(t *testing.T) {
	q := uint64(1) << 62 // a quarter of the hash space
	for _, tc := range []struct {
		name string
		held []int
		want []shard.Range
	}{
		{"none", nil, nil},
		{"one", []int{1}, []shard.Range{{First: q, Last: 2*q - 1}}},
		{"adjacent merge", []int{2, 1}, []shard.Range{{First: q, Last: 3*q - 1}}},
		{"apart stay apart", []int{0, 2}, []shard.Range{{First: 0, Last: q - 1}, {First: 2 * q, Last: 3*q - 1}}},
		{"all is the whole space", []int{3, 0, 2, 1, 1}, []shard.Range{{First: 0, Last: math.MaxUint64}}},
		{"out of range ignored", []int{-1, 4, 3}, []shard.Range{{First: 3 * q, Last: math.MaxUint64}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, HeldRanges(tc.held, 4))
		})
	}
}

func TestShardSelector_WritesKEP5866RangesWithExclusiveEnds(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ranges []shard.Range
		want   string
	}{
		{"none", nil, ""},
		{"first half", []shard.Range{{First: 0, Last: 1<<63 - 1}},
			"shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')"},
		{"last ends at 2^64", []shard.Range{{First: 0x10, Last: 0x1f}, {First: 1 << 63, Last: math.MaxUint64}},
			"shardRange(object.metadata.uid, '0x0000000000000010', '0x0000000000000020') || " +
				"shardRange(object.metadata.uid, '0x8000000000000000', '0x10000000000000000')"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, ShardSelector(tc.ranges))
		})
	}
}

// podsOfShards returns n pods with UIDs in shard s of 2 and n in the
// other.
func podsOfShards(s, n int) (in, out []*corev1.Pod) {
	for i := 0; len(in) < n || len(out) < n; i++ {
		p := pod("ns", fmt.Sprint("p", i), "5")
		p.UID = types.UID(fmt.Sprint("uid-", i))
		if shard.Of(ShardHash(p), 2) == s {
			if len(in) < n {
				in = append(in, p)
			}
		} else if len(out) < n {
			out = append(out, p)
		}
	}
	return in, out
}

func TestShardedListWatcher_ListAsksForTheHeldRangesAndDropsOthers(t *testing.T) {
	in, out := podsOfShards(1, 2)
	f := &fakePods{lists: []fakeList{
		{list: podList("9", "", in[0], out[0], in[1], out[1])},
		{list: podList("9", "")},
	}}
	s := NewSharded(f.lw(Options{LabelSelector: "app=web"}))
	s.Set([]int{1}, 2)
	res, err := s.List(context.Background(), source.ListOptions{})
	require.NoError(t, err)
	assert.Equal(t, []*corev1.Pod{in[0], in[1]}, res.Items)
	assert.Equal(t, ShardSelector(HeldRanges([]int{1}, 2)), f.listOpts[0].ShardSelector)
	assert.Equal(t, "app=web", f.listOpts[0].LabelSelector)
	assert.True(t, s.Selects(in[0]))
	assert.False(t, s.Selects(out[0]))

	// No shard held: a selector of next to nothing, never "" (everything).
	s.Set(nil, 2)
	_, err = s.List(context.Background(), source.ListOptions{})
	require.NoError(t, err)
	assert.NotEmpty(t, f.listOpts[1].ShardSelector)
	assert.False(t, s.Selects(in[0]))
}

func TestShardedListWatcher_ChangedShardsEndWatchesAndListsWithErrExpired(t *testing.T) {
	in, out := podsOfShards(0, 1)
	src := newFakeSource()
	f := &fakePods{
		lists:   []fakeList{{list: podList("9", "next")}},
		watches: []fakeWatch{{src: src}},
	}
	s := NewSharded(f.lw(Options{}))
	s.Set([]int{0}, 2)

	page, err := s.List(context.Background(), source.ListOptions{Limit: 1})
	require.NoError(t, err)
	require.NotEmpty(t, page.Continue)
	w, err := s.Watch(context.Background(), source.WatchOptions{ResourceVersion: "9"})
	require.NoError(t, err)
	src.events <- watch.Event{Type: watch.Added, Object: out[0]}
	src.events <- watch.Event{Type: watch.Added, Object: in[0]}
	ev, err := w.Next(context.Background())
	require.NoError(t, err)
	assert.Equal(t, in[0], ev.Object, "the object outside the ranges is dropped")

	s.Set([]int{0}, 2) // the same shards: nothing ends
	assert.False(t, src.isStopped())
	s.Set([]int{0, 1}, 2)
	assert.True(t, src.isStopped(), "the watch of the old ranges is stopped")
	_, err = w.Next(context.Background())
	assert.ErrorIs(t, err, source.ErrExpired)
	_, err = s.List(context.Background(), source.ListOptions{Limit: 1, Continue: page.Continue})
	assert.ErrorIs(t, err, source.ErrExpired, "a page of a list of the old ranges")
}

func TestShardedListWatcher_OverNewForConfigAsksForTheHeldRanges(t *testing.T) {
	in, out := podsOfShards(1, 2)
	s := &wireServer{pods: []*corev1.Pod{in[0], out[0]}}
	cfg := startWireServer(t, s)
	sharded := NewSharded(newPodsForConfig(t, cfg, Options{}))
	sharded.Set([]int{1}, 2)
	res, err := sharded.List(context.Background(), source.ListOptions{Limit: 10})
	require.NoError(t, err)
	// The test server ignores the selector: the client drops the rest.
	require.Len(t, res.Items, 1)
	assert.Equal(t, in[0].Name, res.Items[0].Name)
	q, err := url.ParseQuery(s.queries[0])
	require.NoError(t, err)
	assert.Equal(t, ShardSelector(HeldRanges([]int{1}, 2)), q.Get("shardSelector"))
}
