package mirror

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A load makes room for the objects at once, as many as the header says,
// but never more than the file could hold, whatever a corrupt count says.
func TestCheckpointFile_LoadReservesTheCountBoundedByTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cp")
	writeTestCheckpoint(t, path, []cpObj{{"a", 1}, {"b", 2}, {"c", 3}})
	load := func() (reserved []int, err error) {
		_, err = loadCheckpoint(path, "test", JSONCodec[cpObj]{}, func(_ checkpointHeader, n int) { reserved = append(reserved, n) },
			func(cpObj) error { return nil })
		return reserved, err
	}
	reserved, err := load()
	require.NoError(t, err)
	assert.Equal(t, []int{3}, reserved)

	// The count follows the magic, the format, the identity "test", the
	// version "42" and the time: a one-byte uvarint at offset 26.
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, byte(3), b[26])
	b[26] = 0x7f
	require.NoError(t, os.WriteFile(path, b, 0o600))
	reserved, err = load()
	require.ErrorIs(t, err, ErrCheckpointInvalid)
	require.Len(t, reserved, 1)
	assert.Less(t, reserved[0], len(b)-26, "no more than the bytes left after the count")
}
