package mirror_test

import (
	"context"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/memsource"
)

// gatedCodec is JSONCodec whose decode of the object numbered at (from 1)
// waits for release: a checkpoint load held halfway, reached closed once
// it is.
type gatedCodec struct {
	mirror.JSONCodec[item]
	at               int64
	decoded          atomic.Int64
	reached, release chan struct{}
}

func newGatedCodec(at int64) *gatedCodec {
	return &gatedCodec{at: at, reached: make(chan struct{}), release: make(chan struct{})}
}

func (c *gatedCodec) Decode(data []byte) (item, error) {
	if c.decoded.Add(1) == c.at {
		close(c.reached)
		<-c.release
	}
	return c.JSONCodec.Decode(data)
}

// loadingInformer writes a checkpoint of a=1 and b=1 from src, then runs
// an informer that resumes from it, and returns once that informer's load
// is held with one object in, with the function that lets the load go on
// and the channel Run's result comes on.
func loadingInformer(t *testing.T, src *memsource.Source[item], errs *errorLog) (inf *mirror.Informer[string, item], cancel context.CancelFunc, release func(), done chan error) {
	path := filepath.Join(t.TempDir(), "cp")
	src.Put(item{Name: "a", Val: 1})
	src.Put(item{Name: "b", Val: 1})
	startCheckpointed(t, src, path).stop(t)

	codec := newGatedCodec(2)
	inf = mirror.NewInformer(src, mirror.InformerOptions[string, item]{
		KeyFunc: itemKey, ErrorHandler: errs.add,
		Checkpoint: mirror.CheckpointOptions[item]{Path: path, Codec: codec},
	})
	ctx, cancel := context.WithCancel(t.Context())
	done = make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	<-codec.reached
	var once sync.Once
	release = func() { once.Do(func() { close(codec.release) }) }
	// A test that fails before it lets Run go on still ends it.
	t.Cleanup(func() { cancel(); release() })
	return inf, cancel, release, done
}

// A handler added while Run loads a checkpoint is one registered before
// Run: it is handed the checkpoint's objects once each, when the load is
// complete (none with ChangesOnly), then the changes since.
func TestInformer_HandlerAddedWhileACheckpointLoadsIsOneRegisteredBeforeRun(t *testing.T) {
	for _, tt := range []struct {
		name  string
		opts  mirror.HandlerOptions
		first []string
	}{
		{"replaying", mirror.HandlerOptions{}, []string{"add a=1 initial=true", "add b=1 initial=true"}},
		{"changes only", mirror.HandlerOptions{ChangesOnly: true}, []string{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				src := memsource.New(itemKey, memsource.Options{})
				errs := &errorLog{}
				inf, cancel, release, done := loadingInformer(t, src, errs)

				rec := &recorder{}
				reg, err := inf.AddEventHandler(rec, tt.opts)
				require.NoError(t, err, "added while the load is held halfway")
				release()
				synctest.Wait()
				require.True(t, reg.HasSynced())
				assert.Equal(t, tt.first, sorted(rec.take()), "the checkpoint's objects, once each")

				src.Put(item{Name: "a", Val: 2})
				synctest.Wait()
				assert.Equal(t, []string{"update a 1->2"}, rendered(rec.take()))
				assert.Empty(t, errs.all())
				cancel()
				require.NoError(t, <-done)
			})
		})
	}
}

// A handler added while Run loads a checkpoint counts, as one registered
// before Run does, in the resync period Run sets once the load is
// complete: its own period is kept, not left without a timer.
func TestInformer_HandlerAddedWhileACheckpointLoadsResyncsAtItsPeriod(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := memsource.New(itemKey, memsource.Options{})
		errs := &errorLog{}
		inf, cancel, release, done := loadingInformer(t, src, errs)

		rec := &recorder{}
		_, err := inf.AddEventHandler(rec, mirror.HandlerOptions{ResyncPeriod: time.Minute})
		require.NoError(t, err)
		release()
		synctest.Wait()
		rec.take()
		time.Sleep(90 * time.Second)
		synctest.Wait()
		assert.Equal(t, []string{"update a 1->1", "update b 1->1"}, sorted(rec.take()), "one resync")
		assert.Empty(t, errs.all())
		cancel()
		require.NoError(t, <-done)
	})
}
