package mirror

import (
	"encoding/binary"
	"hash/crc32"
	"hash/maphash"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A checkpoint written in format 1, before keys and versions, still loads.
func TestCheckpointFile_ReadsFormat1(t *testing.T) {
	objs := []cpObj{{"a", 1}, {"b", 2}}
	b := []byte(checkpointMagic)
	b = binary.LittleEndian.AppendUint16(b, 1)
	b = appendField(b, "test")
	b = appendField(b, "42")
	b = binary.LittleEndian.AppendUint64(b, uint64(time.Unix(1700000000, 5).UnixNano()))
	b = binary.AppendUvarint(b, uint64(len(objs)))
	for _, o := range objs {
		enc, err := JSONCodec[cpObj]{}.Append(nil, o)
		require.NoError(t, err)
		b = appendField(b, string(enc))
	}
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, crc32c))
	path := filepath.Join(t.TempDir(), "cp")
	require.NoError(t, os.WriteFile(path, b, 0o600))

	got, h, err := loadTestCheckpoint(path)
	require.NoError(t, err)
	assert.Equal(t, objs, got)
	assert.Equal(t, checkpointHeader{identity: "test", version: "42", writtenAt: time.Unix(1700000000, 5), count: 2}, h)
	f, err := readCheckpointFile(path, "test", nil)
	require.NoError(t, err)
	assert.False(t, f.indexed, "format 1 has no keys")
}

func writeIndexedTestCheckpoint(t *testing.T, path string, objs []cpObj) {
	t.Helper()
	h := checkpointHeader{identity: "test", version: "42", writtenAt: time.Unix(1700000000, 5), count: len(objs)}
	require.NoError(t, writeIndexedCheckpoint(path, h, slices.Values(objs), JSONCodec[cpObj]{},
		func(o cpObj) (string, string) { return o.Name, strconv.Itoa(o.Val) }))
}

// An indexed checkpoint loads as any, and, indexed, tells of each key
// whether it holds it and at which version, decoding only what is asked.
func TestCheckpointIndex_FindsKeysAndVersions(t *testing.T) {
	var objs []cpObj
	for i := range 1000 {
		objs = append(objs, cpObj{Name: "k" + strconv.Itoa(i), Val: i % 7})
	}
	path := filepath.Join(t.TempDir(), "cp")
	writeIndexedTestCheckpoint(t, path, objs)
	got, _, err := loadTestCheckpoint(path)
	require.NoError(t, err)
	assert.Equal(t, objs, got)

	f, err := readCheckpointFile(path, "test", nil)
	require.NoError(t, err)
	require.True(t, f.indexed)
	x := &checkpointIndex[cpObj]{file: f, codec: JSONCodec[cpObj]{}}
	x.build()
	for i, o := range objs {
		if i%3 == 0 {
			continue // never listed
		}
		version := strconv.Itoa(o.Val)
		if i%3 == 2 {
			version = "changed"
		}
		j, unchanged, ok := x.find(o.Name, version)
		require.True(t, ok, o.Name)
		assert.Equal(t, i%3 == 1, unchanged, o.Name)
		old, err := x.decode(j)
		require.NoError(t, err)
		assert.Equal(t, o, old)
	}
	_, _, ok := x.find("missing", "1")
	assert.False(t, ok)
	var unlisted []string
	for key, i := range x.unlisted {
		unlisted = append(unlisted, key)
		old, err := x.decode(i)
		require.NoError(t, err)
		assert.Equal(t, key, old.Name)
	}
	var want []string
	for i := 0; i < len(objs); i += 3 {
		want = append(want, objs[i].Name)
	}
	assert.Equal(t, want, unlisted)
}

// A key whose hash another record's key had when the index was built is
// found by its key, and so is one whose hash matches another key's.
func TestCheckpointIndex_KeysSharingAHashAreFound(t *testing.T) {
	objs := []cpObj{{"a", 1}, {"b", 2}, {"c", 3}}
	path := filepath.Join(t.TempDir(), "cp")
	writeIndexedTestCheckpoint(t, path, objs)
	f, err := readCheckpointFile(path, "test", nil)
	require.NoError(t, err)
	x := &checkpointIndex[cpObj]{file: f, codec: JSONCodec[cpObj]{}}
	x.build()
	// As if b's hash were a's: b's record is among those collided, and
	// a's hash finds a record of another key than a.
	hb := maphash.String(x.seed, "b")
	delete(x.byHash, hb)
	x.collided = map[string]int32{"b": 1}
	ha := maphash.String(x.seed, "a")
	x.byHash[ha] = hashed(2, 0)

	i, unchanged, ok := x.find("b", "2")
	require.True(t, ok)
	assert.Equal(t, 1, i)
	assert.True(t, unchanged)
	_, _, ok = x.find("a", "1")
	assert.False(t, ok, "a hash found, but not the key")
	var unlisted []string
	for key := range x.unlisted {
		unlisted = append(unlisted, key)
	}
	assert.Equal(t, []string{"a", "c"}, unlisted)
}
