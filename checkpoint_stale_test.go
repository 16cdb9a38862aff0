package mirror

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// What a writer killed mid-write leaves is removed; nothing else is.
func TestCheckpointFile_StaleTemporaryFilesAreRemovedAndNothingElse(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cp")
	writeTestCheckpoint(t, path, []cpObj{{"a", 1}})
	// A write that a kill interrupts leaves its temporary file, named as
	// os.CreateTemp names them.
	for range 3 {
		f, err := os.CreateTemp(dir, "cp.tmp*")
		require.NoError(t, err)
		_, err = f.WriteString("half a checkpoint")
		require.NoError(t, err)
		require.NoError(t, f.Close())
	}
	kept := []string{"cp", "cp.tmp", "cp.tmpx", "cp.tmp12x", "cp.bak", "other.tmp123", "xcp.tmp123"}
	for _, name := range kept[1:] {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), nil, 0o600))
	}
	require.NoError(t, os.Mkdir(filepath.Join(dir, "cp.tmp999"), 0o700))
	kept = append(kept, "cp.tmp999")

	removeStaleTemps(path)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	slices.Sort(left)
	slices.Sort(kept)
	assert.Equal(t, kept, left)
	got, _, err := loadTestCheckpoint(path)
	require.NoError(t, err)
	assert.Equal(t, []cpObj{{"a", 1}}, got)

	removeStaleTemps(filepath.Join(t.TempDir(), "missing", "cp")) // no directory: nothing to do
}
