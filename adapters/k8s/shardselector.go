package k8s

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/listwatch/mirror/shard"
	"github.com/listwatch/mirror/source"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// HeldRanges returns the hash ranges of the shards held, of n: one Range
// per run of adjacent shards (see shard.RangeOf), in order. Duplicates
// and shards outside [0, n) are ignored.
func HeldRanges(held []int, n int) []shard.Range {
	s := slices.Clone(held)
	slices.Sort(s)
	s = slices.Compact(s)
	var out []shard.Range
	for _, i := range s {
		if i < 0 || i >= n {
			continue
		}
		r := shard.RangeOf(i, n)
		if k := len(out) - 1; k >= 0 && out[k].Last != math.MaxUint64 && out[k].Last+1 == r.First {
			out[k].Last = r.Last
			continue
		}
		out = append(out, r)
	}
	return out
}

// ShardSelector returns the KEP-5866 shard selector of ranges over
// object.metadata.uid, as metav1.ListOptions.ShardSelector takes it: one
// shardRange(object.metadata.uid, '0x<first>', '0x<last+1>') per range,
// joined by " || ". It returns "" for no ranges, which a server reads as
// no selector at all: a caller that wants nothing must not send it.
func ShardSelector(ranges []shard.Range) string {
	var b strings.Builder
	for i, r := range ranges {
		if i > 0 {
			b.WriteString(" || ")
		}
		end := fmt.Sprintf("0x%016x", r.Last+1)
		if r.Last == math.MaxUint64 {
			end = "0x10000000000000000"
		}
		fmt.Fprintf(&b, "shardRange(object.metadata.uid, '0x%016x', '%s')", r.First, end)
	}
	return b.String()
}

// ShardHash returns the hash of obj that places it in a shard: the
// FNV-1a hash of its UID (shard.Hash), which KEP-5866's
// shardRange(object.metadata.uid, ...) computes too.
func ShardHash[T Object](obj T) uint64 { return shard.Hash(string(obj.GetUID())) }

// nothing is the selector sent while no shard is held: a range of the one
// hash 0, whose objects (if any) the ListWatcher drops.
var nothing = []shard.Range{{First: 0, Last: 0}}

// ShardedListWatcher lists and watches only the objects of the shards a
// member holds: a ListWatcher whose requests carry a KEP-5866 shard
// selector of the held shards' hash ranges (see ShardSelector and
// ShardHash), so that each replica of a controller caches about 1/N of
// the objects. Make one with NewSharded and keep it in step with a
// member's shards with Follow (or Set); until then it holds no shard and
// lists nothing.
//
// The selector is alpha in Kubernetes 1.37 (feature gate
// ShardedListAndWatch); a server without it ignores the selector and
// sends every object. The ListWatcher drops, in lists and watches alike,
// every object outside its ranges, so its informer holds the same objects
// with any server; only the traffic and the server's work differ.
//
// When the held shards change, the ListWatcher ends its watches with an
// error wrapping source.ErrExpired (and a list in progress fails with
// one), so that its informer lists again, with the new ranges. What the
// informer's handlers see of that list (a mirror.Change's Type, Origin
// and FinalStateUnknown; a Handler's calls alike):
//
//   - An object of a shard gained: Added with mirror.OriginRelist
//     (mirror.OriginInitialList before the informer's first sync).
//   - An object of a shard lost: Deleted with FinalStateUnknown and
//     mirror.OriginRelist. It left the ranges, not the source: Selects
//     reports false for it (see below). The cache no longer holds it, and
//     it is the next holder's to handle.
//   - An object of a shard kept: nothing if it did not change (a handler
//     due for a resync is offered it with mirror.OriginResync), Updated
//     with mirror.OriginRelist if it changed, and Deleted with
//     FinalStateUnknown and mirror.OriginRelist if it was deleted at the
//     source since the watch ended; Selects reports true for these.
//
// So a deletion is one at the source if its Origin is mirror.OriginLive
// (the watch saw it), or if Selects(obj) reports true; a Deleted with
// another Origin for which Selects reports false is an object that left
// the member's shards. Selects answers for the ranges of now: if the
// shards changed again before the handler ran (a shard lost and gained
// back), it may call a departure a deletion; the object then comes back
// as Added with the list that follows. An object deleted at the source
// while its shard moved may reach neither holder as a deletion (the old
// one tells it as a departure, the new one never lists it): a controller
// that must act on every deletion uses a finalizer, as it must with any
// informer, whose relists report deletions with an unknown final state.
//
// A ShardedListWatcher is safe for concurrent use.
type ShardedListWatcher[T Object] struct {
	lw *ListWatcher[T]

	mu       sync.Mutex
	gen      uint64
	ranges   []shard.Range // nil: no shard held
	watchers map[*shardedWatcher[T]]struct{}
}

var (
	_ source.ListWatcher[*metav1.PartialObjectMetadata] = (*ShardedListWatcher[*metav1.PartialObjectMetadata])(nil)
	_ source.StreamingListPreferrer                     = (*ShardedListWatcher[*metav1.PartialObjectMetadata])(nil)
)

// NewSharded returns a ShardedListWatcher of lw's objects, which holds no
// shard yet. lw's own selectors and options apply too.
func NewSharded[T Object](lw *ListWatcher[T]) *ShardedListWatcher[T] {
	return &ShardedListWatcher[T]{lw: lw, watchers: map[*shardedWatcher[T]]struct{}{}}
}

// Follow keeps the ListWatcher's shards those m holds, from now until the
// returned function is called (see shard.Member.Subscribe): m's shards
// before it calls Follow's function first, none.
func (s *ShardedListWatcher[T]) Follow(m *shard.Member) (stop func()) {
	n := m.Options().Shards
	held := map[int]bool{}
	// Subscribe calls one at a time: held needs no lock.
	return m.Subscribe(func(gained, lost []int) {
		for _, i := range lost {
			delete(held, i)
		}
		for _, i := range gained {
			held[i] = true
		}
		list := make([]int, 0, len(held))
		for i := range held {
			list = append(list, i)
		}
		s.Set(list, n)
	})
}

// Set makes held, of n shards, the shards the ListWatcher lists and
// watches. If they differ from the ranges it had, its watches end and a
// list in progress fails, both with an error wrapping source.ErrExpired,
// so that its informer lists again.
func (s *ShardedListWatcher[T]) Set(held []int, n int) {
	ranges := HeldRanges(held, n)
	s.mu.Lock()
	if slices.Equal(ranges, s.ranges) {
		s.mu.Unlock()
		return
	}
	s.ranges = ranges
	s.gen++
	ended := s.watchers
	s.watchers = map[*shardedWatcher[T]]struct{}{}
	s.mu.Unlock()
	for w := range ended {
		w.moved.Store(true)
		w.w.Stop()
	}
}

// Ranges returns the hash ranges the ListWatcher asks for, in order (see
// HeldRanges), in a slice the caller owns.
func (s *ShardedListWatcher[T]) Ranges() []shard.Range {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.ranges)
}

// Selects reports whether obj lies in the ranges the ListWatcher asks for
// now: whether its informer's cache is to hold it.
func (s *ShardedListWatcher[T]) Selects(obj T) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return inRanges(s.ranges, ShardHash(obj))
}

// PrefersStreamingList passes the question on to the ListWatcher it
// shards.
func (s *ShardedListWatcher[T]) PrefersStreamingList() bool { return s.lw.PrefersStreamingList() }

func inRanges(ranges []shard.Range, h uint64) bool {
	for _, r := range ranges {
		if r.Contains(h) {
			return true
		}
	}
	return false
}

// current returns the generation of the ranges and a ListWatcher that
// asks for them.
func (s *ShardedListWatcher[T]) current() (uint64, []shard.Range, *ListWatcher[T]) {
	s.mu.Lock()
	gen, ranges := s.gen, s.ranges
	s.mu.Unlock()
	sel := ranges
	if len(sel) == 0 {
		sel = nothing
	}
	selector := ShardSelector(sel)
	lw := *s.lw
	// Every request, through a client's functions or the adapter's own
	// (NewForConfig), starts from lw's listOptions.
	lw.shardSelector = selector
	return gen, ranges, &lw
}

// movedError is the error of a list or watch that the held shards changed
// under.
func (s *ShardedListWatcher[T]) movedError(what string) error {
	return fmt.Errorf("k8s: %s %s: the held shards changed: %w", what, s.lw.name(), source.ErrExpired)
}

// List lists one page of the objects of the held shards (see
// ListWatcher.List). A page after the first whose list began before the
// held shards changed fails with an error wrapping source.ErrExpired.
func (s *ShardedListWatcher[T]) List(ctx context.Context, opts source.ListOptions) (source.ListResult[T], error) {
	gen, ranges, lw := s.current()
	if opts.Continue != "" {
		g, token, ok := strings.Cut(opts.Continue, ":")
		if !ok || g != strconv.FormatUint(gen, 10) {
			return source.ListResult[T]{}, s.movedError("list")
		}
		opts.Continue = token
	}
	res, err := lw.List(ctx, opts)
	if err != nil {
		return res, err
	}
	res.Items = slices.DeleteFunc(res.Items, func(obj T) bool { return !inRanges(ranges, ShardHash(obj)) })
	if res.Continue != "" {
		res.Continue = strconv.FormatUint(gen, 10) + ":" + res.Continue
	}
	return res, nil
}

// Watch watches the objects of the held shards (see ListWatcher.Watch).
// The watch ends with an error wrapping source.ErrExpired when the held
// shards change.
func (s *ShardedListWatcher[T]) Watch(ctx context.Context, opts source.WatchOptions) (source.Watcher[T], error) {
	gen, ranges, lw := s.current()
	inner, err := lw.Watch(ctx, opts)
	if err != nil {
		return nil, err
	}
	w := &shardedWatcher[T]{s: s, w: inner, ranges: ranges}
	s.mu.Lock()
	if s.gen != gen {
		s.mu.Unlock()
		inner.Stop()
		return nil, s.movedError("watch")
	}
	s.watchers[w] = struct{}{}
	s.mu.Unlock()
	return w, nil
}

// forget stops tracking w.
func (s *ShardedListWatcher[T]) forget(w *shardedWatcher[T]) {
	s.mu.Lock()
	delete(s.watchers, w)
	s.mu.Unlock()
}

// shardedWatcher is a watch of a ShardedListWatcher: it drops the objects
// outside its ranges, and ends when the held shards change.
type shardedWatcher[T Object] struct {
	s      *ShardedListWatcher[T]
	w      source.Watcher[T]
	ranges []shard.Range
	moved  atomic.Bool
}

func (w *shardedWatcher[T]) Next(ctx context.Context) (source.Event[T], error) {
	for {
		if w.moved.Load() {
			w.w.Stop()
			return source.Event[T]{}, w.s.movedError("watch")
		}
		ev, err := w.w.Next(ctx)
		if err != nil {
			w.s.forget(w)
			if w.moved.Load() {
				err = w.s.movedError("watch")
			}
			return ev, err
		}
		switch ev.Type {
		case source.Added, source.Updated, source.Deleted:
			if !inRanges(w.ranges, ShardHash(ev.Object)) {
				continue
			}
		}
		return ev, nil
	}
}

func (w *shardedWatcher[T]) Stop() {
	w.w.Stop()
	w.s.forget(w)
}
