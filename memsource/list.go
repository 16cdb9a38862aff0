package memsource

import (
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/listwatch/mirror/source"
)

// maxSnapshots bounds the sorted states kept for paged lists in progress.
// A list whose state was dropped still gets correct pages: its continuation
// rebuilds the state from the history, only more slowly.
const maxSnapshots = 4

// item is one object of a sorted state.
type item[T any] struct {
	key string
	obj T
}

// snapshot is the sorted state at one revision, shared by the pages of the
// lists at that revision. Its items are never modified once built.
type snapshot[T any] struct {
	rev   int64
	items []item[T]
}

// List returns a page of the objects in key order (see
// source.ListWatcher). The first page is at the current revision; a
// revision beyond it fails with source.ErrTooLargeResourceVersion. Later
// pages are at the first's revision, failing with source.ErrExpired if it
// was compacted since, and with ErrInvalid for a token List did not make.
func (s *Source[T]) List(ctx context.Context, opts source.ListOptions) (source.ListResult[T], error) {
	var res source.ListResult[T]
	if err := ctx.Err(); err != nil {
		return res, err
	}
	items, rev, after, err := s.listState(opts)
	if err != nil {
		return res, err
	}

	start := 0
	if opts.Continue != "" {
		i, found := slices.BinarySearchFunc(items, after, func(it item[T], k string) int {
			return strings.Compare(it.key, k)
		})
		if found {
			i++
		}
		start = i
	}
	end := len(items)
	if opts.Limit > 0 && int64(end-start) > opts.Limit {
		end = start + int(opts.Limit)
	}
	res.Items = make([]T, end-start)
	for i, it := range items[start:end] {
		res.Items[i] = it.obj
	}
	res.ResourceVersion = strconv.FormatInt(rev, 10)
	if end < len(items) {
		res.Continue = encodeContinue(rev, items[end-1].key)
	} else if opts.Continue != "" {
		s.mu.Lock()
		s.dropSnapshotLocked(rev)
		s.mu.Unlock()
	}
	return res, nil
}

// listState returns the sorted state a list page is taken from, its
// revision, and for a continuation the key the previous page ended with.
func (s *Source[T]) listState(opts source.ListOptions) (items []item[T], rev int64, after string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.failLocked(); err != nil {
		return nil, 0, "", err
	}
	if opts.Continue != "" {
		rev, after, err = decodeContinue(opts.Continue)
		if err != nil {
			return nil, 0, "", err
		}
		switch {
		case rev > s.rev:
			return nil, 0, "", fmt.Errorf("memsource: continue token at revision %d, beyond the current %d: %w", rev, s.rev, ErrInvalid)
		case rev < s.hist.base:
			return nil, 0, "", fmt.Errorf("memsource: list continuation at revision %d: compacted up to %d: %w", rev, s.hist.base, source.ErrExpired)
		}
	} else {
		want, err := parseVersion(opts.ResourceVersion)
		if err != nil {
			return nil, 0, "", err
		}
		if want > s.rev {
			return nil, 0, "", fmt.Errorf("memsource: list at revision %d, current is %d: %w", want, s.rev, source.ErrTooLargeResourceVersion)
		}
		rev = s.rev
	}
	for _, sn := range s.snaps {
		if sn.rev == rev {
			return sn.items, rev, after, nil
		}
	}
	// Sorting is the costly part of a list; a paged list keeps its result,
	// so that it is done once per list rather than once per page.
	items = s.sortedStateLocked(rev)
	if opts.Limit > 0 && int64(len(items)) > opts.Limit {
		if len(s.snaps) == maxSnapshots {
			s.snaps[0] = snapshot[T]{}
			s.snaps = append(s.snaps[:0], s.snaps[1:]...)
		}
		s.snaps = append(s.snaps, snapshot[T]{rev: rev, items: items})
	}
	return items, rev, after, nil
}

// dropSnapshotLocked forgets the sorted state at rev, once a list has served
// its last page.
func (s *Source[T]) dropSnapshotLocked(rev int64) {
	i := slices.IndexFunc(s.snaps, func(sn snapshot[T]) bool { return sn.rev == rev })
	if i < 0 {
		return
	}
	s.snaps[i] = snapshot[T]{}
	s.snaps = slices.Delete(s.snaps, i, i+1)
}

// stateLocked returns the objects as they were at revision rev, unsorted.
// rev must be between the history's base and the current revision.
func (s *Source[T]) stateLocked(rev int64) []item[T] {
	items := make([]item[T], 0, len(s.objects))
	if rev == s.rev {
		for k, obj := range s.objects {
			items = append(items, item[T]{k, obj})
		}
		return items
	}
	// The state at rev differs from the current one only in the keys changed
	// after rev, and the oldest of those changes to a key says what the key
	// held at rev.
	oldest := make(map[string]*change[T])
	for r := rev + 1; r <= s.rev; r++ {
		c := s.hist.at(r)
		if _, seen := oldest[c.key]; !seen {
			oldest[c.key] = c
		}
	}
	for k, obj := range s.objects {
		if _, changed := oldest[k]; !changed {
			items = append(items, item[T]{k, obj})
		}
	}
	for k, c := range oldest {
		switch c.typ {
		case source.Updated:
			items = append(items, item[T]{k, c.prev})
		case source.Deleted:
			items = append(items, item[T]{k, c.obj})
		}
		// An source.Added key did not exist at rev.
	}
	return items
}

// sortedStateLocked returns the objects at revision rev in key order.
func (s *Source[T]) sortedStateLocked(rev int64) []item[T] {
	items := s.stateLocked(rev)
	slices.SortFunc(items, func(a, b item[T]) int { return strings.Compare(a.key, b.key) })
	return items
}

// encodeContinue makes the token for the page after key in the list at rev.
// Its content is private to this package, so it is encoded to look opaque.
func encodeContinue(rev int64, key string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(rev, 10) + ":" + key))
}

func decodeContinue(token string) (rev int64, key string, err error) {
	b, err := base64.RawURLEncoding.DecodeString(token)
	if err == nil {
		revText, k, ok := strings.Cut(string(b), ":")
		rev, err = strconv.ParseInt(revText, 10, 64)
		if ok && err == nil && rev > 0 {
			return rev, k, nil
		}
	}
	return 0, "", fmt.Errorf("memsource: malformed continue token %q: %w", token, ErrInvalid)
}
