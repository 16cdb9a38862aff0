package nats_test

import (
	"testing"
	"time"

	natsmirror "github.com/listwatch/mirror/adapters/nats"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type service struct {
	Addr string `json:"addr"`
}

func TestCodec_RoundTripsObjects(t *testing.T) {
	at := time.Unix(1700000000, 123456789)
	raw := []natsmirror.KV{
		{Key: "a", Value: []byte("v"), Revision: 7, Time: at},
		{Key: "", Value: nil},
		{Key: "big", Value: make([]byte, 300), Revision: 1 << 40, Time: at},
	}
	for _, o := range raw {
		b, err := natsmirror.Codec[[]byte]{}.Append([]byte("prefix"), o)
		require.NoError(t, err)
		require.Equal(t, "prefix", string(b[:6]))
		got, err := natsmirror.Codec[[]byte]{}.Decode(b[6:])
		require.NoError(t, err)
		assert.Equal(t, o.Key, got.Key)
		assert.Equal(t, o.Revision, got.Revision)
		assert.True(t, o.Time.Equal(got.Time))
		assert.Equal(t, len(o.Value), len(got.Value))
	}
	typed := natsmirror.Object[service]{Key: "s", Value: service{Addr: "10.0.0.1:443"}, Revision: 3, Time: at}
	b, err := natsmirror.Codec[service]{}.Append(nil, typed)
	require.NoError(t, err)
	got, err := natsmirror.Codec[service]{}.Decode(b)
	require.NoError(t, err)
	assert.Equal(t, typed.Value, got.Value)
}

func TestCodec_RefusesWhatItDidNotMake(t *testing.T) {
	good, err := natsmirror.Codec[service]{}.Append(nil, natsmirror.Object[service]{Key: "key", Revision: 9})
	require.NoError(t, err)
	for name, data := range map[string][]byte{
		"empty":       nil,
		"json":        []byte(`{"addr":"x"}`),
		"cut in key":  good[:3],
		"cut in meta": good[:5],
		"bad value":   append(good[:len(good)-1:len(good)-1], '!'),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := natsmirror.Codec[service]{}.Decode(data)
			require.Error(t, err)
		})
	}
}
