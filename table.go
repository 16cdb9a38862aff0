package mirror

import (
	"hash/maphash"
	"iter"
	"unsafe"
)

// table holds an Indexer's objects by key without storing the keys: an
// object's key is its key function's result, computed again when needed.
// A map[K]T stores every key beside its object; for an informer's cache of
// a million pointers keyed by {Namespace, Name}, that map is about 100 MB
// where this table is 25 MB (bench/NOTES.md, "Heap of 1M objects").
//
// Each slot holds a tag (31 bits of the key's hash, with the top bit set)
// and an object. A key is looked for by probing linearly from the slot its
// tag names; an object whose tag matches is confirmed by calling the key
// function on it. So a lookup that finds its key calls the key function
// once, and one that does not almost never does; growing and shrinking
// move tags and objects without calling it.
//
// An object whose key function does not give the key it is stored under
// (Set with another key, or a key function that fails on it) cannot be
// found that way: it is kept in foreign, an ordinary map. A key is in the
// slots or in foreign, never in both.
//
// A delete marks its slot deleted rather than moving the objects after it
// back, so that objects never move within one set of slots: an iteration
// that drops the lock can go on where it was. Every resize moves the
// objects to new slots and counts a move, which tells such an iteration
// that its slots are no longer in use.
type table[K comparable, T any] struct {
	keyFunc KeyFunc[K, T]
	hash    hasher[K]

	slots[T]
	live int // slots holding an object
	dead int // slots tagDeleted

	foreign     map[K]T
	foreignPeak int // the most objects foreign has held

	// moves counts the times the slots were replaced.
	moves uint64
}

const (
	tagEmpty   = 0
	tagDeleted = 1
	tagFull    = 1 << 31 // set in every key's tag

	// maxInline is the size of the largest object held in a slot; larger
	// ones are boxed. A table that grows is between 3/8 and 3/4 full (one
	// that shrinks may fall to 1/8 first), so holding an object of S bytes
	// in its slots costs S/(3/4) to S/(3/8) bytes; boxed, it costs a
	// pointer per slot and S once, which is less from about S = 32, for an
	// allocation per inserted key. (Go's maps, up to 7/8 full, draw the
	// line at 128 bytes.)
	maxInline = 32
)

// slots are a table's arrays. Objects larger than maxInline are held in
// boxes, so that an empty slot costs a pointer rather than an object.
type slots[T any] struct {
	tags  []uint32 // per slot: tagEmpty, tagDeleted, or a key's tag
	vals  []T      // per slot: the object, or the zero T; nil if boxed
	boxes []*T     // per slot: the object's box, or nil; nil if not boxed
}

// makeSlots returns n empty slots.
func makeSlots[T any](n int) slots[T] {
	if unsafe.Sizeof(*new(T)) > maxInline {
		return slots[T]{tags: make([]uint32, n), boxes: make([]*T, n)}
	}
	return slots[T]{tags: make([]uint32, n), vals: make([]T, n)}
}

// obj returns the object in slot s, which must hold one.
func (a *slots[T]) obj(s int) T {
	if a.boxes != nil {
		return *a.boxes[s]
	}
	return a.vals[s]
}

// store puts obj in slot s, in the slot's box if it has one.
func (a *slots[T]) store(s int, obj T) {
	switch {
	case a.boxes == nil:
		a.vals[s] = obj
	case a.boxes[s] != nil:
		*a.boxes[s] = obj
	default:
		// Not &obj, which would move obj to the heap on every call.
		b := new(T)
		*b = obj
		a.boxes[s] = b
	}
}

// drop empties slot s of its object, so that it can be collected.
func (a *slots[T]) drop(s int) {
	if a.boxes != nil {
		a.boxes[s] = nil
		return
	}
	var zero T
	a.vals[s] = zero
}

// copyTo copies slot s to slot p of b, whose slots are empty.
func (a *slots[T]) copyTo(s int, b *slots[T], p int) {
	b.tags[p] = a.tags[s]
	if a.boxes != nil {
		b.boxes[p] = a.boxes[s]
	} else {
		b.vals[p] = a.vals[s]
	}
}

// hasher hashes keys with maphash, or with fn where tests need collisions.
type hasher[K comparable] struct {
	seed maphash.Seed
	fn   func(K) uint64
}

// tag returns key's tag. Its low bits name the key's first slot.
func (h *hasher[K]) tag(key K) uint32 {
	var x uint64
	if h.fn != nil {
		x = h.fn(key)
	} else {
		x = maphash.Comparable(h.seed, key)
	}
	return uint32(x) | tagFull
}

// newTable returns a table with room for n objects.
func newTable[K comparable, T any](keyFunc KeyFunc[K, T], h hasher[K], n int) table[K, T] {
	t := table[K, T]{keyFunc: keyFunc, hash: h}
	if n > 0 {
		t.slots = makeSlots[T](slotsFor(n))
	}
	return t
}

// halfFull returns the number of slots that n objects fill at most half
// way (slotsFor, in keyedqueue.go, fills them three quarters).
func halfFull(n int) int { return slotsFor(n + n/2 + 1) }

// len returns the number of objects.
func (t *table[K, T]) len() int { return t.live + len(t.foreign) }

// owns reports whether key is obj's key.
func (t *table[K, T]) owns(key K, obj T) bool {
	k, err := t.keyFunc(obj)
	return err == nil && k == key
}

// loc is where find found a key, or where put should store it.
type loc struct {
	tag     uint32
	slot    int  // the key's slot, or -1
	free    int  // without slot: the first free slot on the key's probe, or -1 if there are no slots
	foreign bool // the key is in foreign
}

// find returns the object stored under key and where it is.
func (t *table[K, T]) find(key K) (obj T, l loc, ok bool) {
	l = loc{tag: t.hash.tag(key), slot: -1, free: -1}
	if mask := len(t.tags) - 1; mask > 0 {
		// At least one slot is empty, so the probe ends.
	probe:
		for s := int(l.tag) & mask; ; s = (s + 1) & mask {
			switch tag := t.tags[s]; tag {
			case l.tag:
				if obj = t.obj(s); t.owns(key, obj) {
					l.slot = s
					return obj, l, true
				}
			case tagEmpty:
				if l.free < 0 {
					l.free = s
				}
				break probe
			case tagDeleted:
				if l.free < 0 {
					l.free = s
				}
			}
		}
	}
	obj, ok = t.foreign[key]
	l.foreign = ok
	return obj, l, ok
}

// get returns the object stored under key.
func (t *table[K, T]) get(key K) (T, bool) {
	obj, _, ok := t.find(key)
	return obj, ok
}

// put stores obj under key, which find returned l for; owned says whether
// key is obj's key. It calls no user code.
func (t *table[K, T]) put(key K, obj T, l loc, owned bool) {
	switch {
	case l.slot >= 0 && owned:
		t.store(l.slot, obj)
	case l.slot >= 0:
		t.clear(l.slot)
		t.putForeign(key, obj)
	case !owned:
		t.putForeign(key, obj)
	default:
		if l.foreign {
			t.deleteForeign(key)
		}
		t.insert(l, obj)
	}
}

// insert puts obj in the slot find chose for its tag, after growing the
// table if that would fill it past three quarters.
func (t *table[K, T]) insert(l loc, obj T) {
	s := l.free
	switch {
	case s >= 0 && t.tags[s] == tagDeleted:
		t.dead--
	case s < 0 || (t.live+t.dead+1)*4 > len(t.tags)*3:
		// Twice as many slots, unless many are deleted: then perhaps as
		// many, or fewer.
		t.resize(halfFull(t.live + 1))
		mask := len(t.tags) - 1
		s = int(l.tag) & mask
		for t.tags[s] != tagEmpty {
			s = (s + 1) & mask
		}
	}
	t.tags[s] = l.tag
	t.store(s, obj)
	t.live++
}

// reserve makes room for n objects, so that inserting up to n in all does
// not grow the table.
func (t *table[K, T]) reserve(n int) {
	if n > 0 && n+t.dead > len(t.tags)/4*3 {
		t.resize(max(slotsFor(n), len(t.tags)))
	}
}

// delete removes the object stored under key, which find returned l for.
// It shrinks the table once it is less than an eighth full, to half full,
// so that memory follows the number of objects down as well as up, and
// the inserts and deletes between two resizes outnumber the objects moved.
func (t *table[K, T]) delete(key K, l loc) {
	if l.foreign {
		t.deleteForeign(key)
		return
	}
	t.clear(l.slot)
	if t.live*8 < len(t.tags) && len(t.tags) > minSlots {
		t.resize(halfFull(t.live))
	}
}

// clear empties slot s. It marks the slot deleted, unless no probe can
// pass through it, because the next slot is empty; then it and the
// deleted slots just before it become empty again.
func (t *table[K, T]) clear(s int) {
	t.drop(s)
	t.live--
	mask := len(t.tags) - 1
	if t.tags[(s+1)&mask] != tagEmpty {
		t.tags[s] = tagDeleted
		t.dead++
		return
	}
	t.tags[s] = tagEmpty
	for p := (s - 1) & mask; t.tags[p] == tagDeleted; p = (p - 1) & mask {
		t.tags[p] = tagEmpty
		t.dead--
	}
}

// resize moves the objects to n new slots.
func (t *table[K, T]) resize(n int) {
	next := makeSlots[T](n)
	mask := n - 1
	for s, tag := range t.tags {
		if tag < tagFull {
			continue
		}
		p := int(tag) & mask
		for next.tags[p] != tagEmpty {
			p = (p + 1) & mask
		}
		t.copyTo(s, &next, p)
	}
	t.slots, t.dead = next, 0
	t.moves++
}

func (t *table[K, T]) putForeign(key K, obj T) {
	if t.foreign == nil {
		t.foreign = make(map[K]T)
	}
	t.foreign[key] = obj
	t.foreignPeak = max(t.foreignPeak, len(t.foreign))
}

// deleteForeign removes key from foreign. Once foreign is empty it is
// dropped, so that a burst of such objects leaves nothing behind, unless
// it never held more than a few: then it is kept for the next one.
func (t *table[K, T]) deleteForeign(key K) {
	delete(t.foreign, key)
	if len(t.foreign) == 0 && t.foreignPeak > minSlots {
		// Not a move: a walk copies foreign's keys when it starts.
		t.foreign, t.foreignPeak = nil, 0
	}
}

// values yields every object.
func (t *table[K, T]) values() iter.Seq[T] {
	return func(yield func(T) bool) {
		for s, tag := range t.tags {
			if tag >= tagFull && !yield(t.obj(s)) {
				return
			}
		}
		for _, obj := range t.foreign {
			if !yield(obj) {
				return
			}
		}
	}
}

// all yields every key and object. The table must not change meanwhile.
func (t *table[K, T]) all() iter.Seq2[K, T] {
	return func(yield func(K, T) bool) {
		for s, tag := range t.tags {
			if tag < tagFull {
				continue
			}
			// The key function succeeded on this object when it was
			// stored, and depends only on the object's identity.
			obj := t.obj(s)
			if key, err := t.keyFunc(obj); err == nil && !yield(key, obj) {
				return
			}
		}
		for key, obj := range t.foreign {
			if !yield(key, obj) {
				return
			}
		}
	}
}

// unlisted returns the keys of the objects whose keys are not among keys.
// It finds each of keys, marking its slot, then walks the slots: unlike a
// set of keys, the marks cost a bit per slot, and the key function runs
// only on the objects returned. The table must not change meanwhile.
func (t *table[K, T]) unlisted(keys iter.Seq[K]) []K {
	var m listedMarks[K]
	for k := range keys {
		t.mark(&m, k)
	}
	return t.unmarked(&m)
}

// listedMarks records the keys of a table found listed (see mark): a bit
// per slot, and a set of the foreign keys. They hold for the table's slots
// as they were at the first mark, while the table does not change.
type listedMarks[K comparable] struct {
	slots   []uint64
	foreign map[K]struct{}
	// moves and live are the table's when the marks began: a table that
	// moved its objects, or stored or removed one, has other slots.
	moves uint64
	live  int
	// gen is the Indexer's (see Indexer.markListed).
	gen   uint64
	begun bool
}

// mark finds key, marks it listed in m and returns its object, if the
// table holds one.
func (t *table[K, T]) mark(m *listedMarks[K], key K) (T, bool) {
	if !m.begun {
		*m = listedMarks[K]{slots: make([]uint64, (len(t.tags)+63)/64), moves: t.moves, live: t.len(), begun: true}
	}
	obj, l, ok := t.find(key)
	switch {
	case !ok:
	case l.foreign:
		if m.foreign == nil {
			m.foreign = make(map[K]struct{})
		}
		m.foreign[key] = struct{}{}
	default:
		m.slots[l.slot/64] |= 1 << (l.slot % 64)
	}
	return obj, ok
}

// valid reports whether m still describes the table's slots.
func (t *table[K, T]) valid(m *listedMarks[K]) bool {
	return !m.begun || (m.moves == t.moves && m.live == t.len() && len(m.slots) == (len(t.tags)+63)/64)
}

// unmarked returns the keys of the objects m does not mark, which must be
// valid for the table.
func (t *table[K, T]) unmarked(m *listedMarks[K]) []K {
	var out []K
	for s, tag := range t.tags {
		if tag < tagFull || (m.begun && m.slots[s/64]&(1<<(s%64)) != 0) {
			continue
		}
		// The key function succeeded on this object when it was stored,
		// and depends only on the object's identity.
		if key, err := t.keyFunc(t.obj(s)); err == nil {
			out = append(out, key)
		}
	}
	for k := range t.foreign {
		if _, ok := m.foreign[k]; !ok {
			out = append(out, k)
		}
	}
	return out
}

// walk is where an All iteration is.
type walk[K comparable, T any] struct {
	// slots are the table's slots when the walk began. Once the table
	// has moved its objects to new slots, or a Replace has swapped the
	// table, no writer stores in them any more: the walk goes on through
	// them and looks up each key's current object.
	slots    slots[T]
	next     int
	gen      uint64 // of the Indexer
	moves    uint64 // of the table
	detached bool

	foreign []K // not yet yielded
}

// advance returns the next key to yield and its object, or false at the
// end. It calls the key function without holding the lock where it can.
func (i *Indexer[K, T]) advance(w *walk[K, T]) (key K, obj T, ok bool) {
	for {
		if obj, ok = i.nextSlot(w); !ok {
			break
		}
		var err error
		if key, err = i.keyFunc(obj); err != nil {
			// It succeeded when obj was stored; a key function that
			// depends only on the object's identity does not fail now.
			continue
		}
		if !w.detached {
			return key, obj, true
		}
		if obj, ok = i.GetByKey(key); ok {
			return key, obj, true
		}
	}
	for len(w.foreign) > 0 {
		key = w.foreign[0]
		w.foreign = w.foreign[1:]
		if obj, ok = i.GetByKey(key); ok {
			return key, obj, true
		}
	}
	return key, obj, false
}

// nextSlot returns the object in the walk's next slot that holds one.
func (i *Indexer[K, T]) nextSlot(w *walk[K, T]) (obj T, ok bool) {
	// Even slots no longer in use are read under the lock: they share
	// boxes with the slots in use, which writers store in.
	i.mu.RLock()
	defer i.mu.RUnlock()
	if !w.detached {
		w.detached = i.gen != w.gen || i.contents.items.moves != w.moves
	}
	for w.next < len(w.slots.tags) {
		s := w.next
		w.next++
		if w.slots.tags[s] >= tagFull {
			return w.slots.obj(s), true
		}
	}
	return obj, false
}
