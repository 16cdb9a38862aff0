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
	for _, tc := range []struct {
		name        string
		args        []string
		code        int
		stdout, why string
	}{
		{"help", []string{"--help"}, 0, "-sync-timeout", ""},
		{"unknown flag", []string{"--no-such-flag"}, 2, "", "flag provided but not defined: -no-such-flag"},
		{"argument", []string{"stray"}, 2, "", `unexpected arguments ["stray"]`},
		{"negative seed", []string{"--seed", "-1"}, 2, "", "--seed -1 --changes 200: neither may be negative"},
		{"creds without a server", []string{"--creds", "x.creds"}, 2, "", "--creds needs --url"},
		{"unreachable", []string{"--url", "nats://127.0.0.1:1", "--sync-timeout", "1s"}, 1, "", "connect to nats://127.0.0.1:1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := clitest.Run(t, tc.args...)
			assert.Equal(t, tc.code, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
			assert.Contains(t, stdout, tc.stdout)
			assert.Contains(t, stderr, tc.why)
			if tc.code == 0 {
				assert.Empty(t, stderr)
			}
		})
	}
}

// Ctrl-C stops the program with the summary so far and status 0.
func TestMain_InterruptPrintsTheSummaryAndExitsZero(t *testing.T) {
	p := clitest.Start(t, "--seed", "100", "--changes", "100000000")
	p.Stdout.Until(t, "^synced: 100 keys")
	p.Interrupt(t)
	require.Equal(t, 0, p.Wait(t), "stderr:\n%s", p.Stderr)
	p.Stdout.Until(t, "^interrupted$")
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
