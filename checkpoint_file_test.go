package mirror

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type cpObj struct {
	Name string
	Val  int
}

func writeTestCheckpoint(t *testing.T, path string, objs []cpObj) {
	t.Helper()
	h := checkpointHeader{identity: "test", version: "42", writtenAt: time.Unix(1700000000, 5), count: len(objs)}
	require.NoError(t, writeCheckpoint(path, h, slices.Values(objs), JSONCodec[cpObj]{}))
}

func loadTestCheckpoint(path string) ([]cpObj, checkpointHeader, error) {
	var got []cpObj
	h, err := loadCheckpoint(path, "test", JSONCodec[cpObj]{}, nil, func(o cpObj) error {
		got = append(got, o)
		return nil
	})
	return got, h, err
}

func TestCheckpointFile_RoundTrips(t *testing.T) {
	for _, n := range []int{0, 1, 1000} {
		path := filepath.Join(t.TempDir(), "cp")
		var objs []cpObj
		for i := range n {
			objs = append(objs, cpObj{Name: string(rune('a' + i%26)), Val: i})
		}
		writeTestCheckpoint(t, path, objs)
		got, h, err := loadTestCheckpoint(path)
		require.NoError(t, err)
		assert.Equal(t, objs, got)
		assert.Equal(t, checkpointHeader{identity: "test", version: "42", writtenAt: time.Unix(1700000000, 5), count: n}, h)
		entries, err := os.ReadDir(filepath.Dir(path))
		require.NoError(t, err)
		assert.Len(t, entries, 1, "no temporary file left")
	}
}

func TestCheckpointFile_UnusableFilesAreRefusedWhole(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	writeTestCheckpoint(t, good, []cpObj{{"a", 1}, {"b", 2}, {"c", 3}})
	data, err := os.ReadFile(good)
	require.NoError(t, err)

	cases := map[string][]byte{
		"empty":               {},
		"not a checkpoint":    []byte("hello, world, this is not a checkpoint at all"),
		"data after the end":  append(slices.Clone(data), 0),
		"newer format":        func() []byte { b := slices.Clone(data); b[8] = checkpointFormat + 1; return b }(),
		"checksum off by one": func() []byte { b := slices.Clone(data); b[len(b)-1] ^= 1; return b }(),
	}
	// Every truncation, and every single flipped bit in the objects.
	for i := range len(data) {
		cases["truncated at "+strconv.Itoa(i)] = data[:i]
	}
	for i := 8; i < len(data); i++ {
		b := slices.Clone(data)
		b[i] ^= 0x10
		cases["bit flipped at "+strconv.Itoa(i)] = b
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "cp")
			require.NoError(t, os.WriteFile(path, b, 0o600))
			_, _, err := loadTestCheckpoint(path)
			require.ErrorIs(t, err, ErrCheckpointInvalid)
			var ce *CheckpointError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, "load", ce.Op)
		})
	}
}

func TestCheckpointFile_ForeignAndMissingAreRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cp")
	_, _, err := loadTestCheckpoint(path)
	require.ErrorIs(t, err, fs.ErrNotExist)

	h := checkpointHeader{identity: "other", version: "1", count: 0}
	require.NoError(t, writeCheckpoint(path, h, slices.Values([]cpObj(nil)), JSONCodec[cpObj]{}))
	_, _, err = loadTestCheckpoint(path)
	require.ErrorIs(t, err, ErrCheckpointInvalid)
	assert.ErrorContains(t, err, `written for "other"`)
}

// failingCodec fails to encode the object named "bad".
type failingCodec struct{ JSONCodec[cpObj] }

func (c failingCodec) Append(dst []byte, o cpObj) ([]byte, error) {
	if o.Name == "bad" {
		return dst, errors.New("cannot encode")
	}
	return c.JSONCodec.Append(dst, o)
}

func TestCheckpointFile_FailedWriteLeavesThePreviousCheckpoint(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cp")
	writeTestCheckpoint(t, path, []cpObj{{"a", 1}})
	objs := []cpObj{{"b", 2}, {"bad", 3}}
	h := checkpointHeader{identity: "test", version: "43", count: len(objs)}
	err := writeCheckpoint(path, h, slices.Values(objs), Codec[cpObj](failingCodec{}))
	var ce *CheckpointError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "write", ce.Op)

	got, hdr, err := loadTestCheckpoint(path)
	require.NoError(t, err)
	assert.Equal(t, []cpObj{{"a", 1}}, got)
	assert.Equal(t, "42", hdr.version)
	entries, err := os.ReadDir(filepath.Dir(path))
	require.NoError(t, err)
	assert.Len(t, entries, 1, "the temporary file is removed")
}
