package k8s

import (
	"hash/maphash"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"
)

// A compact object is its protobuf encoding cut into literal bytes, its
// own, and chunks shared with other objects. Objects made from one
// template (the Pods of a ReplicaSet, the Pods of a DaemonSet, objects
// with the same labels, owner, tolerations or containers) repeat most of
// their encoding; each repeated run of fields is held once, interned in
// a table of weak references (runs), and an object refers to it.
// Interned runs go when no object refers to them any more.
//
// The cut needs no schema. It walks the encoding's fields as protobuf
// wire format, groups a message's consecutive fields of one number (a
// repeated field, a map) into a run, and for each run of at least
// minChunk bytes asks a table of the runs seen so far: a run seen before
// is shared, one seen first is remembered and, if it is one field, walked
// into as a message, down to maxDepth levels. A field that is a string
// rather than a message either fails to parse and stays literal, or
// parses and is cut like a message: the bytes put back together are the
// same either way, so a wrong guess costs sharing, never correctness.
// The first object of a template holds its runs as literals and marks
// them seen; the second and later share them. The table is direct
// mapped and keeps the 64-bit hash of each run: a run whose slot another
// took is held as a literal once more and remembered again.
//
// A shared run that is the whole of a field (all of a message's entries
// of one number, and a number no other run of the message has) also
// records where it sits: its field path, the numbers of the fields (and
// the index of the entry, for repeated ones) from the object down to
// it. A read can then decode the run once, into the Go field at that
// path, and share what it decoded instead of parsing the bytes again
// (compact_decode.go).

const (
	// minChunk is the size below which a run stays literal: a reference
	// costs 16 bytes and a lookup.
	minChunk = 32
	// maxDepth is how many levels of messages the cut walks into.
	maxDepth = 4
	// minSlots and maxSlots bound the table of runs seen.
	minSlots = 1 << 10
	maxSlots = 1 << 18
)

// chunker cuts encodings into literal and shared runs. It is safe for
// concurrent use: the table's slots are atomic, and a slot lost to a race
// only costs a run its sharing once.
type chunker struct {
	seed maphash.Seed
	seen atomic.Pointer[[]atomic.Uint64]
}

func newChunker() *chunker {
	c := &chunker{seed: runSeed}
	t := make([]atomic.Uint64, minSlots)
	c.seen.Store(&t)
	return c
}

// reserve grows the table for about n objects, keeping what it has seen.
func (c *chunker) reserve(n int) {
	want := minSlots
	if n > 0 {
		want = max(minSlots, min(maxSlots, 1<<bits.Len(uint(4*n-1))))
	}
	old := c.seen.Load()
	if len(*old) >= want {
		return
	}
	t := make([]atomic.Uint64, want)
	for i := range *old {
		if h := (*old)[i].Load(); h != 0 {
			t[h&uint64(want-1)].Store(h)
		}
	}
	c.seen.CompareAndSwap(old, &t)
}

// seenBefore reports whether a run of hash h was seen before, and
// remembers it.
func (c *chunker) seenBefore(h uint64) bool {
	if h == 0 {
		h = 1 // 0 marks an empty slot
	}
	t := *c.seen.Load()
	s := &t[h&uint64(len(t)-1)]
	if s.Load() == h {
		return true
	}
	s.Store(h)
	return false
}

// ref is a shared run, put back at offset at of an object's literal
// bytes.
type ref struct {
	at  int32
	run *run
}

// encoding is an object's protobuf encoding, cut.
type encoding struct {
	lit  string
	refs []ref
}

// len returns the length of the encoding.
func (e *encoding) len() int {
	n := len(e.lit)
	for _, r := range e.refs {
		n += len(r.run.bytes)
	}
	return n
}

// bytes puts the encoding back together, into a new slice.
func (e *encoding) bytes() []byte { return e.appendTo(make([]byte, 0, e.len())) }

// appendTo appends the encoding, put back together, to b.
func (e *encoding) appendTo(b []byte) []byte {
	b = slices.Grow(b, e.len())
	at := 0
	for _, r := range e.refs {
		b = append(b, e.lit[at:r.at]...)
		b = append(b, r.run.bytes...)
		at = int(r.at)
	}
	return append(b, e.lit[at:]...)
}

// segment is a piece of the encoding being cut: bytes [start, end) of
// the whole, held literally at lit, or by refs[ref] if ref >= 0.
type segment struct {
	start, end, lit, ref int
}

// cut is the state of one encoding being cut. Its buffers are reused,
// from cuts, for the next encoding.
type cut struct {
	c    *chunker
	raw  []byte
	lit  []byte
	refs []ref
	segs []segment
	// path is the field path of the message being cut (see fieldPath),
	// and onPath whether a read can follow it: false below a field that
	// is not the whole of its number in its message.
	path   []byte
	onPath bool
}

var cuts = sync.Pool{New: func() any { return new(cut) }}

// maxPooled is the largest literal buffer a cut keeps for reuse.
const maxPooled = 64 << 10

// encode cuts raw. It returns the cut, whose segments (k.segs) tell where
// each byte of raw went, and which the caller must release; ok is false
// if raw is not a protobuf message.
func (c *chunker) encode(raw []byte) (_ encoding, k *cut, ok bool) {
	k = cuts.Get().(*cut)
	k.c, k.raw, k.onPath = c, raw, true
	if !k.fields(0, len(raw), 0) {
		k.release()
		return encoding{}, nil, false
	}
	// What is kept is allocated at its size: the literal bytes and the
	// references.
	enc := encoding{lit: string(k.lit)}
	if len(k.refs) > 0 {
		enc.refs = slices.Clone(k.refs)
	}
	return enc, k, true
}

// release returns k to the pool.
func (k *cut) release() {
	if cap(k.lit) > maxPooled {
		k.lit = nil
	}
	clear(k.refs) // the refs keep runs alive
	k.c, k.raw, k.lit, k.refs, k.segs, k.path = nil, nil, k.lit[:0], k.refs[:0], k.segs[:0], k.path[:0]
	cuts.Put(k)
}

// literal appends raw[start:end] to the literal bytes.
func (k *cut) literal(start, end int) {
	if start == end {
		return
	}
	if n := len(k.segs); n > 0 && k.segs[n-1].ref < 0 && k.segs[n-1].end == start {
		k.segs[n-1].end = end
	} else {
		k.segs = append(k.segs, segment{start: start, end: end, lit: len(k.lit), ref: -1})
	}
	k.lit = append(k.lit, k.raw[start:end]...)
}

// shared refers to raw[start:end], of hash h, as a shared run; whole is
// set if it is the whole of field num of the message being cut.
func (k *cut) shared(start, end int, h uint64, num protowire.Number, whole bool) {
	var path string
	if whole && k.onPath {
		n := len(k.path)
		k.path = protowire.AppendVarint(k.path, uint64(num))
		path = unsafe.String(unsafe.SliceData(k.path), len(k.path)) // intern copies it
		defer func() { k.path = k.path[:n] }()
	}
	r := runs.intern(h, path, k.raw[start:end])
	k.segs = append(k.segs, segment{start: start, end: end, lit: len(k.lit), ref: len(k.refs)})
	k.refs = append(k.refs, ref{at: int32(len(k.lit)), run: r})
}

// fields cuts the message raw[start:end], whose fields are depth levels
// down. It reports false if raw[start:end] is not a message; the caller
// then holds it as a literal.
func (k *cut) fields(start, end, depth int) bool {
	// The numbers of the runs so far, and of those in more than one
	// run; fields of 64 and up are taken as split: no Kubernetes type
	// has them.
	var seen, split uint64
	refs := len(k.refs)
	for i := start; i < end; {
		num, typ, n := protowire.ConsumeField(k.raw[i:end])
		if n < 0 {
			return false
		}
		j := i + n
		if typ != protowire.BytesType {
			// A repeated scalar's entries may come packed (a run) and
			// not (these), and Unmarshal appends them all: a run of
			// the number is then not the whole of its field.
			if num < 64 {
				if seen&(1<<num) != 0 {
					split |= 1 << num
				}
				seen |= 1 << num
			}
			k.literal(i, j)
			i = j
			continue
		}
		count := 1
		for j < end {
			num2, typ2, n2 := protowire.ConsumeField(k.raw[j:end])
			if n2 < 0 || num2 != num || typ2 != protowire.BytesType {
				break
			}
			j += n2
			count++
		}
		whole := num < 64 && seen&(1<<num) == 0
		if num < 64 {
			if !whole {
				split |= 1 << num
			}
			seen |= 1 << num
		}
		k.run(i, j, count, depth, num, -1, whole)
		i = j
	}
	if split != 0 {
		k.unsplit(refs, split)
	}
	return true
}

// unsplit takes the path off the runs from refs[from] on that are under
// a field of the message being cut whose number is in split: their
// field was in more than one run, and a read cannot decode them apart.
// Encoders do not split fields; this is for encodings that do.
func (k *cut) unsplit(from int, split uint64) {
	for i := from; i < len(k.refs); i++ {
		r := k.refs[i].run
		if len(r.path) <= len(k.path) || r.path[:len(k.path)] != string(k.path) {
			continue
		}
		num, n := protowire.ConsumeVarint([]byte(r.path[len(k.path):]))
		if n < 0 || num >= 64 || split&(1<<num) == 0 {
			continue
		}
		b := unsafe.Slice(unsafe.StringData(r.bytes), len(r.bytes))
		k.refs[i].run = runs.intern(maphash.String(runSeed, r.bytes), "", b)
	}
}

// run cuts a run of count length-delimited fields of number num. entry
// is the index of the run's field among the run of num it came from, if
// it is one of several, and -1 if it is all of them; whole is set if no
// other run of the message has the number.
func (k *cut) run(start, end, count, depth int, num protowire.Number, entry int, whole bool) {
	if end-start < minChunk {
		k.literal(start, end)
		return
	}
	h := maphash.Bytes(k.c.seed, k.raw[start:end])
	if k.c.seenBefore(h) {
		k.shared(start, end, h, num, whole && entry < 0)
		return
	}
	if count > 1 {
		// The run is new; its fields may not be.
		e := 0
		for i := start; i < end; e++ {
			_, _, n := protowire.ConsumeField(k.raw[i:end])
			k.run(i, i+n, 1, depth, num, e, whole)
			i += n
		}
		return
	}
	if depth < maxDepth {
		body, _ := value(k.raw, start)
		lit, refs, segs := len(k.lit), len(k.refs), len(k.segs)
		path, onPath := len(k.path), k.onPath
		k.path = protowire.AppendVarint(protowire.AppendVarint(k.path, uint64(num)), uint64(entry+1))
		k.onPath = onPath && whole
		k.literal(start, body)
		ok := k.fields(body, end, depth+1)
		k.path, k.onPath = k.path[:path], onPath
		if ok {
			return
		}
		// Not a message: undo what the attempt appended.
		k.lit, k.refs, k.segs = k.lit[:lit], k.refs[:refs], k.segs[:segs]
		if n := len(k.segs); n > 0 && k.segs[n-1].ref < 0 && k.segs[n-1].end > start {
			k.segs[n-1].end = start
		}
	}
	k.literal(start, end)
}

// locate returns bytes [start, end) of the encoding cut into segs as a
// string that shares e's memory, or ok false if they straddle segments.
func (e *encoding) locate(segs []segment, start, end int) (s string, ok bool) {
	if start == end {
		return "", true
	}
	for _, g := range segs {
		if start < g.start || end > g.end {
			continue
		}
		if g.ref < 0 {
			off := g.lit + start - g.start
			return e.lit[off : off+end-start], true
		}
		v := e.refs[g.ref].run.bytes
		return v[start-g.start : end-g.start], true
	}
	return "", false
}

// The spans metaSpans finds.
const (
	metaName = iota
	metaNamespace
	metaUID
	metaRV
	metaLabels
)

// metaSpans finds, in the encoding of a Kubernetes object, the bytes of
// its metadata's name, namespace, UID and resource version values and of
// its run of label entries. Every type of k8s.io/api (and
// PartialObjectMetadata) holds its ObjectMeta in field 1, which holds
// them in fields 1, 3, 5, 6 and 11. ok is false if raw has no such
// metadata; the caller checks the values against the object anyway.
func metaSpans(raw []byte) (spans [5][2]int, ok bool) {
	meta, at := fieldBytes(raw, 1)
	if at < 0 {
		return spans, false
	}
	inLabels := false
	for i := 0; i < len(meta); {
		num, typ, n := protowire.ConsumeField(meta[i:])
		if n < 0 {
			return spans, false
		}
		if num == 11 && typ == protowire.BytesType {
			if !inLabels {
				if spans[metaLabels][1] != 0 {
					return spans, false // two runs of labels
				}
				spans[metaLabels][0] = at + i
			}
			spans[metaLabels][1] = at + i + n
			inLabels = true
			i += n
			continue
		}
		inLabels = false
		if typ == protowire.BytesType {
			idx := -1
			switch num {
			case 1:
				idx = metaName
			case 3:
				idx = metaNamespace
			case 5:
				idx = metaUID
			case 6:
				idx = metaRV
			}
			if idx >= 0 {
				s, e := value(meta, i)
				spans[idx] = [2]int{at + s, at + e}
			}
		}
		i += n
	}
	return spans, true
}

// value returns where the value of the length-delimited field at b[i:]
// starts and ends in b. The field must have been consumed whole before.
func value(b []byte, i int) (start, end int) {
	_, _, tagLen := protowire.ConsumeTag(b[i:])
	v, n := protowire.ConsumeBytes(b[i+tagLen:])
	end = i + tagLen + n
	return end - len(v), end
}

// fieldBytes returns the value of the first length-delimited field num of
// the message raw, and its offset in raw, or -1 if there is none.
func fieldBytes(raw []byte, num protowire.Number) ([]byte, int) {
	for i := 0; i < len(raw); {
		n2, typ, n := protowire.ConsumeField(raw[i:])
		if n < 0 {
			return nil, -1
		}
		if n2 == num && typ == protowire.BytesType {
			s, e := value(raw, i)
			return raw[s:e], s
		}
		i += n
	}
	return nil, -1
}

// protoLabels is a run of label entries as ObjectMeta's encoding holds
// them: field 11, each an entry of a key (field 1) and a value (field 2).
// It implements labels.Labels without decoding them into a map.
type protoLabels string

// encodeLabels encodes m as a run of label entries, in no set order.
func encodeLabels(m map[string]string) protoLabels {
	if len(m) == 0 {
		return ""
	}
	var b []byte
	for k, v := range m {
		entry := protowire.SizeTag(1) + protowire.SizeBytes(len(k)) + protowire.SizeTag(2) + protowire.SizeBytes(len(v))
		b = protowire.AppendTag(b, 11, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(entry))
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, k)
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendString(b, v)
	}
	return protoLabels(b)
}

// each calls f with each label until f returns false.
func (l protoLabels) each(f func(key, value string) bool) {
	b := unsafe.Slice(unsafe.StringData(string(l)), len(l))
	for i := 0; i < len(b); {
		num, typ, n := protowire.ConsumeField(b[i:])
		if n < 0 {
			return
		}
		if num != 11 || typ != protowire.BytesType {
			i += n
			continue
		}
		base, end := value(b, i)
		entry := b[base:end]
		var key, val string
		for j := 0; j < len(entry); {
			f, t, m := protowire.ConsumeField(entry[j:])
			if m < 0 {
				return
			}
			if t == protowire.BytesType && (f == 1 || f == 2) {
				s, e := value(entry, j)
				if f == 1 {
					key = string(l[base+s : base+e])
				} else {
					val = string(l[base+s : base+e])
				}
			}
			j += m
		}
		if !f(key, val) {
			return
		}
		i += n
	}
}

// Lookup returns the value of the label key and whether there is one.
func (l protoLabels) Lookup(key string) (value string, ok bool) {
	l.each(func(k, v string) bool {
		if k == key {
			value, ok = v, true
			return false
		}
		return true
	})
	return value, ok
}

// Has reports whether there is a label key.
func (l protoLabels) Has(key string) bool {
	_, ok := l.Lookup(key)
	return ok
}

// Get returns the value of the label key, or "".
func (l protoLabels) Get(key string) string {
	v, _ := l.Lookup(key)
	return v
}

// len returns the number of labels.
func (l protoLabels) len() int {
	n := 0
	l.each(func(string, string) bool { n++; return true })
	return n
}
