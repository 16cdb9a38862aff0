package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRun_DemoMirrorsTheBucketAcrossARestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	require.NoError(t, run(ctx, []string{"--seed", "200", "--changes", "100"}, &out))
	s := out.String()
	assert.Contains(t, s, "synced: 200 keys")
	assert.Contains(t, s, "restarting the server")
	assert.Contains(t, s, "check: the mirror and its handler match the bucket")
	assert.Contains(t, s, `object "svc.bad"`) // the value that does not decode
}

func TestRun_QuietPrintsOnlyTheSummary(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(t.Context(), []string{"--quiet", "--seed", "10", "--changes", "10"}, &out))
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 3, out.String())
	assert.True(t, strings.HasPrefix(lines[2], "summary: "))
}

func TestRun_UnreachableServerFailsTheSync(t *testing.T) {
	err := run(t.Context(), []string{"--url", "nats://127.0.0.1:1", "--sync-timeout", "1s"}, &bytes.Buffer{})
	require.Error(t, err)
}

func TestParseFlags_RefusesCredsWithoutURL(t *testing.T) {
	_, err := parseFlags([]string{"--creds", "x.creds"}, &bytes.Buffer{})
	require.ErrorContains(t, err, "--creds needs --url")
}
