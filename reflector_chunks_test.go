package mirror

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeChunkLW is a fakeLW that lists in chunks too: each ListChunks call
// takes the next scripted reply, hands over its chunks, then returns its
// error.
type fakeChunkLW struct {
	*fakeLW
	replies chan chunkReply

	mu    sync.Mutex
	calls []source.ListOptions
}

type chunkReply struct {
	chunks []source.ListResult[tobj]
	err    error
}

func newFakeChunkLW() *fakeChunkLW {
	return &fakeChunkLW{fakeLW: newFakeLW(), replies: make(chan chunkReply, 16)}
}

// chunked queues a ListChunks reply of chunks at rv, each chunk a slice of
// objects, ending with err.
func (f *fakeChunkLW) chunked(rv string, err error, chunks ...[]tobj) {
	var r chunkReply
	for _, c := range chunks {
		r.chunks = append(r.chunks, source.ListResult[tobj]{Items: c, ResourceVersion: rv})
	}
	r.err = err
	f.replies <- r
}

func (f *fakeChunkLW) ListChunks(ctx context.Context, opts source.ListOptions, chunk func(source.ListResult[tobj]) error) error {
	f.mu.Lock()
	f.calls = append(f.calls, opts)
	f.mu.Unlock()
	var r chunkReply
	select {
	case <-ctx.Done():
		return ctx.Err()
	case r = <-f.replies:
	}
	for _, c := range r.chunks {
		if err := chunk(c); err != nil {
			return err
		}
	}
	return r.err
}

func (f *fakeChunkLW) chunkCalls() []source.ListOptions {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

func newChunkRig(opts ReflectorOptions) (*reflectorRig, *fakeChunkLW) {
	lw := newFakeChunkLW()
	g := &reflectorRig{lw: lw.fakeLW, store: newRecStore(), errs: &errLog{}}
	opts.ErrorHandler = g.errs.handle
	g.r = NewReflector[tobj](lw, g.store, opts)
	return g, lw
}

func TestReflector_ListsInChunksWhereTheSourceCanAndHandsAPlainStoreTheWholeList(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, lw := newChunkRig(ReflectorOptions{ListWatch: ListWatchOptions{PageSize: 3}})
		lw.chunked("7", nil, []tobj{{"a", "1"}, {"b", "1"}}, []tobj{}, []tobj{{"c", "1"}})
		g.start(t)
		synctest.Wait()
		assert.Equal(t, []source.ListOptions{{ResourceVersion: "0", Limit: 3}}, lw.chunkCalls())
		assert.Empty(t, g.lw.Lists(), "List is not called")
		assert.Equal(t, []string{"replace@7 [a=1 b=1 c=1]"}, g.store.Log())
		assert.Equal(t, "7", g.r.Freshness().ResourceVersion)
		g.stopRun()
	})
}

func TestReflector_SourceThatCannotListInChunksIsListedWithListFromThenOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, lw := newChunkRig(ReflectorOptions{ListWatch: ListWatchOptions{PageSize: 3}})
		lw.chunked("", errSrcUnsupported)
		g.lw.page("7", "", tobj{"a", "1"})
		g.lw.watch(end(errSrcExpired))
		g.lw.page("8", "", tobj{"a", "2"})
		g.start(t)
		synctest.Wait()
		assert.Len(t, lw.chunkCalls(), 1, "asked once")
		assert.Equal(t, []string{"0", "7"}, g.lw.ListVersions(), "the relist after the expired watch is read with List too")
		assert.Equal(t, []string{"replace@7 [a=1]", "replace@8 [a=2]"}, g.store.Log())
		for _, err := range g.errs.Errors() {
			assert.NotErrorIs(t, err, errors.ErrUnsupported, "falling back is not a failure")
		}
		g.stopRun()
	})
}

func TestReflector_CompactionInTheMiddleOfTheNewestStateReadsItInOneRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, lw := newChunkRig(ReflectorOptions{ListWatch: ListWatchOptions{PageSize: 3}})
		// At "0", then at "" (consistent): each time compacted after a
		// chunk.
		lw.chunked("5", errSrcExpired, []tobj{{"a", "1"}})
		lw.chunked("6", errSrcExpired, []tobj{{"a", "1"}})
		g.lw.page("7", "", tobj{"a", "1"}, tobj{"b", "1"})
		g.start(t)
		synctest.Wait()
		assert.Equal(t, []source.ListOptions{{ResourceVersion: "0", Limit: 3}, {ResourceVersion: "", Limit: 3}}, lw.chunkCalls())
		assert.Equal(t, []source.ListOptions{{ResourceVersion: "", Limit: 0}}, listOpts(g.lw.Lists()), "then one request")
		assert.Equal(t, []string{"replace@7 [a=1 b=1]"}, g.store.Log(), "a failed list reaches a plain store not at all")
		errs := g.errs.Errors()
		require.Len(t, errs, 2)
		for _, err := range errs {
			assert.ErrorIs(t, err, source.ErrExpired)
		}
		g.stopRun()
	})
}

// chunkStore is a recStore that takes lists in chunks (listApplier) and
// logs them: "chunk [a=1 b=1]", "done@7", "failed".
type chunkStore struct{ *recStore }

func (s chunkStore) listChunk(items []tobj) error {
	names := make([]string, len(items))
	for i, o := range items {
		names[i] = o.String()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log = append(s.log, fmt.Sprintf("chunk [%s]", strings.Join(names, " ")))
	return nil
}

func (s chunkStore) listDone(rv string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log = append(s.log, "done@"+rv)
	return nil
}

func (s chunkStore) listFailed() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log = append(s.log, "failed")
}

func newChunkStoreRig(opts ReflectorOptions) (*reflectorRig, *fakeChunkLW) {
	lw := newFakeChunkLW()
	store := newRecStore()
	g := &reflectorRig{lw: lw.fakeLW, store: store, errs: &errLog{}}
	opts.ErrorHandler = g.errs.handle
	g.r = NewReflector[tobj](lw, chunkStore{store}, opts)
	return g, lw
}

func TestReflector_HandsAListApplierEachChunkAsItComes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, lw := newChunkStoreRig(ReflectorOptions{ListWatch: ListWatchOptions{PageSize: 3, InitialBackoff: time.Second, Jitter: noJitter}})
		lw.chunked("5", errSrcUnavailable, []tobj{{"a", "1"}})
		lw.chunked("6", nil, []tobj{{"a", "2"}, {"b", "1"}}, []tobj{{"c", "1"}})
		g.runFor(t, time.Minute)
		assert.Equal(t, []string{"chunk [a=1]", "failed", "chunk [a=2 b=1]", "chunk [c=1]", "done@6"}, g.store.Log())
		assert.Equal(t, []source.ListOptions{{ResourceVersion: "0", Limit: 3}, {ResourceVersion: "5", Limit: 3}}, lw.chunkCalls(),
			"after a list that failed midway, the next is read at its version or newer")
		g.stopRun()
	})
}

func TestReflector_StreamingListHandsChunksOnlyWhenItsRetryCannotGoBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, _ := newChunkStoreRig(ReflectorOptions{ListWatch: ListWatchOptions{StreamingList: true, PageSize: 2, WatchTimeout: time.Minute}})
		// The first streaming list is read consistently: in chunks.
		g.lw.watch(addedEvent("a", "1", "5"), addedEvent("b", "1", "5"), addedEvent("c", "1", "5"),
			initialEnd("8"), end(errSrcExpired))
		// The relist after the expired watch is read at the last
		// version: handed over whole at its end.
		g.lw.watch(addedEvent("a", "2", "9"), addedEvent("b", "2", "9"), addedEvent("c", "2", "9"), initialEnd("10"))
		g.start(t)
		synctest.Wait()
		assert.Equal(t, []string{"chunk [a=1 b=1]", "chunk [c=1]", "done@8", "replace@10 [a=2 b=2 c=2]"}, g.store.Log())
		assert.Equal(t, []string{"", "8"}, g.lw.WatchVersions())
		g.stopRun()
	})
}
