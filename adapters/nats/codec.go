package nats

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/listwatch/mirror"
)

// Codec is the mirror.Codec of Objects that an informer's checkpoints use
// (see mirror.CheckpointOptions and NewInformer): an Object's Key,
// Revision and Time in a compact binary form, a few bytes each beyond the
// key, then its value as Values encodes it. The zero value is ready to
// use. A Codec is safe for concurrent use if its Values is.
//
// An encoding that is cut short or was not made by a Codec fails to decode
// with an error, never a panic.
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

var errCodecEncoding = errors.New("not an encoding of a nats object")

// Append implements mirror.Codec. The value comes last, so its length is
// what remains.
func (c Codec[V]) Append(dst []byte, o Object[V]) ([]byte, error) {
	orig := len(dst)
	dst = append(dst, codecFormat)
	dst = binary.AppendUvarint(dst, uint64(len(o.Key)))
	dst = append(dst, o.Key...)
	dst = binary.AppendUvarint(dst, o.Revision)
	var nanos int64
	if !o.Time.IsZero() {
		nanos = o.Time.UnixNano()
	}
	dst = binary.AppendVarint(dst, nanos)
	dst, err := c.values().Append(dst, o.Value)
	if err != nil {
		return dst[:orig], fmt.Errorf("nats: encode the value of %q: %w", o.Key, err)
	}
	return dst, nil
}

// Decode implements mirror.Codec. The Object keeps none of data.
func (c Codec[V]) Decode(data []byte) (Object[V], error) {
	var o, zero Object[V]
	if len(data) == 0 || data[0] != codecFormat {
		return zero, errCodecEncoding
	}
	data = data[1:]
	n, k := binary.Uvarint(data)
	if k <= 0 || n > uint64(len(data)-k) {
		return zero, errCodecEncoding
	}
	o.Key, data = string(data[k:k+int(n)]), data[k+int(n):]
	rev, k := binary.Uvarint(data)
	if k <= 0 {
		return zero, fmt.Errorf("nats: decode %q: %w", o.Key, errCodecEncoding)
	}
	nanos, j := binary.Varint(data[k:])
	if j <= 0 {
		return zero, fmt.Errorf("nats: decode %q: %w", o.Key, errCodecEncoding)
	}
	o.Revision, data = rev, data[k+j:]
	if nanos != 0 {
		o.Time = time.Unix(0, nanos)
	}
	v, err := c.values().Decode(data)
	if err != nil {
		return zero, fmt.Errorf("nats: decode the value of %q: %w", o.Key, err)
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
		return nil, nil
	}
	return append([]byte(nil), data...), nil
}

var _ mirror.Codec[KV] = Codec[[]byte]{}
