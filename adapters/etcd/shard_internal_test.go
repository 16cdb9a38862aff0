package etcd

import (
	"errors"
	"strings"
	"testing"

	"github.com/listwatch/mirror/shard"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestShardBackend_DecodesOnlyRecords(t *testing.T) {
	b := NewShardBackend(nil, "/g/", Options{})
	for _, tc := range []struct {
		key, value string
		want       shard.Record
		bad        bool
	}{
		{key: "/g/members/m-1", value: "m-1", want: shard.Record{Member: "m-1", Shard: -1}},
		{key: "/g/shards/00042", value: "m-1", want: shard.Record{Member: "m-1", Shard: 42}},
		{key: "/g/shards/123456", value: "m-1", want: shard.Record{Member: "m-1", Shard: 123456}},
		{key: "/g/members/m-1", value: "m-2", bad: true},
		{key: "/g/members/", value: "", bad: true},
		{key: "/g/shards/42", value: "m-1", bad: true},
		{key: "/g/shards/-0001", value: "m-1", bad: true},
		{key: "/g/shards/0004x", value: "m-1", bad: true},
		{key: "/g/shards/", value: "m-1", bad: true},
		{key: "/g/other", value: "secret", bad: true},
	} {
		t.Run(tc.key+"="+tc.value, func(t *testing.T) {
			got, err := b.decode(tc.key, []byte(tc.value))
			if tc.bad {
				require.ErrorIs(t, err, ErrShardRecord)
				assert.NotContains(t, err.Error(), "secret", "a value in an error")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestShardRecords_RecordCarriesRevisions(t *testing.T) {
	got := record(Object[shard.Record]{Key: "/g/shards/00001", Value: shard.Record{Member: "m", Shard: 1}, CreateRevision: 5, ModRevision: 7})
	assert.Equal(t, shard.Record{Name: "/g/shards/00001", Member: "m", Shard: 1, Token: 5, Version: "7"}, got)
	// A deletion with the key alone names the record, and nothing else.
	assert.Equal(t, shard.Record{Name: "/g/members/m"}, record(Object[shard.Record]{Key: "/g/members/m"}))
}

func TestShardLease_ExpireIsUnsupported(t *testing.T) {
	l := &shardLease{b: NewShardBackend(nil, "/g/", Options{}), id: "m"}
	err := l.Expire(t.Context(), shard.Record{Member: "other"})
	require.ErrorIs(t, err, errors.ErrUnsupported)
	assert.True(t, strings.Contains(err.Error(), "other"))
}
