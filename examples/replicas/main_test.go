package main

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/listwatch/mirror/examples/internal/cli/clitest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRun_DemoKillsAReplicaAndEveryKeyConverges runs the README's command
// end to end: three replica processes split the shards and reconcile
// every key; one is killed with SIGKILL, the others take its shards over
// and every key converges again.
func TestRun_DemoKillsAReplicaAndEveryKeyConverges(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	out := &clitest.Output{}
	require.NoError(t, run(ctx, []string{"--keys", "100", "--kill-after", "500ms"}, out), out.String())
	s := out.String()
	assert.Regexp(t, `(?m)^shards held: replica-1 \d+, replica-2 \d+, replica-3 \d+ \(256 shards\)$`, s)
	assert.Contains(t, s, "every key converged: its status holds its value")
	assert.Regexp(t, `(?m)^kill -9 replica-1 \(pid \d+\), which holds \d+ shards$`, s)
	assert.Regexp(t, `(?m)^shards held: replica-2 \d+, replica-3 \d+ \(256 shards\)$`, s, "the killed replica's shards are taken over")
	assert.Regexp(t, `(?m)^replica-1's \d+ shards taken over [0-9.]+m?s after the kill, once its lease ended$`, s)
	assert.Contains(t, s, "every key converged again, reconciled by the replicas left")
	assert.Regexp(t, `(?m)^  replica-2: left after \d+s: \d+ keys reconciled, \d+ writes refused$`, s, "the replicas left leave gracefully")
	assert.Regexp(t, `summary: 3 replicas, 100 keys; replica-1 killed, its \d+ shards taken over in [0-9.]+m?s \(lease TTL 3s\); every key converged before and after the kill\n$`, s)
}

// --duration stops the demo, the replicas leave, and the summary says
// how far it got.
func TestRun_DurationStopsTheDemoWithTheSummary(t *testing.T) {
	out := &clitest.Output{}
	require.NoError(t, run(t.Context(), []string{"--keys", "20", "--kill-after", "1h", "--duration", "5s"}, out), out.String())
	assert.Contains(t, out.String(), "stopped: --duration 5s over\n")
	// Whether the keys converged within 5s depends on the machine.
	assert.Regexp(t, `summary: 3 replicas, 20 keys; no replica killed; (every key converged before the kill|the keys never converged)\n$`, out.String())
}

func TestMain(m *testing.M) {
	if os.Getenv(replicaEnv) != "" {
		main() // a replica that a test's run started
	}
	clitest.Main(m, main)
}

// The program's exit status: 0 for --help, 2 for a bad flag or argument,
// saying why.
func TestMain_ExitStatus(t *testing.T) {
	clitest.RunCases(t, []clitest.Case{
		{Name: "help", Args: []string{"--help"}, Stdout: "-kill-after"},
		{Name: "unknown flag", Args: []string{"--no-such-flag"}, Code: 2, Stderr: "flag provided but not defined: -no-such-flag"},
		{Name: "argument", Args: []string{"stray"}, Code: 2, Stderr: `unexpected arguments ["stray"]`},
		{Name: "one replica", Args: []string{"--replicas", "1"}, Code: 2, Stderr: "--replicas 1: at least 2"},
		{Name: "no keys", Args: []string{"--keys", "0"}, Code: 2, Stderr: "--keys 0: at least 1"},
		{Name: "ttl in parts of a second", Args: []string{"--ttl", "1500ms"}, Code: 2, Stderr: "--ttl 1.5s: whole seconds"},
	})
}

// Ctrl-C stops the program, and its replicas, with the summary so far
// and status 0.
func TestMain_InterruptPrintsTheSummaryAndExitsZero(t *testing.T) {
	p := clitest.InterruptAt(t, "^every key converged: ", "--keys", "50", "--kill-after", "1h")
	p.Stdout.Until(t, `^  replica-\d: left after `)
	p.Stdout.Until(t, `^summary: 3 replicas, 50 keys; no replica killed; every key converged before the kill$`)
}

// --quiet prints the summary alone: nothing of the replicas.
func TestMain_QuietPrintsOnlyTheSummary(t *testing.T) {
	code, stdout, stderr := clitest.Run(t, "--quiet", "--keys", "50", "--kill-after", "100ms")
	require.Equal(t, 0, code, stderr)
	assert.Regexp(t, `^summary: 3 replicas, 50 keys; replica-1 killed, [^\n]+\n$`, stdout)
	assert.Empty(t, stderr)
}
