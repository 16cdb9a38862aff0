package etcd_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"testing"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/adapters/etcd"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// codecKVs are KVs that stress the encoding: empty and odd keys and
// values, and metadata from zero (a deletion that carries the key alone)
// to the ends of int64.
var codecKVs = []etcd.KV{
	{Key: "/p/a", Value: []byte("v1"), CreateRevision: 2, ModRevision: 9, Version: 4, Lease: 0x694d77a5c3fd1a0b},
	{Key: "/p/empty-value", CreateRevision: 3, ModRevision: 3, Version: 1},
	{Key: "/p/deleted"},
	{Key: "", Value: []byte{0, 0xff, '\n'}},
	{Key: "/p/\x00binary\xff-ключ", Value: bytes.Repeat([]byte("x"), 70_000), CreateRevision: math.MaxInt64,
		ModRevision: math.MaxInt64, Version: math.MaxInt64, Lease: math.MinInt64},
	{Key: "/p/negative", CreateRevision: -1, ModRevision: -2, Version: -3, Lease: -4},
}

func TestCodec_KVRoundTripsWithTheBytesAsTheyAre(t *testing.T) {
	for _, codec := range []mirror.Codec[etcd.KV]{etcd.Codec[[]byte]{}} {
		var buf []byte
		for i, o := range codecKVs {
			t.Run(strconv.Itoa(i), func(t *testing.T) {
				prefix := []byte("kept")
				enc, err := codec.Append(append(buf[:0], prefix...), o)
				require.NoError(t, err)
				require.Equal(t, prefix, enc[:len(prefix)], "Append appends")
				got, err := codec.Decode(enc[len(prefix):])
				require.NoError(t, err)
				assert.Equal(t, o, got)
				assert.True(t, bytes.HasSuffix(enc, o.Value), "the value's bytes as they are, not in JSON")

				// The decoded object keeps none of the encoding.
				clear(enc)
				assert.Equal(t, o, got)
				buf = enc
			})
		}
	}
}

func TestCodec_MetadataTakesAFewBytes(t *testing.T) {
	o := etcd.KV{Key: "/p/k", Value: []byte("v"), CreateRevision: 1_000_000, ModRevision: 1_000_001, Version: 2}
	enc, err := etcd.Codec[[]byte]{}.Append(nil, o)
	require.NoError(t, err)
	assert.LessOrEqual(t, len(enc), len(o.Key)+len(o.Value)+11,
		"a format byte, the key's and the value's lengths and four varints: revisions in the millions take 3 bytes each")
	asJSON, err := mirror.JSONCodec[etcd.KV]{}.Append(nil, o)
	require.NoError(t, err)
	t.Logf("%d bytes; %d in JSON", len(enc), len(asJSON))
}

type value struct {
	Name  string `json:"name"`
	Count int    `json:"count"`
}

// upperCodec encodes strings upper-cased, and fails on "bad".
type upperCodec struct{}

var errBadValue = errors.New("bad value")

func (upperCodec) Append(dst []byte, v string) ([]byte, error) {
	if v == "bad" {
		return dst, errBadValue
	}
	return append(dst, bytes.ToUpper([]byte(v))...), nil
}

func (upperCodec) Decode(data []byte) (string, error) {
	if bytes.Equal(data, []byte("BAD")) {
		return "", errBadValue
	}
	return string(data), nil
}

func TestCodec_TypedValuesGoThroughJSONOrTheValuesCodec(t *testing.T) {
	o := etcd.Object[value]{Key: "/p/k", Value: value{Name: "n", Count: 3}, CreateRevision: 5, ModRevision: 6, Version: 2}
	enc, err := etcd.Codec[value]{}.Append(nil, o)
	require.NoError(t, err)
	want, err := json.Marshal(o.Value)
	require.NoError(t, err)
	assert.True(t, bytes.HasSuffix(enc, want), "JSON by default")
	got, err := etcd.Codec[value]{}.Decode(enc)
	require.NoError(t, err)
	assert.Equal(t, o, got)

	c := etcd.Codec[string]{Values: upperCodec{}}
	enc, err = c.Append(nil, etcd.Object[string]{Key: "/p/s", Value: "abc", ModRevision: 7})
	require.NoError(t, err)
	assert.True(t, bytes.HasSuffix(enc, []byte("ABC")), "the values codec given")
	s, err := c.Decode(enc)
	require.NoError(t, err)
	assert.Equal(t, etcd.Object[string]{Key: "/p/s", Value: "ABC", ModRevision: 7}, s)

	kept := []byte("kept")
	enc, err = c.Append(kept, etcd.Object[string]{Key: "/p/bad", Value: "bad"})
	require.ErrorIs(t, err, errBadValue)
	assert.Equal(t, kept, enc, "nothing appended")
	assert.ErrorContains(t, err, `"/p/bad"`, "names the key")
	enc, err = c.Append(nil, etcd.Object[string]{Key: "/p/b", Value: "BAD"})
	require.NoError(t, err)
	_, err = c.Decode(enc)
	require.ErrorIs(t, err, errBadValue)
	assert.ErrorContains(t, err, `"/p/b"`)
}

func TestCodec_CorruptEncodingIsAnErrorNotAPanic(t *testing.T) {
	codec := etcd.Codec[[]byte]{}
	enc, err := codec.Append(nil, etcd.KV{Key: "/p/k", Value: bytes.Repeat([]byte("v"), 200), CreateRevision: 300, ModRevision: 70000, Version: 2, Lease: 1 << 40})
	require.NoError(t, err)
	cases := map[string][]byte{
		"empty":           nil,
		"JSON":            []byte(`{"Key":"/p/k","Value":{"name":"n"}}`),
		"other format":    append([]byte{2}, enc[1:]...),
		"key too long":    {1, 0x7f, 'a'},
		"varint overflow": append([]byte{1, 0}, bytes.Repeat([]byte{0xff}, 11)...),
	}
	// Every truncation.
	for i := range len(enc) {
		cases["truncated at "+strconv.Itoa(i)] = enc[:i]
	}
	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			require.NotPanics(t, func() {
				_, err = codec.Decode(data)
			})
			require.Error(t, err)
		})
	}
}

// FuzzCodec_Decode checks that Decode never panics on any input, and that
// what it decodes encodes again into an encoding that decodes to the
// same object.
func FuzzCodec_Decode(f *testing.F) {
	codec := etcd.Codec[[]byte]{}
	for _, o := range codecKVs {
		enc, err := codec.Append(nil, o)
		require.NoError(f, err)
		f.Add(enc)
	}
	f.Add([]byte{1, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01})
	f.Fuzz(func(t *testing.T, data []byte) {
		o, err := codec.Decode(data)
		if err != nil {
			return
		}
		enc, err := codec.Append(nil, o)
		require.NoError(t, err)
		again, err := codec.Decode(enc)
		require.NoError(t, err)
		require.Equal(t, o, again)
	})
}
