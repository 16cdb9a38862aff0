package mirror_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/memsource"
	"github.com/listwatch/mirror/source"
)

// chunkedSource is a memsource that also lists through ListChunks, in
// chunks of size objects at one version, as the etcd adapter lists through
// RangeStream. After each chunk it calls between, if set, with the list's
// number (from 1) and the chunks handed over so far: between may block to
// hold the list there, or fail it with an error.
type chunkedSource struct {
	*memsource.Source[item]
	size    int
	between func(list, chunks int) error

	mu    sync.Mutex
	calls []source.ListOptions
}

func (s *chunkedSource) ListChunks(ctx context.Context, opts source.ListOptions, chunk func(source.ListResult[item]) error) error {
	s.mu.Lock()
	s.calls = append(s.calls, opts)
	list := len(s.calls)
	s.mu.Unlock()
	page := source.ListOptions{ResourceVersion: opts.ResourceVersion, Limit: int64(s.size)}
	for n := 1; ; n++ {
		res, err := s.Source.List(ctx, page)
		if err != nil {
			return err
		}
		next := res.Continue
		res.Continue = ""
		if err := chunk(res); err != nil {
			return err
		}
		if next == "" {
			return nil
		}
		if s.between != nil {
			if err := s.between(list, n); err != nil {
				return err
			}
		}
		page = source.ListOptions{Limit: int64(s.size), Continue: next}
	}
}

// listCalls returns the options of every ListChunks call.
func (s *chunkedSource) listCalls() []source.ListOptions {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]source.ListOptions(nil), s.calls...)
}

// newChunkedFixture is newFixture over a chunkedSource of chunks of two.
func newChunkedFixture(t *testing.T, configure func(*mirror.InformerOptions[string, item])) (*fixture, *chunkedSource) {
	var cs *chunkedSource
	f := newFixtureOver(t, func(src *memsource.Source[item]) source.ListWatcher[item] {
		cs = &chunkedSource{Source: src, size: 2}
		return cs
	}, configure)
	return f, cs
}

func putItems(src *memsource.Source[item], names ...string) {
	for i, n := range names {
		src.Put(item{Name: n, Val: i + 1})
	}
}

func TestInformer_InitialListIsAppliedAsItsChunksArrive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, src := newChunkedFixture(t, nil)
		putItems(f.src, "a", "b", "c", "d", "e")
		release := make(chan struct{})
		src.between = func(_, chunks int) error {
			if chunks == 1 {
				<-release
			}
			return nil
		}
		rec := &recorder{}
		_, err := f.inf.AddEventHandler(rec, mirror.HandlerOptions{})
		require.NoError(t, err)
		f.start()
		synctest.Wait()

		// The list is held after its first chunk, which is in the cache
		// already: the list is not held whole beside the cache.
		assert.Equal(t, map[string]int{"a": 1, "b": 2}, f.cacheState())
		assert.Equal(t, []string{"add a=1 initial=true", "add b=2 initial=true"}, rendered(rec.take()))
		assert.False(t, f.inf.HasSynced(), "synced only once the whole list is applied")

		close(release)
		f.synced()
		assert.Equal(t, []string{"add c=3 initial=true", "add d=4 initial=true", "add e=5 initial=true"}, rendered(rec.take()))
		assert.Len(t, src.listCalls(), 1)
		f.stop()
	})
}

func TestInformer_RelistIntoAFullCacheIsAppliedAsOneStep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, src := newChunkedFixture(t, nil)
		putItems(f.src, "a", "b", "c", "d", "e")
		rec := f.startRecording()

		release := make(chan struct{})
		src.between = func(list, chunks int) error {
			if list == 2 && chunks == 1 {
				<-release
			}
			return nil
		}
		f.missWhileDown(func() {
			f.src.Delete("e")
			f.src.Put(item{Name: "a", Val: 10})
		})
		// The relist is held after its first chunk (a=10, b): nothing of
		// it is applied yet.
		require.Len(t, src.listCalls(), 2)
		assert.Equal(t, map[string]int{"a": 1, "b": 2, "c": 3, "d": 4, "e": 5}, f.cacheState())
		assert.Empty(t, rec.take())

		close(release)
		synctest.Wait()
		assert.Equal(t, []string{
			"delete e=5 unknown=true", "update a 1->10", "update b 2->2", "update c 3->3", "update d 4->4",
		}, sorted(rec.take()))
		assert.Equal(t, f.sourceState(), f.cacheState())
		f.stop()
	})
}

// TestInformer_InitialListFailingMidwayIsRetriedNoOlder pins what handlers
// see when the initial list fails after some of its chunks were applied:
// adds (initial) for those chunks; then the retry, read at the failed
// list's version or newer and applied as one step against the cache they
// filled, brings an unknown-state delete for each key of theirs that is
// gone, an update for each that is still listed and an add for the rest.
// The informer is synced only after the retry.
func TestInformer_InitialListFailingMidwayIsRetriedNoOlder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, src := newChunkedFixture(t, nil)
		putItems(f.src, "a", "b", "c", "d")
		firstRV := fmt.Sprint(f.src.Revision())
		src.between = func(list, _ int) error {
			if list > 1 {
				return nil
			}
			// The source changes, then the list fails.
			f.src.Delete("a")
			f.src.Put(item{Name: "e", Val: 5})
			return fmt.Errorf("test: connection lost: %w", source.ErrUnavailable)
		}
		rec := &recorder{}
		_, err := f.inf.AddEventHandler(rec, mirror.HandlerOptions{})
		require.NoError(t, err)
		f.start()
		synctest.Wait() // the Reflector pauses before it lists again

		assert.Equal(t, []string{"add a=1 initial=true", "add b=2 initial=true"}, rendered(rec.take()))
		assert.False(t, f.inf.HasSynced())

		time.Sleep(time.Minute) // fake time: past the pause
		f.synced()
		assert.Equal(t, []string{
			"add c=3 initial=true", "add d=4 initial=true", "add e=5 initial=true",
			"delete a=1 unknown=true", "update b 2->2",
		}, sorted(rec.take()))
		assert.Equal(t, f.sourceState(), f.cacheState())

		calls := src.listCalls()
		require.Len(t, calls, 2)
		assert.Equal(t, "0", calls[0].ResourceVersion)
		assert.Equal(t, firstRV, calls[1].ResourceVersion, "the retry reads at the failed list's version or newer")
		f.stop()
	})
}
