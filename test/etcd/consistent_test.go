package etcd

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/listwatch/mirror"
	etcdmirror "github.com/listwatch/mirror/adapters/etcd"
	"github.com/listwatch/mirror/source"
)

// kvInput is one operation of the linearizability check: a put of value
// under key, or a consistent read of key through the mirror.
type kvInput struct {
	put   bool
	key   string
	value string
}

// kvModel is a register per key: a read returns the value of the last put
// ("" before any), and histories are checked one key at a time.
var kvModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(kvInput).key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		var out [][]porcupine.Operation
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() any { return "" },
	Step: func(state, input, output any) (bool, any) {
		in := input.(kvInput)
		if in.put {
			return true, in.value
		}
		return output.(string) == state.(string), state
	},
	DescribeOperation: func(input, output any) string {
		in := input.(kvInput)
		if in.put {
			return fmt.Sprintf("put(%s, %s)", in.key, in.value)
		}
		return fmt.Sprintf("get(%s) -> %q", in.key, output)
	},
}

// opHistory collects the operations of concurrent clients.
type opHistory struct {
	start time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation
}

func (h *opHistory) now() int64 { return int64(time.Since(h.start)) }

func (h *opHistory) add(op porcupine.Operation) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, op)
}

// TestConsistent_ReadsAreLinearizableWhileMembersAreKilledAndPaused has
// clients write keys through etcd and at once read them through one
// mirror with Informer.Consistent, while a member of the three is killed
// and restarted, then another paused and resumed. Every read that
// answers must be linearizable with the writes (checked with porcupine),
// and a client's read right after its own write must see that write or
// a later one; a read that cannot be current says so (ErrNotCurrent),
// never answering stale.
func TestConsistent_ReadsAreLinearizableWhileMembersAreKilledAndPaused(t *testing.T) {
	phase := 2 * time.Second
	if testing.Short() {
		phase = time.Second
	}
	cl := startProcCluster(t, 3)
	eps := cl.endpoints()
	mc := newClient(t, eps...)
	lw := etcdmirror.New(mc, "/lin/", etcdmirror.Options{ProgressInterval: time.Second, RequestTimeout: 2 * time.Second})
	inf := etcdmirror.NewInformer(lw, etcdmirror.InformerOptions[[]byte]{Name: "lin", Logger: quiet, ErrorHandler: func(error) {}})
	ctx, cancel := context.WithCancel(t.Context())
	runDone := make(chan error, 1)
	go func() { runDone <- inf.Run(ctx) }()
	defer func() {
		cancel()
		require.NoError(t, <-runDone)
	}()
	syncCtx, syncCancel := context.WithTimeout(ctx, convergeTimeout)
	require.NoError(t, inf.WaitForSync(syncCtx))
	syncCancel()

	h := &opHistory{start: time.Now()}
	var reads, ownStale, bounded, putsFailed atomic.Int64
	stop := make(chan struct{})
	keys := []string{"/lin/a", "/lin/b", "/lin/c"}
	const clients = 6
	var wg sync.WaitGroup
	for id := range clients {
		// Each client talks to one member, so that some go through the
		// one that is down.
		c := newClient(t, eps[id%len(eps)])
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(id), 1))
			for seq := 0; ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				key := keys[rng.IntN(len(keys))]
				value := fmt.Sprintf("c%d-%d", id, seq)
				call := h.now()
				pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
				resp, err := c.Put(pctx, key, value)
				pcancel()
				op := porcupine.Operation{ClientId: id, Input: kvInput{put: true, key: key, value: value}, Call: call, Return: h.now()}
				if err != nil {
					// It may or may not have taken effect, at any time
					// from now on.
					op.Return = math.MaxInt64
					h.add(op)
					putsFailed.Add(1)
					continue
				}
				h.add(op)
				written := resp.Header.Revision

				// Read it back, then a key someone else may write.
				for i, k := range []string{key, keys[rng.IntN(len(keys))]} {
					call := h.now()
					r, err := inf.Consistent(ctx, mirror.ConsistentOptions{})
					if errors.Is(err, mirror.ErrNotCurrent) {
						bounded.Add(1)
						continue
					}
					if err != nil {
						return // the test is ending
					}
					obj, ok := r.GetByKey(k)
					ret := h.now()
					reads.Add(1)
					got := ""
					if ok {
						got = string(obj.Value)
					}
					if i == 0 && (!ok || obj.ModRevision < written) {
						ownStale.Add(1)
					}
					h.add(porcupine.Operation{ClientId: id, Input: kvInput{key: k}, Output: got, Call: call, Return: ret})
				}
			}
		})
	}

	time.Sleep(phase)
	require.NoError(t, cl.members[0].Kill())
	time.Sleep(phase)
	require.NoError(t, cl.members[0].Restart())
	time.Sleep(phase)
	require.NoError(t, cl.members[1].Pause())
	time.Sleep(phase)
	require.NoError(t, cl.members[1].Resume())
	time.Sleep(phase)
	close(stop)
	wg.Wait()

	t.Logf("%d operations: %d consistent reads answered, %d ended in ErrNotCurrent, %d puts failed or timed out",
		len(h.ops), reads.Load(), bounded.Load(), putsFailed.Load())
	assert.Zero(t, ownStale.Load(), "reads right after one's own write that missed it")
	require.Greater(t, reads.Load(), int64(50), "too few reads answered to check anything")
	res := porcupine.CheckOperationsTimeout(kvModel, h.ops, time.Minute)
	require.NotEqual(t, porcupine.Illegal, res, "the mirror's consistent reads are not linearizable with etcd's writes")
	if res == porcupine.Unknown {
		t.Log("porcupine: no verdict within its time limit")
	}
}

// TestConsistent_ProgressRequestMakesAQuietPrefixCurrent writes under
// another prefix, which moves etcd's revision without an event for the
// mirror: a consistent read is current only through a progress request.
func TestConsistent_ProgressRequestMakesAQuietPrefixCurrent(t *testing.T) {
	m := startEtcd(t)
	c := newClient(t, m.endpoint())
	_, err := c.Put(t.Context(), "/quiet/a", "1")
	require.NoError(t, err)
	// Progress requests of the watch's own silence detection are too
	// rare to matter here.
	lw := etcdmirror.New(c, "/quiet/", etcdmirror.Options{ProgressInterval: time.Hour})
	inf := etcdmirror.NewInformer(lw, etcdmirror.InformerOptions[[]byte]{Logger: quiet})
	ctx, cancel := context.WithCancel(t.Context())
	runDone := make(chan error, 1)
	go func() { runDone <- inf.Run(ctx) }()
	defer func() {
		cancel()
		require.NoError(t, <-runDone)
	}()
	require.NoError(t, inf.WaitForSync(ctx))

	// Without progress requests, nothing tells the mirror. (Asked first:
	// a later read's request may still be answered after a write.)
	_, err = c.Put(ctx, "/elsewhere/x", "first")
	require.NoError(t, err)
	_, err = inf.Consistent(ctx, mirror.ConsistentOptions{Timeout: 300 * time.Millisecond, ProgressInterval: -1})
	require.ErrorIs(t, err, mirror.ErrNotCurrent)

	for i := range 20 {
		_, err := c.Put(ctx, "/elsewhere/x", fmt.Sprint(i))
		require.NoError(t, err)
		cur, err := lw.CurrentVersion(ctx)
		require.NoError(t, err)
		_, err = inf.Consistent(ctx, mirror.ConsistentOptions{})
		require.NoError(t, err, "round %d", i)
		cmp, err := source.CompareDecimalVersions(inf.Freshness().ResourceVersion, cur)
		require.NoError(t, err)
		assert.GreaterOrEqual(t, cmp, 0, "the cache reached the version current before the read")
	}
	// And a read of one's own write is current as soon as its event is
	// applied.
	resp, err := c.Put(ctx, "/quiet/a", "2")
	require.NoError(t, err)
	require.NoError(t, inf.WaitForVersion(ctx, fmt.Sprint(resp.Header.Revision)))
	obj, ok := inf.GetByKey("/quiet/a")
	require.True(t, ok)
	assert.Equal(t, "2", string(obj.Value))
}
