package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/listwatch/mirror/examples/internal/cli/clitest"
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

func TestRun_UnreachableServerFailsTheSync(t *testing.T) {
	err := run(t.Context(), []string{"--url", "nats://127.0.0.1:1", "--sync-timeout", "1s"}, &bytes.Buffer{})
	require.Error(t, err)
}

func TestParseFlags_RefusesCredsWithoutURL(t *testing.T) {
	_, err := parseFlags([]string{"--creds", "x.creds"}, &bytes.Buffer{})
	require.ErrorContains(t, err, "--creds needs --url")
}

func TestMain(m *testing.M) { clitest.Main(m, main) }

// The program's exit status: 0 for --help, 2 for a bad flag or argument,
// saying why, 1 for a failure.
func TestMain_ExitStatus(t *testing.T) {
	clitest.RunCases(t, []clitest.Case{
		{Name: "help", Args: []string{"--help"}, Stdout: "-sync-timeout"},
		{Name: "unknown flag", Args: []string{"--no-such-flag"}, Code: 2, Stderr: "flag provided but not defined: -no-such-flag"},
		{Name: "argument", Args: []string{"stray"}, Code: 2, Stderr: `unexpected arguments ["stray"]`},
		{Name: "negative seed", Args: []string{"--seed", "-1"}, Code: 2, Stderr: "--seed -1 --changes 200: neither may be negative"},
		{Name: "creds without a server", Args: []string{"--creds", "x.creds"}, Code: 2, Stderr: "--creds needs --url"},
		{Name: "unreachable", Args: []string{"--url", "nats://127.0.0.1:1", "--sync-timeout", "1s"}, Code: 1, Stderr: "connect to nats://127.0.0.1:1"},
	})
}

// Ctrl-C stops the program with the summary so far and status 0.
func TestMain_InterruptPrintsTheSummaryAndExitsZero(t *testing.T) {
	p := clitest.InterruptAt(t, "^synced: 100 keys", "--seed", "100", "--changes", "100000000")
	p.Stdout.Until(t, "^summary: ")
}

// --quiet prints the summary alone: no changes, no reported errors, no
// logs.
func TestMain_QuietPrintsOnlyTheSummary(t *testing.T) {
	code, stdout, stderr := clitest.Run(t, "--quiet", "--seed", "10", "--changes", "10")
	require.Equal(t, 0, code, stderr)
	assert.Regexp(t, `^summary: [^\n]+\n$`, stdout)
	assert.Empty(t, stderr)
}
