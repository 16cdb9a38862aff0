package k8s

import (
	"errors"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"

	"google.golang.org/protobuf/encoding/protowire"
)

// Reading a compact object decodes its encoding with the type's generated
// Unmarshal, and most of that work is in the runs the object shares with
// others: a ReplicaSet's containers, volumes, labels, owner references.
// A shared run that is the whole of a field is decoded once instead, the
// first time a read meets it, into the Go field at its path (found by
// reflection from the protobuf tags of the generated structs). A read
// then decodes the object with each such run replaced by a field that
// Unmarshal skips, and sets the field to the run's one decoded value.
// That is what Shared does; Object deep-copies Shared's object with the
// type's generated DeepCopy. (Deep copies of the decoded runs alone,
// set by reflection into an object decoded without them, cost about as
// much as decoding the runs: measured and dropped.)
//
// This gives the object Unmarshal would have given, by protobuf's own
// rules: a message's fields of one number, all in one run (the cut only
// records a path for those), decode into the same Go field whatever
// else the message holds, and decoding them alone into an empty message
// gives that field. A run whose path the type does not have (through a
// map, a string or a scalar) is put back as bytes, as before.
//
// A decoded run lives as long as its run (compact_runs.go).

// fieldPath is the path of a run in an object's encoding: for each
// message the run is in, from the object down, the field's number and
// entry (0 if the field was a run of one, i+1 for the i-th of several),
// then the number of the run's own field, all as varints.

// fillerNum is the field number of the fields put in place of decoded
// runs: the largest valid number, which no Kubernetes type uses, so that
// the generated Unmarshal skips it.
const fillerNum = protowire.MaxValidNumber

// appendFiller appends a field of n bytes (n >= 7) that Unmarshal skips.
// Its contents are zeros, not whatever b's pooled capacity held: the
// generated Unmarshal bounds a map entry's key and value by the end of
// the message, not of the entry, so a malformed entry before a filler
// could read into it, and must not read another object's bytes there.
func appendFiller(b []byte, n int) []byte {
	b = protowire.AppendTag(b, fillerNum, protowire.BytesType)
	rest := n - protowire.SizeTag(fillerNum)
	// A length of k bytes, not necessarily the shortest, so that header
	// and contents add up to n.
	k := 1
	for rest-k >= 1<<(7*k) {
		k++
	}
	v := rest - k
	for range k - 1 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	b = append(b, byte(v))
	return append(b, make([]byte, rest-k)...) // a memclr, no allocation
}

// decodedRun is a run decoded into the field at its path, for objects
// of one type.
type decodedRun struct {
	root  reflect.Type // the object's struct type
	ok    bool         // false if the run cannot be decoded for root
	steps []step       // from the object down to the message of the field
	field int          // the field's index in its message's struct
	// value is the field, decoded, that every read shares.
	value reflect.Value
}

// step is one message of a path: field of the enclosing struct, and the
// entry of it if it is a slice.
type step struct {
	field int
	kind  reflect.Kind // Struct, Pointer (to a struct) or Slice (of either)
	elem  reflect.Kind // for a Slice, Struct or Pointer
	index int
}

// decodedFor returns r decoded for objects of type root, decoding it the
// first time, or nil if r must be put back as bytes.
func (r *run) decodedFor(root reflect.Type) *decodedRun {
	if r.path == "" || root == nil {
		return nil
	}
	d := r.decoded.Load()
	if d == nil {
		d = decodeRun(r, root)
		if !r.decoded.CompareAndSwap(nil, d) {
			d = r.decoded.Load()
		}
	}
	if !d.ok || d.root != root {
		return nil
	}
	return d
}

// unmarshaler is the decoding half of ProtoObject, which every message
// of k8s.io/api has.
type unmarshaler interface{ Unmarshal(data []byte) error }

// decodeRun decodes r into the field at its path in root.
func decodeRun(r *run, root reflect.Type) *decodedRun {
	d := &decodedRun{root: root}
	var nums []uint64
	for p := r.path; len(p) > 0; {
		v, n := protowire.ConsumeVarint([]byte(p))
		if n < 0 {
			return d
		}
		nums = append(nums, v)
		p = p[n:]
	}
	if len(nums)%2 != 1 {
		return d
	}
	t := root
	for i := 0; i+1 < len(nums); i += 2 {
		f := fieldByNumber(t, nums[i])
		if f < 0 {
			return d
		}
		s := step{field: f}
		ft := t.Field(f).Type
		entry := int(nums[i+1])
		switch {
		case ft.Kind() == reflect.Struct && entry == 0:
			s.kind, t = reflect.Struct, ft
		case ft.Kind() == reflect.Pointer && ft.Elem().Kind() == reflect.Struct && entry == 0:
			s.kind, t = reflect.Pointer, ft.Elem()
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			s.kind, s.elem, s.index, t = reflect.Slice, reflect.Struct, max(entry-1, 0), ft.Elem()
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Pointer && ft.Elem().Elem().Kind() == reflect.Struct:
			s.kind, s.elem, s.index, t = reflect.Slice, reflect.Pointer, max(entry-1, 0), ft.Elem().Elem()
		default:
			return d
		}
		d.steps = append(d.steps, s)
	}
	if d.field = fieldByNumber(t, nums[len(nums)-1]); d.field < 0 {
		return d
	}
	m := reflect.New(t)
	u, ok := m.Interface().(unmarshaler)
	// The filler must leave the message as it was: a message that
	// keeps unknown fields cannot have its runs decoded apart.
	if !ok || u.Unmarshal([]byte(r.bytes)) != nil || !skipsFiller(m) {
		return d
	}
	// The field alone, without the message around it.
	d.value = reflect.New(t.Field(d.field).Type).Elem()
	d.value.Set(m.Elem().Field(d.field))
	d.ok = true
	return d
}

// skipsFiller reports whether the message m points to decodes a filler
// into nothing.
func skipsFiller(m reflect.Value) bool {
	e := reflect.New(m.Type().Elem())
	b := appendFiller(make([]byte, 0, 16), 16)
	return e.Interface().(unmarshaler).Unmarshal(b) == nil && e.Elem().IsZero()
}

// protoFields maps a struct type to its fields' indexes by protobuf
// field number.
var protoFields sync.Map // reflect.Type -> map[uint64]int

// fieldByNumber returns the index of the field of struct t tagged with
// protobuf field number num, or -1.
func fieldByNumber(t reflect.Type, num uint64) int {
	m, ok := protoFields.Load(t)
	if !ok {
		fields := map[uint64]int{}
		for i := range t.NumField() {
			f := t.Field(i)
			tag, ok := f.Tag.Lookup("protobuf")
			if !ok || !f.IsExported() {
				continue
			}
			parts := strings.Split(tag, ",")
			if len(parts) < 2 {
				continue
			}
			if n, err := strconv.ParseUint(parts[1], 10, 32); err == nil {
				fields[n] = i
			}
		}
		m, _ = protoFields.LoadOrStore(t, fields)
	}
	i, ok := m.(map[uint64]int)[num]
	if !ok {
		return -1
	}
	return i
}

var errPath = errors.New("a decoded run's path is not in the object")

// decode decodes the encoding into obj, a new object of struct type
// root (behind a pointer), with the decoded runs shared, and the runs
// that cannot be decoded apart put back as bytes; with root nil, it
// decodes all of it. If it fails with errPath, obj is partly set and
// the caller decodes the whole encoding into a new object.
func (e *encoding) decode(obj unmarshaler, root reflect.Type) error {
	buf := bufs.Get().(*[]byte)
	b := slices.Grow((*buf)[:0], e.len())
	at, fills := 0, 0
	for _, r := range e.refs {
		b = append(b, e.lit[at:r.at]...)
		if r.run.decodedFor(root) != nil {
			b = appendFiller(b, len(r.run.bytes))
			fills++
		} else {
			b = append(b, r.run.bytes...)
		}
		at = int(r.at)
	}
	b = append(b, e.lit[at:]...)
	err := obj.Unmarshal(b)
	if cap(b) <= maxPooled {
		*buf = b[:0]
		bufs.Put(buf)
	}
	if err != nil || fills == 0 {
		return err
	}
	v := reflect.ValueOf(obj).Elem()
	for _, r := range e.refs {
		d := r.run.decodedFor(root)
		if d == nil {
			continue
		}
		f, ok := d.at(v)
		if !ok {
			return errPath
		}
		f.Set(d.value)
	}
	return nil
}

// at returns the field of d in the object v.
func (d *decodedRun) at(v reflect.Value) (reflect.Value, bool) {
	for _, s := range d.steps {
		v = v.Field(s.field)
		switch s.kind {
		case reflect.Pointer:
			if v.IsNil() {
				return v, false
			}
			v = v.Elem()
		case reflect.Slice:
			if s.index >= v.Len() {
				return v, false
			}
			v = v.Index(s.index)
			if s.elem == reflect.Pointer {
				if v.IsNil() {
					return v, false
				}
				v = v.Elem()
			}
		}
	}
	return v.Field(d.field), true
}
