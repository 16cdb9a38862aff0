package etcd

// A process killed while it writes a checkpoint.
//
// The child is this test binary run again with killChildEnv set: it runs
// TestCheckpointKill_Child, which mirrors an in-memory source of
// killObjects() objects (a few MB of checkpoint) into an informer that
// writes its checkpoint back to back (Interval of a millisecond), while a
// writer changes the source in a fixed order. The parent kills it
// (SIGKILL) at a random moment, many times over, and after each kill
// loads the file as an informer's next start would: it must hold the
// checkpoint of that child or of the one before, whole and equal to the
// source at its version, never an error but "missing" (before the first
// write). The source is in memory, not etcd: what is exercised is the
// informer's checkpoint writing, which does not depend on the source, and
// the child's source is rebuilt in the same order each time, so the
// parent knows its state at every version.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/memsource"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	// killChildEnv holds a child's killConfig, as JSON.
	killChildEnv = "MIRROR_TEST_CHECKPOINT_CHILD"
	// killSyncedLine is what a child prints once its informer has synced,
	// and killWrittenLine what it prints each time it sees that a new
	// checkpoint has replaced the file.
	killSyncedLine  = "checkpoint child synced"
	killWrittenLine = "checkpoint written"
	// killPayload is each object's payload.
	killPayload = 150
	// killRounds is how many children the test kills.
	killRounds = 50
)

// killConfig is what a child needs: where to write its checkpoint, under
// which identity, and how many objects to mirror.
type killConfig struct {
	Path, Identity string
	Objects        int
}

// killObjects is how many objects a child mirrors, each with a payload:
// its checkpoints are about 4 MB, a quarter of that with the race
// detector, which slows the child down some tenfold.
func killObjects() int {
	if raceEnabled {
		return 5_000
	}
	return 20_000
}

// killObj is one object of the child's source. Val is the step of the
// writer that put it (0: the initial fill).
type killObj struct {
	Name string
	Val  int
	Pad  string
}

func killKey(o killObj) (string, error) { return o.Name, nil }

func killName(i int) string { return fmt.Sprintf("obj-%05d", i) }

// killExpected returns the state at revision rev of a child's source of
// n objects: the initial fill takes revisions 2 to n+1 (every object at
// Val 0), and then step s (from 1) puts object s%n with Val s at revision
// n+1+s.
func killExpected(n int, rev int64) (map[string]int, error) {
	steps := int(rev) - (n + 1)
	if steps < 0 {
		return nil, fmt.Errorf("revision %d is inside the initial fill", rev)
	}
	out := make(map[string]int, n)
	for k := range n {
		val := 0
		first := k
		if k == 0 {
			first = n
		}
		if steps >= first {
			val = first + (steps-first)/n*n
		}
		out[killName(k)] = val
	}
	return out, nil
}

// TestCheckpointKill_Child is the child's body; it runs only as the child
// of TestCheckpoint_KilledWhileWritingLeavesThePreviousCheckpointOrThisOne.
func TestCheckpointKill_Child(t *testing.T) {
	raw := os.Getenv(killChildEnv)
	if raw == "" {
		t.Skip("runs only as the child of TestCheckpoint_KilledWhileWriting...")
	}
	var cfg killConfig
	require.NoError(t, json.Unmarshal([]byte(raw), &cfg))
	// The parent holds our standard input: once it is gone, so are we.
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()

	src := memsource.New(killKey, memsource.Options{})
	pad := strings.Repeat("p", killPayload)
	for i := range cfg.Objects {
		_, err := src.Put(killObj{Name: killName(i), Pad: pad})
		require.NoError(t, err)
	}
	inf := mirror.NewInformer(src, mirror.InformerOptions[string, killObj]{
		KeyFunc: killKey,
		// The previous child's checkpoint is another identity's: it is
		// reported and the source listed.
		ErrorHandler: func(error) {},
		Checkpoint:   mirror.CheckpointOptions[killObj]{Path: cfg.Path, Identity: cfg.Identity, Interval: time.Millisecond},
	})
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	require.NoError(t, mirror.WaitForCacheSync(ctx, inf))
	fmt.Println(killSyncedLine)
	go reportWrites(ctx, cfg.Path)

	// The writer: 50 steps a millisecond, until killed.
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for s := 1; ctx.Err() == nil; {
		for range 50 {
			_, err := src.Put(killObj{Name: killName(s % cfg.Objects), Val: s, Pad: pad})
			require.NoError(t, err)
			s++
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
	<-done
}

// reportWrites prints killWrittenLine each time the file at path is
// replaced (a rename puts another file in its place) or changed, until
// ctx ends, so that the parent can time its kills against the writes.
func reportWrites(ctx context.Context, path string) {
	last, _ := os.Stat(path)
	tick := time.NewTicker(200 * time.Microsecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		fi, err := os.Stat(path)
		if err != nil || (last != nil && os.SameFile(last, fi) && fi.ModTime().Equal(last.ModTime()) && fi.Size() == last.Size()) {
			continue
		}
		last = fi
		fmt.Println(killWrittenLine)
	}
}

// valDiff describes the first few keys where got differs from want, and
// how many differ: a diff of thousands of keys helps nobody.
func valDiff(want, got map[string]int) []string {
	var out []string
	n := 0
	for k, w := range want {
		if g, ok := got[k]; !ok || g != w {
			if n++; len(out) < 5 {
				out = append(out, fmt.Sprintf("%s: want %d, got %d (present %t)", k, w, g, ok))
			}
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			if n++; len(out) < 5 {
				out = append(out, k+": not in the source")
			}
		}
	}
	if n > len(out) {
		out = append(out, fmt.Sprintf("... %d keys in all", n))
	}
	return out
}

// killOutcome is what the parent found after one kill.
type killOutcome string

const (
	killLoadedThis     killOutcome = "this child's checkpoint"
	killLoadedPrevious killOutcome = "the previous child's checkpoint"
	killMissing        killOutcome = "no checkpoint yet"
)

// loadKilled loads the checkpoint b, written for identity, as an
// informer's start does. It returns the version and each object's Val, or
// the error the load reported.
func loadKilled(t *testing.T, b []byte, identity string) (loadResult, error) {
	t.Helper()
	rv, objs, err := loadCheckpoint(t, b, killKey, mirror.CheckpointOptions[killObj]{Identity: identity})
	res := loadResult{rv: rv, vals: make(map[string]int, len(objs))}
	for _, o := range objs {
		res.vals[o.Name] = o.Val
	}
	return res, err
}

type loadResult struct {
	rv   string
	vals map[string]int
}

// killChild is a running child.
type killChild struct {
	cmd   *exec.Cmd
	stdin io.Closer
	// writes receives a value each time the child sees a new checkpoint.
	writes chan time.Time
}

// startKillChild starts a child writing checkpoints at path under
// identity, and waits until its informer has synced.
func startKillChild(t *testing.T, path, identity string) *killChild {
	t.Helper()
	cfg, err := json.Marshal(killConfig{Path: path, Identity: identity, Objects: killObjects()})
	require.NoError(t, err)
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe, "-test.run=^TestCheckpointKill_Child$", "-test.count=1")
	cmd.Env = append(os.Environ(), killChildEnv+"="+string(cfg))
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = stdin.Close()
	})
	r := bufio.NewReader(stdout)
	line, err := r.ReadString('\n')
	require.NoError(t, err, "the child's stderr: %s", stderr.String())
	require.Equal(t, killSyncedLine, strings.TrimSpace(line))
	c := &killChild{cmd: cmd, stdin: stdin, writes: make(chan time.Time, 1024)}
	go func() {
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			if strings.TrimSpace(line) == killWrittenLine {
				c.writes <- time.Now()
			}
		}
	}()
	return c
}

// strayTemps returns the temporary files a checkpoint writer left beside
// path.
func strayTemps(t *testing.T, path string) []string {
	t.Helper()
	m, err := filepath.Glob(path + ".tmp*")
	require.NoError(t, err)
	return m
}

func TestCheckpoint_KilledWhileWritingLeavesThePreviousCheckpointOrThisOne(t *testing.T) {
	if testing.Short() {
		t.Skip("kills 50 child processes")
	}
	path := filepath.Join(t.TempDir(), "checkpoint")
	identity := func(round int) string { return "round " + strconv.Itoa(round) }
	outcomes := map[killOutcome]int{}
	// last is the checkpoint loaded last: the one a child that writes
	// none must leave.
	var last struct {
		identity string
		bytes    []byte
	}
	maxStray, midWrite := 0, 0
	rng := rand.New(rand.NewPCG(1, 2))
	// period is how long a checkpoint takes to write, as seen so far.
	period := 50 * time.Millisecond
	var lastWrite time.Time
	for round := range killRounds {
		child := startKillChild(t, path, identity(round))
		// Kill after 0, 1 or 2 checkpoints, somewhere in the writing of
		// the next: checkpoints are written back to back, each taking
		// about period.
		for range rng.IntN(3) {
			var at time.Time
			select {
			case at = <-child.writes:
			case <-time.After(time.Minute):
				require.FailNow(t, "no checkpoint written in a minute", "round %d", round)
			}
			if !lastWrite.IsZero() && at.Sub(lastWrite) < time.Second {
				period = (period + at.Sub(lastWrite)) / 2
			}
			lastWrite = at
		}
		lastWrite = time.Time{}
		time.Sleep(time.Duration(rng.Int64N(int64(period))))
		require.NoError(t, child.cmd.Process.Signal(syscall.SIGKILL))
		err := child.cmd.Wait()
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, "killed, not exited")
		_ = child.stdin.Close()

		stray := strayTemps(t, path)
		maxStray = max(maxStray, len(stray))
		if len(stray) > 0 {
			midWrite++
		}
		assert.LessOrEqual(t, len(stray), 1,
			"round %d: temporary files beyond the one the last kill may leave: %v", round, stray)

		b, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) && last.identity == "" {
			outcomes[killMissing]++ // killed before the first write of all
			continue
		}
		require.NoError(t, err, "round %d", round)
		outcome := killLoadedThis
		res, err := loadKilled(t, b, identity(round))
		if errors.Is(err, mirror.ErrCheckpointInvalid) && last.identity != "" {
			// Killed before its first write: the file must be the one
			// loaded last, untouched.
			outcome = killLoadedPrevious
			require.True(t, bytes.Equal(last.bytes, b), "round %d: not this child's checkpoint, nor the last one", round)
			res, err = loadKilled(t, b, last.identity)
		}
		require.NoError(t, err, "round %d: the checkpoint left by a kill must load", round)
		outcomes[outcome]++
		if outcome == killLoadedThis {
			last.identity, last.bytes = identity(round), b
		}
		rev, err := strconv.ParseInt(res.rv, 10, 64)
		require.NoError(t, err)
		want, err := killExpected(killObjects(), rev)
		require.NoError(t, err)
		require.Empty(t, valDiff(want, res.vals), "round %d: the checkpoint at revision %d holds the source at that revision", round, rev)
	}
	t.Logf("%d kills, %d of them in the middle of a write (a temporary file left): %v; at most %d stray temporary file(s) after a kill",
		killRounds, midWrite, outcomes, maxStray)
}
