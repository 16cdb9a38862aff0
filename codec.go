package mirror

import "encoding/json"

// Codec turns objects into bytes and back, for an informer's checkpoints
// (see CheckpointOptions). A Codec must be safe for concurrent use.
type Codec[T any] interface {
	// Append appends the encoding of obj to dst and returns the result.
	Append(dst []byte, obj T) ([]byte, error)
	// Decode decodes an object that Append encoded. It must not keep
	// data, which the caller reuses.
	Decode(data []byte) (T, error)
}

// JSONCodec is the Codec that encodes objects with encoding/json. Only
// what encoding/json sees is kept: exported fields, by their JSON names.
type JSONCodec[T any] struct{}

// Append implements Codec.
func (JSONCodec[T]) Append(dst []byte, obj T) ([]byte, error) {
	b, err := json.Marshal(obj)
	if err != nil {
		return dst, err
	}
	return append(dst, b...), nil
}

// Decode implements Codec.
func (JSONCodec[T]) Decode(data []byte) (T, error) {
	var obj T
	err := json.Unmarshal(data, &obj)
	return obj, err
}
