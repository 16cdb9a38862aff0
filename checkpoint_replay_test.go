package mirror_test

import (
	"context"
	"path/filepath"
	"strconv"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/memsource"
)

// checkpointOf writes, through an informer over src, a checkpoint at a
// new path holding n objects, i0 to i<n-1> at 1, and returns the path.
func checkpointOf(t *testing.T, src *memsource.Source[item], n int) string {
	path := filepath.Join(t.TempDir(), "cp")
	for i := range n {
		src.Put(item{Name: "i" + strconv.Itoa(i), Val: 1, Gen: 1})
	}
	startCheckpointed(t, src, path).stop(t)
	return path
}

// Each handler registered before a resumed informer's Run is handed every
// object of the checkpoint once, as an initial add, at its own pace: the
// objects not yet handed over count in its backlog, it has not synced
// until it has been handed them all, and a bounded handler gets each
// once too.
func TestInformer_ResumedHandlersAreHandedTheCheckpointOnceEachAtTheirPace(t *testing.T) {
	const n = 100
	for _, tt := range []struct {
		name string
		opts mirror.HandlerOptions
	}{
		{"unbounded", mirror.HandlerOptions{}},
		{"bounded", mirror.HandlerOptions{MaxBacklog: 10}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				src := memsource.New(itemKey, memsource.Options{})
				path := checkpointOf(t, src, n)
				errs := &errorLog{}
				inf := mirror.NewInformer(src, mirror.InformerOptions[string, item]{
					KeyFunc: itemKey, ErrorHandler: errs.add,
					Checkpoint: mirror.CheckpointOptions[item]{Path: path},
				})
				// Two that take their time, one that keeps up.
				slow := []*recorder{{gate: make(chan struct{})}, {gate: make(chan struct{})}}
				fast := &recorder{}
				var regs []*mirror.Registration
				for _, rec := range append(slow, fast) {
					reg, err := inf.AddEventHandler(rec, tt.opts)
					require.NoError(t, err)
					regs = append(regs, reg)
				}
				ctx, cancel := context.WithCancel(t.Context())
				done := make(chan error, 1)
				go func() { done <- inf.Run(ctx) }()
				synctest.Wait()

				require.True(t, inf.HasSynced(), "the watch from the checkpoint's version is open")
				assert.True(t, regs[2].HasSynced())
				for i, reg := range regs[:2] {
					// The slow handlers are in their first call; what
					// their listener took with it is out of the backlog.
					assert.Positive(t, reg.Backlog(), "slow handler %d: the objects not yet handed over", i)
					assert.False(t, reg.HasSynced(), "slow handler %d", i)
				}
				for _, rec := range slow {
					close(rec.gate) // every call from now on goes through
				}
				synctest.Wait()
				want := make([]string, n)
				for i := range n {
					want[i] = "add i" + strconv.Itoa(i) + "=1 initial=true"
				}
				for i, rec := range append(slow, fast) {
					assert.ElementsMatch(t, want, rendered(rec.take()), "handler %d: each object once", i)
					assert.True(t, regs[i].HasSynced(), "handler %d", i)
					assert.Zero(t, regs[i].Backlog(), "handler %d", i)
				}

				src.Put(item{Name: "i0", Val: 2, Gen: 1})
				synctest.Wait()
				for i, rec := range append(slow, fast) {
					assert.Equal(t, []string{"update i0 1->2"}, rendered(rec.take()), "handler %d: then the changes", i)
				}
				assert.Empty(t, errs.all())
				cancel()
				require.NoError(t, <-done)
			})
		})
	}
}

// renamingCodec is JSONCodec that decodes the object named from as one
// named to: a checkpoint read through it holds the key to twice.
type renamingCodec struct {
	mirror.JSONCodec[item]
	from, to string
}

func (c renamingCodec) Decode(data []byte) (item, error) {
	it, err := c.JSONCodec.Decode(data)
	if it.Name == c.from {
		it.Name = c.to
	}
	return it, err
}

// A checkpoint that holds a key twice (a codec that decodes two objects
// to one key) fills the cache as Set would, the later object replacing
// the earlier; a handler is handed what the cache holds, each key once.
func TestInformer_CheckpointHoldingAKeyTwiceIsHandedOutOnceAKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := memsource.New(itemKey, memsource.Options{})
		path := checkpointOf(t, src, 3)
		errs := &errorLog{}
		inf := mirror.NewInformer(src, mirror.InformerOptions[string, item]{
			KeyFunc: itemKey, ErrorHandler: errs.add,
			Checkpoint: mirror.CheckpointOptions[item]{Path: path, Codec: renamingCodec{from: "i1", to: "i0"}},
		})
		rec := &recorder{}
		_, err := inf.AddEventHandler(rec, mirror.HandlerOptions{})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- inf.Run(ctx) }()
		synctest.Wait()

		got := sorted(rec.take())
		assert.Equal(t, []string{"add i0=1 initial=true", "add i2=1 initial=true"}, got)
		assert.Equal(t, 2, inf.Len())
		cancel()
		require.NoError(t, <-done)
	})
}
