package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRun_DemoMirrorsAndVerifies runs the README's main command end to
// end, on its embedded etcd, and checks that it verified the mirror and
// exited cleanly.
func TestRun_DemoMirrorsAndVerifies(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	require.NoError(t, run(ctx, []string{"--seed", "2000", "--changes", "200"}, &out), out.String())
	s := out.String()
	assert.Contains(t, s, "synced 2000 keys")
	assert.Contains(t, s, "verified: the mirror matches etcd")
	assert.Contains(t, s, `reported: mirror: object "/demo/services/broken" skipped`)
	assert.Contains(t, s, "delete /demo/services/")
}

func TestRun_RejectsBadFlags(t *testing.T) {
	var out bytes.Buffer
	require.Error(t, run(t.Context(), []string{"--prefix", ""}, &out))
	require.Error(t, run(t.Context(), []string{"stray"}, &out))
}
