package etcd

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/listwatch/mirror"
)

// Codec is the mirror.Codec of Objects that an informer's checkpoints use
// (see mirror.CheckpointOptions and NewInformer): an Object's Key,
// CreateRevision, ModRevision, Version and Lease in a compact binary
// form, a few bytes each beyond the key, then its value as Values encodes
// it, with its length. The zero value is ready to use. A Codec is safe for
// concurrent use if its Values is.
//
// An encoding that is cut short, has bytes after its end, or was not made
// by a Codec fails to decode with an error, never a panic.
type Codec[V any] struct {
	// Values encodes the values. Nil means, for KV (values of type
	// []byte), the bytes as they are, and mirror.JSONCodec for any other
	// type.
	Values mirror.Codec[V]
}

// codecFormat is the first byte of every encoding: a later version may
// change what follows, and an encoding of another kind (a JSON one
// starts with '{') is refused.
const codecFormat = 1

var errCodecEncoding = errors.New("not an encoding of an etcd object")

// Append implements mirror.Codec.
func (c Codec[V]) Append(dst []byte, o Object[V]) ([]byte, error) {
	orig := len(dst)
	dst = append(dst, codecFormat)
	dst = binary.AppendUvarint(dst, uint64(len(o.Key)))
	dst = append(dst, o.Key...)
	dst = binary.AppendVarint(dst, o.CreateRevision)
	dst = binary.AppendVarint(dst, o.ModRevision)
	dst = binary.AppendVarint(dst, o.Version)
	dst = binary.AppendVarint(dst, o.Lease)
	// The value's length goes before it, but is known only once the
	// value is encoded: a byte is left for it, enough for a value under
	// 128 bytes, and a longer value is moved up to make room.
	at := len(dst)
	dst = append(dst, 0)
	dst, err := c.values().Append(dst, o.Value)
	if err != nil {
		return dst[:orig], fmt.Errorf("etcd: encode the value of %q: %w", o.Key, err)
	}
	n := uint64(len(dst) - at - 1)
	var length [binary.MaxVarintLen64]byte
	k := binary.PutUvarint(length[:], n)
	if k > 1 {
		dst = append(dst, length[1:k]...) // room; overwritten below
		copy(dst[at+k:], dst[at+1:at+1+int(n)])
	}
	copy(dst[at:], length[:k])
	return dst, nil
}

// Decode implements mirror.Codec. The Object keeps none of data.
func (c Codec[V]) Decode(data []byte) (Object[V], error) {
	var o, zero Object[V]
	if len(data) == 0 || data[0] != codecFormat {
		return zero, errCodecEncoding
	}
	d := decoder{data: data[1:]}
	n := d.uvarint()
	if d.err == nil && n > uint64(len(d.data)) {
		d.err = errCodecEncoding
	}
	if d.err != nil {
		return zero, d.err
	}
	o.Key, d.data = string(d.data[:n]), d.data[n:]
	o.CreateRevision = d.varint()
	o.ModRevision = d.varint()
	o.Version = d.varint()
	o.Lease = d.varint()
	if n := d.uvarint(); d.err == nil && n != uint64(len(d.data)) {
		// Cut short, or followed by something else.
		d.err = errCodecEncoding
	}
	if d.err != nil {
		return zero, fmt.Errorf("etcd: decode %q: %w", o.Key, d.err)
	}
	v, err := c.values().Decode(d.data)
	if err != nil {
		return zero, fmt.Errorf("etcd: decode the value of %q: %w", o.Key, err)
	}
	o.Value = v
	return o, nil
}

// values returns the codec of the values.
func (c Codec[V]) values() mirror.Codec[V] {
	if c.Values != nil {
		return c.Values
	}
	return defaultValues[V]()
}

// defaultValues returns the codec of V that a Codec without Values uses:
// rawBytes for []byte, JSON for anything else.
func defaultValues[V any]() mirror.Codec[V] {
	// rawBytes is a mirror.Codec[V] exactly when V is []byte; it has no
	// size, so the conversion allocates nothing.
	if raw, ok := any(rawBytes{}).(mirror.Codec[V]); ok {
		return raw
	}
	return mirror.JSONCodec[V]{}
}

// rawBytes is the codec of raw values: the bytes as they are.
type rawBytes struct{}

func (rawBytes) Append(dst []byte, v []byte) ([]byte, error) { return append(dst, v...), nil }

func (rawBytes) Decode(data []byte) ([]byte, error) {
	if len(data) == 0 {
		// As the client hands over an empty value.
		return nil, nil
	}
	return append([]byte(nil), data...), nil
}

// decoder reads varints from data; its first failure sticks in err.
type decoder struct {
	data []byte
	err  error
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.data)
	if n <= 0 {
		d.err = errCodecEncoding
		return 0
	}
	d.data = d.data[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.data)
	if n <= 0 {
		d.err = errCodecEncoding
		return 0
	}
	d.data = d.data[n:]
	return v
}

var _ mirror.Codec[KV] = Codec[[]byte]{}
