package k8s

import (
	"bytes"
	"errors"
	"fmt"
)

// The Kubernetes protobuf wire format, as far as the adapter reads it
// itself: an object is "k8s\x00" then a runtime.Unknown message whose field
// 2 holds the object's own message; every top-level object has its
// ObjectMeta (or ListMeta) in field 1, and a list its items in field 2;
// a watch stream is a sequence of metav1.WatchEvent messages, each preceded
// by its length as a 4-byte big-endian number, whose field 1 is the event
// type and field 2 a RawExtension holding the object in field 1.

// protoMagic begins every object the server encodes as protobuf.
var protoMagic = []byte("k8s\x00")

// errProto is wrapped by every error of reading protobuf: the server sent
// something that is not what it should be.
var errProto = errors.New("malformed protobuf")

// protoField is one field of a protobuf message.
type protoField struct {
	num  int
	wire int
	// data is the field's bytes for the length-delimited wire type (2).
	data []byte
	// start and end delimit the whole field (tag included) in the message.
	start, end int
}

// uvarint reads a varint at b[i:], returning it and the index after it.
func uvarint(b []byte, i int) (uint64, int, error) {
	var v uint64
	for shift := uint(0); shift < 64; shift += 7 {
		if i >= len(b) {
			return 0, 0, fmt.Errorf("%w: truncated varint", errProto)
		}
		c := b[i]
		i++
		v |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return v, i, nil
		}
	}
	return 0, 0, fmt.Errorf("%w: varint overflows", errProto)
}

// nextField reads the field of msg that begins at i.
func nextField(msg []byte, i int) (protoField, error) {
	f := protoField{start: i}
	tag, i, err := uvarint(msg, i)
	if err != nil {
		return f, err
	}
	f.num, f.wire = int(tag>>3), int(tag&7)
	switch f.wire {
	case 0:
		if _, i, err = uvarint(msg, i); err != nil {
			return f, err
		}
	case 1:
		i += 8
	case 5:
		i += 4
	case 2:
		var n uint64
		if n, i, err = uvarint(msg, i); err != nil {
			return f, err
		}
		if n > uint64(len(msg)-i) {
			return f, fmt.Errorf("%w: field %d runs past its message", errProto, f.num)
		}
		// Capped: the items of ListEncoded and WatchEncoded are such slices,
		// and a caller appending to one must not write over the next.
		f.data = msg[i : i+int(n) : i+int(n)]
		i += int(n)
	default:
		return f, fmt.Errorf("%w: wire type %d", errProto, f.wire)
	}
	if i > len(msg) {
		return f, fmt.Errorf("%w: field %d runs past its message", errProto, f.num)
	}
	f.end = i
	return f, nil
}

// eachField calls fn with every field of msg, in order.
func eachField(msg []byte, fn func(protoField) error) error {
	for i := 0; i < len(msg); {
		f, err := nextField(msg, i)
		if err != nil {
			return err
		}
		if err := fn(f); err != nil {
			return err
		}
		i = f.end
	}
	return nil
}

// unwrapObject returns the message of the object that raw, "k8s\x00" and a
// runtime.Unknown, holds, and its kind.
func unwrapObject(raw []byte) (msg []byte, kind string, err error) {
	rest, ok := bytes.CutPrefix(raw, protoMagic)
	if !ok {
		return nil, "", fmt.Errorf("%w: no protobuf prefix", errProto)
	}
	err = eachField(rest, func(f protoField) error {
		switch {
		case f.num == 1 && f.wire == 2: // TypeMeta
			return eachField(f.data, func(tf protoField) error {
				if tf.num == 2 && tf.wire == 2 {
					kind = string(tf.data)
				}
				return nil
			})
		case f.num == 2 && f.wire == 2:
			msg = f.data
		case f.num == 3 && f.wire == 2 && len(f.data) > 0:
			return fmt.Errorf("%w: content encoding %q", errProto, f.data)
		}
		return nil
	})
	return msg, kind, err
}

// withoutManagedFields returns msg, a top-level object's message, without
// the managedFields of its ObjectMeta (field 17 of field 1), written into
// scratch (which it returns grown); msg itself if it has none.
func withoutManagedFields(msg, scratch []byte) ([]byte, []byte, error) {
	var meta protoField
	found := false
	err := eachField(msg, func(f protoField) error {
		if f.num == 1 && f.wire == 2 && !found {
			meta, found = f, true
		}
		return nil
	})
	if err != nil || !found {
		return msg, scratch, err
	}
	// The kept parts of the metadata, as ranges of meta.data.
	size, dropped := 0, false
	err = eachField(meta.data, func(f protoField) error {
		if f.num == 17 {
			dropped = true
		} else {
			size += f.end - f.start
		}
		return nil
	})
	if err != nil || !dropped {
		return msg, scratch, err
	}
	out := append(scratch[:0], msg[:meta.start]...)
	out = appendUvarint(out, 1<<3|2)
	out = appendUvarint(out, uint64(size))
	_ = eachField(meta.data, func(f protoField) error {
		if f.num != 17 {
			out = append(out, meta.data[f.start:f.end]...)
		}
		return nil
	})
	out = append(out, msg[meta.end:]...)
	return out, out, nil
}

func appendUvarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}
