package etcd_test

import (
	"context"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/adapters/etcd"
	"github.com/listwatch/mirror/memsource"
	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// listCounting counts the lists a source is asked for.
type listCounting[T any] struct {
	*memsource.Source[T]
	lists atomic.Int64
}

func (s *listCounting[T]) List(ctx context.Context, opts source.ListOptions) (source.ListResult[T], error) {
	if opts.Continue == "" {
		s.lists.Add(1)
	}
	return s.Source.List(ctx, opts)
}

// errs collects what an informer reports.
type errs struct {
	mu  sync.Mutex
	all []error
}

func (e *errs) add(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.all = append(e.all, err)
}

func (e *errs) list() []error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]error(nil), e.all...)
}

// runUntilSynced runs inf until it has synced, then stops it, which
// writes its checkpoint.
func runUntilSynced[V any](t *testing.T, inf *mirror.Informer[string, etcd.Object[V]]) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	require.NoError(t, mirror.WaitForCacheSync(t.Context(), inf))
	cancel()
	require.NoError(t, <-done)
}

func kvSource(t *testing.T) *listCounting[etcd.KV] {
	src := &listCounting[etcd.KV]{Source: memsource.New(etcd.KeyOf[[]byte], memsource.Options{})}
	for i, k := range []string{"/a", "/b", "/c"} {
		rev := int64(i + 2)
		_, err := src.Put(etcd.KV{Key: k, Value: []byte("raw\x00" + k), CreateRevision: rev, ModRevision: rev, Version: 1})
		require.NoError(t, err)
	}
	return src
}

// NewInformer writes checkpoints with Codec, which a JSON codec cannot
// read, and an informer with a Codec resumes from without a list.
func TestNewInformer_CheckpointsWithTheEtcdCodecByDefault(t *testing.T) {
	for _, tc := range []struct {
		name    string
		codec   mirror.Codec[etcd.KV]
		resumes bool
	}{
		{"etcd codec", etcd.Codec[[]byte]{}, true},
		{"JSON", mirror.JSONCodec[etcd.KV]{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "cp")
			src := kvSource(t)
			runUntilSynced(t, etcd.NewInformer(src, etcd.InformerOptions[[]byte]{
				Checkpoint: mirror.CheckpointOptions[etcd.KV]{Path: path},
			}))
			want := src.Snapshot()

			var reported errs
			inf := mirror.NewInformer(src, mirror.InformerOptions[string, etcd.KV]{
				KeyFunc:      etcd.KeyOf[[]byte],
				ErrorHandler: reported.add,
				Checkpoint:   mirror.CheckpointOptions[etcd.KV]{Path: path, Codec: tc.codec},
			})
			runUntilSynced(t, inf)
			got := map[string]etcd.KV{}
			for k, o := range inf.All() {
				got[k] = o
			}
			assert.Equal(t, want, got)
			if tc.resumes {
				assert.Empty(t, reported.list())
				assert.EqualValues(t, 1, src.lists.Load(), "resumed without a list")
			} else {
				require.Len(t, reported.list(), 1)
				assert.ErrorIs(t, reported.list()[0], mirror.ErrCheckpointInvalid)
				assert.EqualValues(t, 2, src.lists.Load(), "listed instead")
			}
		})
	}
}

func TestNewInformer_CheckpointsTypedValuesInJSONByDefault(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cp")
	src := &listCounting[etcd.Object[value]]{Source: memsource.New(etcd.KeyOf[value], memsource.Options{})}
	_, err := src.Put(etcd.Object[value]{Key: "/v", Value: value{Name: "n", Count: 2}, CreateRevision: 2, ModRevision: 3, Version: 2})
	require.NoError(t, err)
	runUntilSynced(t, etcd.NewInformer(src, etcd.InformerOptions[value]{
		Checkpoint: mirror.CheckpointOptions[etcd.Object[value]]{Path: path},
	}))

	var reported errs
	inf := etcd.NewInformer(src, etcd.InformerOptions[value]{
		ErrorHandler: reported.add,
		Checkpoint:   mirror.CheckpointOptions[etcd.Object[value]]{Path: path, Codec: etcd.Codec[value]{Values: mirror.JSONCodec[value]{}}},
	})
	runUntilSynced(t, inf)
	assert.Empty(t, reported.list())
	assert.EqualValues(t, 1, src.lists.Load(), "resumed without a list")
	o, ok := inf.GetByKey("/v")
	require.True(t, ok)
	assert.Equal(t, etcd.Object[value]{Key: "/v", Value: value{Name: "n", Count: 2}, CreateRevision: 2, ModRevision: 3, Version: 2}, o)
}
