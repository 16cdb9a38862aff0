package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/examples/internal/cli"
	"github.com/listwatch/mirror/examples/internal/cli/clitest"
	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// cuttable serves a handler until Cut: then it ends the requests in
// progress, and answers the new ones 503 Service Unavailable, until
// Resume. It plays an outage of the catalog's API.
type cuttable struct {
	h http.Handler

	mu       sync.Mutex
	cut      bool
	inFlight map[*context.CancelFunc]struct{}
	wg       sync.WaitGroup
}

func (c *cuttable) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	c.mu.Lock()
	if c.cut {
		c.mu.Unlock()
		http.Error(w, "cut", http.StatusServiceUnavailable)
		return
	}
	c.inFlight[&cancel] = struct{}{}
	c.wg.Add(1)
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.inFlight, &cancel)
		c.mu.Unlock()
		c.wg.Done()
	}()
	c.h.ServeHTTP(w, r.WithContext(ctx))
}

// Cut returns once the requests in progress have ended.
func (c *cuttable) Cut() {
	c.mu.Lock()
	c.cut = true
	for cancel := range c.inFlight {
		(*cancel)()
	}
	c.mu.Unlock()
	c.wg.Wait()
}

func (c *cuttable) Resume() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cut = false
}

// serve starts a loopback HTTP server of h for the test and returns a
// source reading it.
func serve(t *testing.T, h http.Handler) *catalogSource {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &catalogSource{base: srv.URL, client: srv.Client()}
}

// startInformer runs an informer of src until the test ends and returns
// the notifications of its handler, one line each, once it has synced.
func startInformer(t *testing.T, src *catalogSource) (*mirror.Informer[string, Product], <-chan string) {
	t.Helper()
	inf := newInformer(src, nil)
	notes := make(chan string, 100)
	reg, err := inf.AddEventHandler(mirror.HandlerFuncs[Product]{
		AddFunc:    func(p Product, _ bool) { notes <- fmt.Sprintf("add %s %d", p.Name, p.Price) },
		UpdateFunc: func(old, p Product) { notes <- fmt.Sprintf("update %s %d->%d", p.Name, old.Price, p.Price) },
		DeleteFunc: func(p Product, unknown bool) {
			notes <- fmt.Sprintf("delete %s %d unknown=%t", p.Name, p.Price, unknown)
		},
	}, mirror.HandlerOptions{})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	require.NoError(t, mirror.WaitForCacheSync(ctx, reg))
	return inf, notes
}

func next(t *testing.T, notes <-chan string) string {
	t.Helper()
	select {
	case n := <-notes:
		return n
	case <-time.After(30 * time.Second):
		require.FailNow(t, "no notification")
		return ""
	}
}

func TestSource_InformerFollowsTheCatalog(t *testing.T) {
	cat := newCatalog(100)
	cat.set("apple", 120)
	inf, notes := startInformer(t, serve(t, cat))
	assert.Equal(t, "add apple 120", next(t, notes))

	cat.set("bread", 250)
	cat.set("apple", 130)
	cat.remove("bread")
	for _, want := range []string{"add bread 250", "update apple 120->130", "delete bread 250 unknown=false"} {
		assert.Equal(t, want, next(t, notes))
	}
	assert.Equal(t, []string{"apple"}, inf.ListKeys())
}

// An outage longer than the catalog's history makes the watch fail with
// source.ErrExpired (410 Gone): the informer lists again, and reports the
// products removed meanwhile as deletions whose final state is unknown,
// and the changed ones as updates, but not the ones left as they were.
func TestSource_OutageLongerThanTheHistoryRelistsAndReportsWhatChanged(t *testing.T) {
	cat := newCatalog(2)
	for _, name := range []string{"apple", "bread", "cheese"} {
		cat.set(name, 100)
	}
	api := &cuttable{h: cat, inFlight: make(map[*context.CancelFunc]struct{})}
	_, notes := startInformer(t, serve(t, api))
	for range 3 {
		next(t, notes) // the initial adds
	}

	api.Cut()
	cat.remove("apple")
	cat.set("bread", 200)
	cat.set("dates", 400) // three changes: more than the history holds
	api.Resume()

	var got []string
	for len(got) == 0 || got[len(got)-1] != "delete apple 100 unknown=true" {
		got = append(got, next(t, notes))
	}
	// The relist's deletions come last; a product set after it is
	// reported after anything else the relist made.
	cat.set("eggs", 300)
	for n := next(t, notes); n != "add eggs 300"; n = next(t, notes) {
		got = append(got, n)
	}
	assert.ElementsMatch(t, []string{"update bread 100->200", "add dates 400", "delete apple 100 unknown=true"}, got,
		"nothing about cheese, which did not change")
}

func TestSource_ErrorsAreClassified(t *testing.T) {
	ctx := t.Context()
	cat := newCatalog(2)
	for range 3 {
		cat.set("apple", 100)
	}
	src := serve(t, cat)

	w, err := src.Watch(ctx, source.WatchOptions{ResourceVersion: "1"})
	require.NoError(t, err)
	defer w.Stop()
	_, err = w.Next(ctx)
	require.ErrorIs(t, err, source.ErrExpired, "a revision the history no longer reaches")
	_, err = w.Next(ctx)
	require.ErrorIs(t, err, source.ErrExpired, "every later call returns the error")

	_, err = src.List(ctx, source.ListOptions{ResourceVersion: "1000"})
	require.ErrorIs(t, err, source.ErrTooLargeResourceVersion)

	down := serve(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "down", http.StatusServiceUnavailable)
	}))
	_, err = down.List(ctx, source.ListOptions{})
	require.ErrorIs(t, err, source.ErrUnavailable)

	srv := httptest.NewServer(cat)
	srv.Close()
	_, err = (&catalogSource{base: srv.URL, client: http.DefaultClient}).List(ctx, source.ListOptions{})
	require.ErrorIs(t, err, source.ErrUnavailable, "a refused connection")
}

func TestWatcher_StopEndsNextWithEOF(t *testing.T) {
	cat := newCatalog(10)
	src := serve(t, cat)
	w, err := src.Watch(t.Context(), source.WatchOptions{ResourceVersion: "1"})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := w.Next(t.Context()) // nothing changes: a long poll
		done <- err
	}()
	w.Stop()
	require.ErrorIs(t, <-done, io.EOF)
}

func TestRun_PrintsTheDemo(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(t.Context(), nil, &out))
	assert.Equal(t, `add    apple  1.20 (initial list: true)
add    bread  2.50 (initial list: true)
add    cheese 9.00 (initial list: true)
update bread  2.50 -> 2.75
add    dates  4.00 (initial list: false)
delete apple  last 1.20 (final state unknown: false)
summary: 3 products mirrored at revision 7: [bread cheese dates]
`, out.String())
}

func TestMain(m *testing.M) { clitest.Main(m, main) }

// The program's exit status: 0 for --help, 2 for a bad flag or argument,
// saying why.
func TestMain_ExitStatus(t *testing.T) {
	clitest.RunCases(t, []clitest.Case{
		{Name: "help", Args: []string{"--help"}, Stdout: "-sync-timeout"},
		{Name: "unknown flag", Args: []string{"--no-such-flag"}, Code: 2, Stderr: "flag provided but not defined: -no-such-flag"},
		{Name: "argument", Args: []string{"stray"}, Code: 2, Stderr: `unexpected arguments ["stray"]`},
	})
}

// --quiet prints the summary alone: no changes, no logs.
func TestMain_QuietPrintsOnlyTheSummary(t *testing.T) {
	code, stdout, stderr := clitest.Run(t, "--quiet")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, "summary: 3 products mirrored at revision 7: [bread cheese dates]\n", stdout)
	assert.Empty(t, stderr)
}

// An interruption, here once the first product is printed, stops the
// demo with the summary so far, and the program exits 0.
func TestRun_InterruptPrintsTheSummaryAndExitsZero(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	out, stderr := clitest.CancelAt("add    apple", cancel), &bytes.Buffer{}
	require.Equal(t, cli.ExitOK, cli.Run(ctx, "http-source", run, nil, out, stderr), stderr.String())
	assert.Regexp(t, `^add    apple  1.20 \(initial list: true\)
interrupted
summary: 3 products mirrored at revision \d+: \[apple bread cheese\]
$`, out.String())
}
