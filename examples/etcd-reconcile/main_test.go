package main

import (
	"context"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/listwatch/mirror/examples/internal/cli/clitest"
	"github.com/listwatch/mirror/examples/internal/embedetcd"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// TestRun_DemoRendersAndVerifies runs the README's command end to end, on
// its embedded etcd: it renders the services, follows an update, an
// addition, a deletion and a value that stops decoding, verifies the files
// against etcd and succeeds, leaving the files of the services left.
func TestRun_DemoRendersAndVerifies(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	out, dir := &clitest.Output{}, t.TempDir()
	require.NoError(t, run(ctx, []string{"--out", dir}, out), out.String())
	s := out.String()
	assert.Contains(t, s, "synced 4 keys")
	assert.Contains(t, s, "removed cache.conf  (/demo/services/cache is gone)")
	assert.Contains(t, s, "removed web.conf  (/demo/services/web is gone)", "a value that does not decode")
	assert.Contains(t, s, "summary: [api.conf db.conf search.conf] in "+dir+"; ")

	files, err := rendered(dir)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"api.conf", "db.conf", "search.conf"}, slices.Collect(maps.Keys(files)))
	assert.Contains(t, files["api.conf"], "zone    us-east\nport    8443\n", "the update")
	assert.Contains(t, files["search.conf"], "service search\n")
}

// startEtcd starts an embedded etcd for a test and returns a client of it.
func startEtcd(t *testing.T) (*embedetcd.Server, *clientv3.Client) {
	t.Helper()
	srv, err := embedetcd.Start(t.Context(), "etcd-reconcile-test")
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Endpoint}, Logger: zap.NewNop()})
	require.NoError(t, err)
	t.Cleanup(func() { client.Close() })
	return srv, client
}

// Against a cluster of its own (--endpoints), the program keeps the files
// in step with etcd through additions, updates and deletions, removes a
// file left from before whose key is gone, leaves alone the files that
// are not its own, reports and skips a key whose name cannot name a file,
// and stops cleanly when interrupted.
func TestRun_FilesFollowEtcd(t *testing.T) {
	srv, client := startEtcd(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	const prefix = "/svc/"
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "stale.conf"), []byte("old"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("mine"), 0o644))
	put := func(key, value string) {
		t.Helper()
		_, err := client.Put(ctx, key, value)
		require.NoError(t, err)
	}
	put(prefix+"api", `{"zone":"eu","port":443}`)
	put(prefix+"a/b", `{"zone":"eu","port":1}`)

	out := &clitest.Output{}
	done := make(chan error, 1)
	runCtx, interrupt := context.WithCancel(ctx)
	defer interrupt()
	go func() {
		done <- run(runCtx, []string{"--endpoints", srv.Endpoint, "--prefix", prefix, "--out", dir}, out)
	}()
	inStep := func(names ...string) {
		t.Helper()
		require.Eventually(t, func() bool {
			want, _, err := expected(ctx, client, prefix)
			if err != nil {
				return false
			}
			got, err := rendered(dir)
			return err == nil && maps.Equal(want, got) && slices.Equal(names, slices.Sorted(maps.Keys(got)))
		}, 30*time.Second, 10*time.Millisecond, "want %v; output:\n%s", names, out)
	}
	inStep("api.conf")

	put(prefix+"db", `{"zone":"us","port":5432}`)
	put(prefix+"api", `{"zone":"us","port":8443}`)
	inStep("api.conf", "db.conf")
	api, err := os.ReadFile(filepath.Join(dir, "api.conf"))
	require.NoError(t, err)
	assert.Contains(t, string(api), "service api\nzone    us\nport    8443\n")

	_, err = client.Delete(ctx, prefix+"api")
	require.NoError(t, err)
	inStep("db.conf")
	_, err = client.Delete(ctx, prefix, clientv3.WithPrefix())
	require.NoError(t, err)
	inStep()

	notes, err := os.ReadFile(filepath.Join(dir, "notes.txt"))
	require.NoError(t, err)
	assert.Equal(t, "mine", string(notes), "not a file of the program's")
	interrupt()
	require.NoError(t, <-done)
	assert.Contains(t, out.String(), "interrupted\n")
	assert.Contains(t, out.String(), "summary: [] in "+dir+"; ")
	assert.Contains(t, out.String(), "removed stale.conf  (/svc/stale is gone)")
	assert.Contains(t, out.String(), `reconcile: reconcile "render": key /svc/a/b: attempt 1 failed, terminal error, dropped: "/svc/a/b": `+errBadName.Error())
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temporary file left")
}

func TestRun_DurationEndsTheRun(t *testing.T) {
	srv, _ := startEtcd(t)
	out := &clitest.Output{}
	require.NoError(t, run(t.Context(), []string{"--endpoints", srv.Endpoint, "--out", t.TempDir(), "--duration", "500ms"}, out))
	assert.Contains(t, out.String(), "stopped: --duration 500ms over")
}

func TestMain(m *testing.M) { clitest.Main(m, main) }

// The program's exit status: 0 for --help, 2 for a bad flag or argument,
// saying why, 1 for a failure.
func TestMain_ExitStatus(t *testing.T) {
	clitest.RunCases(t, []clitest.Case{
		{Name: "help", Args: []string{"--help"}, Stdout: "-sync-timeout"},
		{Name: "unknown flag", Args: []string{"--no-such-flag"}, Code: 2, Stderr: "flag provided but not defined: -no-such-flag"},
		{Name: "argument", Args: []string{"stray"}, Code: 2, Stderr: `unexpected arguments ["stray"]`},
		{Name: "empty prefix", Args: []string{"--prefix", ""}, Code: 2, Stderr: "--prefix must not be empty"},
		{Name: "no workers", Args: []string{"--workers", "0"}, Code: 2, Stderr: "--workers 0: at least 1"},
		{Name: "not synced in time", Args: []string{"--endpoints", "http://" + silentServer(t), "--sync-timeout", "1s", "--out", t.TempDir()}, Code: 1, Stderr: "not synced within --sync-timeout 1s"},
	})
}

// Ctrl-C stops the program with the summary so far and status 0.
func TestMain_InterruptPrintsTheSummaryAndExitsZero(t *testing.T) {
	srv, _ := startEtcd(t)
	p := clitest.InterruptAt(t, "^synced 0 keys", "--endpoints", srv.Endpoint, "--out", t.TempDir())
	p.Stdout.Until(t, `^summary: \[\] in `)
}

// --quiet prints the summary alone: no files written, no reported errors,
// no logs.
func TestMain_QuietPrintsOnlyTheSummary(t *testing.T) {
	code, stdout, stderr := clitest.Run(t, "--quiet")
	require.Equal(t, 0, code, stderr)
	assert.Regexp(t, `^summary: \[api.conf db.conf search.conf\] in [^\n]+\n$`, stdout)
	assert.Empty(t, stderr)
}

// silentServer returns the address of a server that accepts connections
// and never answers.
func silentServer(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String() // the backlog accepts, nobody answers
}
