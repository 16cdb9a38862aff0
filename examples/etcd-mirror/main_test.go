package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/listwatch/mirror/examples/internal/cli/clitest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRun_DemoMirrorsAndVerifies runs the README's main command end to
// end, on its embedded etcd, and checks that it verified the mirror and
// exited cleanly, and that the outage it plays made the mirror relist and
// report what it missed: the keys deleted meanwhile as deletions whose
// final state is unknown, and the key deleted and created again as a
// deletion and then an addition.
func TestRun_DemoMirrorsAndVerifies(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	require.NoError(t, run(ctx, []string{"--seed", "2000", "--changes", "200"}, &out), out.String())
	s := out.String()
	assert.Contains(t, s, "synced 2000 keys")
	assert.Contains(t, s, "verified: the mirror matches etcd")
	assert.Contains(t, s, "(observed)", "a deletion the watch saw")
	assert.Contains(t, s, "mirror: resource version expired", "the watch found its revision compacted")
	assert.Regexp(t, `\d+ lists \([1-9]\d* relists?\)`, s, "the summary counts the relist")

	outage := regexp.MustCompile(`while cut off: deleted (\S+) and (\S+); deleted and re-created (\S+);`).FindStringSubmatch(s)
	require.NotNil(t, outage, "the demo's outage")
	lines := strings.Split(s, "\n")
	find := func(prefix string) []int {
		var at []int
		for i, l := range lines {
			if strings.HasPrefix(l, prefix) {
				at = append(at, i)
			}
		}
		return at
	}
	for _, name := range outage[1:3] {
		deletes := find("delete /demo/services/" + name + " ")
		require.Len(t, deletes, 1, "one delete of %s", name)
		assert.Contains(t, lines[deletes[0]], "(unseen, found by a relist)")
	}
	// A value that stopped decoding is reported, and the key dropped for
	// it: no relist had anything to do with it.
	broken := regexp.MustCompile(`wrote  (\S+) = \{not json`).FindStringSubmatch(s)
	require.NotNil(t, broken, "the demo's undecodable value")
	assert.Contains(t, s, `reported: mirror: object "`+broken[1]+`" skipped`)
	dropped := find("delete " + broken[1] + " ")
	require.Len(t, dropped, 1, "one delete of %s", broken[1])
	assert.Regexp(t, `\(dropped: its value at rev \d+ does not decode\)$`, lines[dropped[0]])

	recreated := outage[3]
	deletes, adds := find("delete /demo/services/"+recreated+" "), find("add    /demo/services/"+recreated+" ")
	require.Len(t, deletes, 1, "one delete of the re-created %s", recreated)
	require.Len(t, adds, 1, "one add of the re-created %s", recreated)
	assert.Contains(t, lines[deletes[0]], "(unseen, found by a relist)")
	assert.Less(t, deletes[0], adds[0], "the re-created key: delete, then add")
}

// Ctrl-C in the demo, here once the mirror has synced, stops it with the
// summary, and is no failure.
func TestRun_DemoInterruptedPrintsTheSummaryAndSucceeds(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	out := clitest.CancelAt("synced 200 keys", cancel)
	require.NoError(t, run(ctx, []string{"--seed", "200", "--changes", "100000000"}, out), out.String())
	s := out.String()
	assert.Contains(t, s, "interrupted")
	assert.Contains(t, s, "summary: ")
	assert.NotContains(t, s, "verified", "the demo did not run to its end")
}

// With --metrics-addr, the demo serves the mirror's metrics for
// Prometheus at /metrics, labelled by the prefix it mirrors.
func TestRun_MetricsAddrServesTheMirrorsMetrics(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	out := &clitest.Output{}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--seed", "200", "--changes", "100000000", "--metrics-addr", "127.0.0.1:0"}, out)
	}()
	url := regexp.MustCompile(`serving metrics at (\S+)`).FindStringSubmatch(out.Until(t, "^serving metrics at "))[1]
	out.Until(t, "^synced 200 keys")

	scrape := func() string {
		resp, err := http.Get(url)
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return err.Error()
		}
		return string(body)
	}
	// The demo writes changes on: the mirror's series keep moving.
	const name = `name="/demo/services/"`
	require.Eventually(t, func() bool {
		body := scrape()
		return strings.Contains(body, `mirror_lists_total{cause="initial",`+name+`} 1`+"\n") &&
			regexp.MustCompile(`mirror_handler_deliveries_total\{handler="print",`+name+`\} [1-9]`).MatchString(body)
	}, time.Minute, 10*time.Millisecond, "the initial list and the handler's deliveries")
	body := scrape()
	for _, metric := range []string{"mirror_cache_objects", "mirror_cache_resource_version", "mirror_staleness_seconds", "go_goroutines"} {
		assert.Contains(t, body, "\n"+metric, metric)
	}
	cancel()
	require.NoError(t, <-done)
}

// --duration bounds the whole run, the initial sync included: a cluster
// that never answers makes the run fail, saying why, when it is over.
func TestRun_DurationCoversTheInitialSync(t *testing.T) {
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- run(t.Context(), []string{"--endpoints", "http://" + silentServer(t), "--duration", "500ms"}, &out)
	}()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.ErrorContains(t, err, "not synced within --duration 500ms")
	case <-time.After(time.Minute):
		require.FailNow(t, "run did not return: --duration does not bound the initial sync")
	}
}

// silentServer returns the address of a server that accepts connections
// and never answers.
func silentServer(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	return ln.Addr().String()
}

func TestMain(m *testing.M) { clitest.Main(m, main) }

// The program's exit status: 0 for --help, 2 for a bad flag or argument,
// saying why, 1 for a failure.
func TestMain_ExitStatus(t *testing.T) {
	noEtcdctlEnv(t)
	clitest.RunCases(t, []clitest.Case{
		{Name: "help", Args: []string{"--help"}, Stdout: "-sync-timeout"},
		{Name: "unknown flag", Args: []string{"--no-such-flag"}, Code: 2, Stderr: "flag provided but not defined: -no-such-flag"},
		{Name: "bad value", Args: []string{"--seed", "many"}, Code: 2, Stderr: `invalid value "many" for flag -seed`},
		{Name: "argument", Args: []string{"stray"}, Code: 2, Stderr: `unexpected arguments ["stray"]`},
		{Name: "empty prefix", Args: []string{"--prefix", ""}, Code: 2, Stderr: "--prefix must not be empty"},
		{Name: "too few keys for the demo", Args: []string{"--seed", "2"}, Code: 2, Stderr: "--seed 2: the demo needs at least 3 keys"},
		{Name: "not synced in time", Args: []string{"--endpoints", "http://" + silentServer(t), "--sync-timeout", "1s"}, Code: 1, Stderr: "not synced within --sync-timeout 1s"},
	})
}

// Ctrl-C stops the program with the summary so far and status 0.
func TestMain_InterruptPrintsTheSummaryAndExitsZero(t *testing.T) {
	p := clitest.InterruptAt(t, "^synced 100 keys", "--seed", "100", "--changes", "100000000")
	p.Stdout.Until(t, "^summary: ")
}

// --quiet prints the summary alone: no changes, no reported errors, no
// logs.
func TestMain_QuietPrintsOnlyTheSummary(t *testing.T) {
	code, stdout, stderr := clitest.Run(t, "--quiet", "--seed", "10", "--changes", "20")
	require.Equal(t, 0, code, stderr)
	assert.Regexp(t, `^summary: [^\n]+\n$`, stdout)
	assert.Empty(t, stderr)
}

func TestPlural_SaysOneInTheSingular(t *testing.T) {
	for _, tc := range []struct {
		n    int
		noun string
		want string
	}{
		{0, "error", "0 errors"},
		{1, "error", "1 error"},
		{2, "list", "2 lists"},
		{1, "watch", "1 watch"},
		{3, "watch", "3 watches"},
		{1, "undecodable value", "1 undecodable value"},
	} {
		assert.Equal(t, tc.want, plural(tc.n, tc.noun))
	}
}
