package etcd

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/source"
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

	p := &loadProbe[T]{}
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
	require.NoError(t, mirror.WaitForCacheSync(ctx, p.inf))
	res := p.result()
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
// checkpoint. An informer resumed from a checkpoint watches from its
// version, which the probe records, and has synced once the load is done
// and that watch open: the cache then holds the checkpoint's objects and
// nothing else, as the watch brings nothing. A List means that nothing was
// loaded; it lists nothing.
type loadProbe[T any] struct {
	inf    *mirror.Informer[string, T]
	mu     sync.Mutex
	listed bool
	rv     string // of the first Watch, if before any List
}

type loadProbeResult[T any] struct {
	listed bool
	rv     string
	objs   []T
}

// result is what the informer loaded, once it has synced.
func (p *loadProbe[T]) result() loadProbeResult[T] {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.listed {
		return loadProbeResult[T]{listed: true}
	}
	objs := make([]T, 0, p.inf.Len())
	for _, o := range p.inf.All() {
		objs = append(objs, o)
	}
	return loadProbeResult[T]{rv: p.rv, objs: objs}
}

func (p *loadProbe[T]) List(context.Context, source.ListOptions) (source.ListResult[T], error) {
	p.mu.Lock()
	p.listed = true
	p.mu.Unlock()
	return source.ListResult[T]{ResourceVersion: "1"}, nil
}

func (p *loadProbe[T]) Watch(ctx context.Context, opts source.WatchOptions) (source.Watcher[T], error) {
	p.mu.Lock()
	if p.rv == "" && !p.listed {
		p.rv = opts.ResourceVersion
	}
	p.mu.Unlock()
	return &quietWatcher[T]{stopped: make(chan struct{})}, nil
}

// quietWatcher is a watch that brings nothing until it is stopped.
type quietWatcher[T any] struct {
	once    sync.Once
	stopped chan struct{}
}

func (w *quietWatcher[T]) Next(ctx context.Context) (source.Event[T], error) {
	select {
	case <-ctx.Done():
		return source.Event[T]{}, ctx.Err()
	case <-w.stopped:
		return source.Event[T]{}, io.EOF
	}
}

func (w *quietWatcher[T]) Stop() { w.once.Do(func() { close(w.stopped) }) }
