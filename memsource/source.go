// Package memsource provides an in-memory versioned source of objects that
// implements source.ListWatcher.
//
// A Source holds the current object of every key together with a bounded
// history of recent changes. Every change gets the next revision, and
// revisions are the source's resource versions, as decimal strings. A new
// Source is at revision 1 (see New) and its first change gets revision 2.
// Lists are paged in key order and every page is served at the revision of
// the first; watches replay history from any revision the source still
// holds.
//
// Use it to put a local store of your own behind a mirror, or to drive the
// consumers of a ListWatcher in tests: the fault hooks (CutWatches, FailNext,
// Compact, Bookmark) reproduce what a remote source does to its clients.
package memsource

import (
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/source"
)

// DefaultHistoryLimit is the number of past changes a Source keeps when
// Options.HistoryLimit is not positive.
const DefaultHistoryLimit = 10000

// ErrInvalid is wrapped by the errors for a resource version or a continue
// token that a Source cannot parse.
var ErrInvalid = errors.New("memsource: invalid request")

// Options configures a Source. The zero value is ready to use.
type Options struct {
	// HistoryLimit is how many past changes are kept for watches that start
	// in the past and for paged lists. When a change would exceed it, the
	// oldest is compacted away. Zero or less means DefaultHistoryLimit.
	HistoryLimit int
}

// Source is an in-memory versioned source: a map from key to object with a
// revision counter and a bounded history of changes. It implements
// source.ListWatcher[T] and is safe for concurrent use. Objects are stored
// as given and must not be modified after Put. Create it with New.
type Source[T any] struct {
	key mirror.KeyFunc[string, T]

	mu      sync.Mutex
	objects map[string]T
	rev     int64 // revision of the newest change; 1 before the first
	revText revText
	hist    history[T]

	watchers map[*watcher[T]]struct{} // every open watcher
	parked   []*watcher[T]            // watchers blocked in Next, to wake on a change
	snaps    []snapshot[T]            // sorted states kept for paged lists

	failN   int   // how many List/Watch calls still fail with failErr
	failErr error //
}

// New returns an empty Source at revision 1, as a new etcd cluster is.
// key names an object, as an informer's KeyFunc does.
func New[T any](key mirror.KeyFunc[string, T], opts Options) *Source[T] {
	limit := opts.HistoryLimit
	if limit <= 0 {
		limit = DefaultHistoryLimit
	}
	return &Source[T]{
		key:      key,
		objects:  make(map[string]T),
		rev:      1,
		hist:     history[T]{limit: limit, base: 1},
		watchers: make(map[*watcher[T]]struct{}),
	}
}

// Put creates or replaces the object with obj's key and returns the
// revision of that change; every call is a change. If the key function
// fails or panics, Put changes nothing and returns a *mirror.KeyError.
func (s *Source[T]) Put(obj T) (rev int64, err error) {
	inKey, locked := true, false
	defer func() {
		// One deferred call for the lock and a panic of the key
		// function: a second would cost every Put.
		if locked {
			s.mu.Unlock()
		}
		if inKey {
			if v := recover(); v != nil {
				err = &mirror.KeyError{Object: obj, Err: &mirror.PanicError{Value: v, Stack: debug.Stack()}}
			}
		}
	}()
	k, err := s.key(obj)
	inKey = false
	if err != nil {
		return 0, &mirror.KeyError{Object: obj, Err: err}
	}
	s.mu.Lock()
	locked = true
	c := change[T]{key: k, typ: source.Added, obj: obj}
	if prev, ok := s.objects[k]; ok {
		c.typ = source.Updated
		c.prev = prev
	}
	s.objects[k] = obj
	return s.recordLocked(c), nil
}

// Delete removes the object stored under key and returns the revision of
// that change and true, or the current revision and false if there is no
// such object.
func (s *Source[T]) Delete(key string) (rev int64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	prev, ok := s.objects[key]
	if !ok {
		return s.rev, false
	}
	delete(s.objects, key)
	return s.recordLocked(change[T]{key: key, typ: source.Deleted, obj: prev}), true
}

// recordLocked gives c the next revision, appends it to the history and
// wakes the watchers waiting for it.
func (s *Source[T]) recordLocked(c change[T]) int64 {
	s.rev++
	// The string is made once here and shared by every watcher that
	// delivers the change, rather than once per watcher.
	c.rv = s.revText.get(s.rev)
	s.hist.push(c)
	for i, w := range s.parked {
		w.parked = false
		w.wake()
		s.parked[i] = nil
	}
	s.parked = s.parked[:0]
	return s.rev
}

// Get returns the object stored under key.
func (s *Source[T]) Get(key string) (T, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	obj, ok := s.objects[key]
	return obj, ok
}

// Len returns the number of objects.
func (s *Source[T]) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.objects)
}

// Revision returns the revision of the newest change, or 1, the revision of
// a new Source, if there was none.
func (s *Source[T]) Revision() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rev
}

// Snapshot returns a copy of the current content, by key.
func (s *Source[T]) Snapshot() map[string]T {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := make(map[string]T, len(s.objects))
	for k, v := range s.objects {
		m[k] = v
	}
	return m
}

// Compact forgets the changes up to and including rev (at most the
// current revision). Afterwards, watches from an older revision, list
// continuations at one, and open watches that had yet to read a forgotten
// change fail with an error wrapping source.ErrExpired.
func (s *Source[T]) Compact(rev int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hist.compact(min(rev, s.rev))
}

// CutWatches ends every open watch, as a dropped connection would: their
// Next returns an error wrapping source.ErrUnavailable.
func (s *Source[T]) CutWatches() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for w := range s.watchers {
		w.finishLocked(fmt.Errorf("memsource: watch cut: %w", source.ErrUnavailable))
	}
}

// FailNext makes the next n calls of List or Watch (together) fail with err
// and do nothing else. A later call replaces an earlier one; n <= 0 cancels
// the failures still pending.
func (s *Source[T]) FailNext(n int, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failN, s.failErr = max(n, 0), err
	if s.failN == 0 {
		s.failErr = nil
	}
}

// Bookmark sends an source.Bookmark at the current revision to every open
// watch that allowed bookmarks, after the changes up to that revision.
func (s *Source[T]) Bookmark() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for w := range s.watchers {
		if w.bookmarks {
			w.bookmarkAt = s.rev
			w.bookmarkDue = true
			w.wake()
		}
	}
}

// failLocked consumes one failure set by FailNext, if any.
func (s *Source[T]) failLocked() error {
	if s.failN == 0 {
		return nil
	}
	s.failN--
	err := s.failErr
	if s.failN == 0 {
		s.failErr = nil
	}
	return err
}

// change is one entry of the history.
type change[T any] struct {
	key string
	rv  string // the change's revision, formatted once for every watcher
	typ source.EventType
	obj T // the state after the change; for source.Deleted, the last state
	// prev is the state before an source.Updated, which a paged list needs
	// to rebuild an older revision.
	prev T
}

// history is a ring of the changes after revision base, oldest first: the
// change with revision r sits at position r-base-1, so a watcher needs only
// a revision to find its place. base starts at 1, the revision of a new
// Source, which no change has. It grows up to limit entries.
type history[T any] struct {
	buf   []change[T]
	head  int   // index in buf of the oldest change
	n     int   // number of changes held
	base  int64 // revision before the oldest change held
	limit int
}

// push appends c, which must have revision base+n+1, dropping the oldest
// change when the history is at its limit.
func (h *history[T]) push(c change[T]) {
	if h.n == h.limit {
		h.dropOldest()
	}
	if h.n == len(h.buf) {
		h.grow()
	}
	h.buf[(h.head+h.n)%len(h.buf)] = c
	h.n++
}

func (h *history[T]) grow() {
	size := min(max(2*len(h.buf), 64), h.limit)
	buf := make([]change[T], size)
	// Unroll the ring so that the oldest change is at index 0.
	m := copy(buf, h.buf[h.head:])
	copy(buf[m:], h.buf[:h.head])
	h.buf, h.head = buf, 0
}

func (h *history[T]) dropOldest() {
	h.buf[h.head] = change[T]{} // let the collector have the objects
	h.head = (h.head + 1) % len(h.buf)
	h.n--
	h.base++
}

// compact drops every change up to revision rev.
func (h *history[T]) compact(rev int64) {
	for h.base < rev && h.n > 0 {
		h.dropOldest()
	}
}

// at returns the change with revision rev, which must be held:
// base < rev <= base+n.
func (h *history[T]) at(rev int64) *change[T] {
	return &h.buf[(h.head+int(rev-h.base-1))%len(h.buf)]
}

// revChunk is how many consecutive revisions revText formats at once.
const revChunk = 64

// revText hands out the decimal strings of consecutive revisions. It formats
// them revChunk at a time into one string and returns substrings of it, so
// that a change costs no allocation of its own. A chunk stays in memory while
// any of its strings does, which is a few hundred bytes.
type revText struct {
	first int64           // the revision of the first string in text
	text  string          // the strings of revisions first, first+1, ..., concatenated
	ends  [revChunk]int32 // where each revision's string ends in text
}

// get returns the decimal string of rev.
func (r *revText) get(rev int64) string {
	i := rev - r.first
	if r.text == "" || i < 0 || i >= revChunk {
		r.fill(rev)
		i = 0
	}
	start := int32(0)
	if i > 0 {
		start = r.ends[i-1]
	}
	return r.text[start:r.ends[i]]
}

func (r *revText) fill(first int64) {
	var b strings.Builder
	b.Grow(revChunk * len(strconv.FormatInt(first+revChunk, 10)))
	var digits [20]byte
	for i := range int64(revChunk) {
		b.Write(strconv.AppendInt(digits[:0], first+i, 10))
		r.ends[i] = int32(b.Len())
	}
	r.first, r.text = first, b.String()
}

// parseVersion parses a resource version; "" and "0" mean the current
// revision and yield 0, which is never a Source's revision.
func parseVersion(v string) (int64, error) {
	if v == "" {
		return 0, nil
	}
	rev, err := strconv.ParseInt(v, 10, 64)
	if err != nil || rev < 0 {
		return 0, fmt.Errorf("memsource: resource version %q is not a revision: %w", v, ErrInvalid)
	}
	return rev, nil
}
