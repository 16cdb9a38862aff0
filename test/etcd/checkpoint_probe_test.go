package etcd

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/listwatch/mirror"
	"github.com/stretchr/testify/require"
)

// loadCheckpoint loads the checkpoint b as an informer's start does, with
// opts (Path aside), and returns its version and objects, or the error
// the load reported. The informer runs from a file of its own (it writes
// one when it stops) over a loadProbe, and stops once it has loaded.
func loadCheckpoint[T any](t *testing.T, b []byte, key mirror.KeyFunc[string, T], opts mirror.CheckpointOptions[T]) (string, []T, error) {
	t.Helper()
	opts.Path = filepath.Join(t.TempDir(), "copy")
	require.NoError(t, os.WriteFile(opts.Path, b, 0o600))

	p := &loadProbe[T]{got: make(chan loadProbeResult[T], 1)}
	var reported []error
	var mu sync.Mutex
	p.inf = mirror.NewInformer[string, T](p, mirror.InformerOptions[string, T]{
		KeyFunc: key,
		ErrorHandler: func(err error) {
			mu.Lock()
			reported = append(reported, err)
			mu.Unlock()
		},
		Checkpoint: opts,
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.inf.Run(ctx) }()
	res := <-p.got
	cancel()
	require.NoError(t, <-done)
	mu.Lock()
	defer mu.Unlock()
	if res.listed {
		require.Len(t, reported, 1, "a load that fails is reported")
		return "", nil, reported[0]
	}
	require.Empty(t, reported)
	return res.rv, res.objs, nil
}

// loadProbe is the ListWatcher behind an informer that only loads a
// checkpoint: its first Watch (from the checkpoint's version) records the
// version and the cache, which then holds the checkpoint's objects and
// nothing else; a List means that nothing was loaded.
type loadProbe[T any] struct {
	inf  *mirror.Informer[string, T]
	once sync.Once
	got  chan loadProbeResult[T]
}

type loadProbeResult[T any] struct {
	listed bool
	rv     string
	objs   []T
}

func (p *loadProbe[T]) List(context.Context, mirror.ListOptions) (mirror.ListResult[T], error) {
	p.once.Do(func() { p.got <- loadProbeResult[T]{listed: true} })
	return mirror.ListResult[T]{ResourceVersion: "1"}, nil
}

func (p *loadProbe[T]) Watch(ctx context.Context, opts mirror.WatchOptions) (mirror.Watcher[T], error) {
	p.once.Do(func() {
		objs := make([]T, 0, p.inf.Len())
		for _, o := range p.inf.All() {
			objs = append(objs, o)
		}
		p.got <- loadProbeResult[T]{rv: opts.ResourceVersion, objs: objs}
	})
	<-ctx.Done()
	return nil, ctx.Err()
}
