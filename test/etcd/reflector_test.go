package etcd

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/listwatch/mirror"
	etcdmirror "github.com/listwatch/mirror/adapters/etcd"
	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// convergeTimeout bounds every wait for a mirror to catch up with etcd.
const convergeTimeout = 60 * time.Second

// recordingStore is the Reflector's store in these tests: an Indexer, plus
// a count of delete notifications per key, both those the watch reports
// and those a relist implies (a known key missing from the list: the
// tombstone a DeltaFIFO would make).
type recordingStore[T any] struct {
	*mirror.Indexer[string, etcdmirror.Object[T]]

	mu      sync.Mutex
	deletes map[string]int
}

func newRecordingStore[T any]() *recordingStore[T] {
	return &recordingStore[T]{
		Indexer: mirror.NewIndexer(etcdmirror.KeyOf[T], nil),
		deletes: make(map[string]int),
	}
}

func (s *recordingStore[T]) Delete(obj etcdmirror.Object[T]) error {
	s.mu.Lock()
	s.deletes[obj.Key]++
	s.mu.Unlock()
	return s.Indexer.Delete(obj)
}

func (s *recordingStore[T]) Replace(list []etcdmirror.Object[T], rv string) error {
	listed := make(map[string]bool, len(list))
	for _, o := range list {
		listed[o.Key] = true
	}
	s.mu.Lock()
	for _, k := range s.ListKeys() {
		if !listed[k] {
			s.deletes[k]++
		}
	}
	s.mu.Unlock()
	return s.Indexer.Replace(list, rv)
}

func (s *recordingStore[T]) deleteCounts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.deletes)
}

// errorLog collects what a Reflector reports.
type errorLog struct {
	mu   sync.Mutex
	errs []error
}

func (l *errorLog) add(err error) {
	l.mu.Lock()
	l.errs = append(l.errs, err)
	l.mu.Unlock()
}

// has reports whether some error so far wraps target.
func (l *errorLog) has(target error) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, err := range l.errs {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

func (l *errorLog) all() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.errs...)
}

// startMirror runs a Reflector of lw into a new recordingStore until the
// test ends, with short pauses so that tests recover quickly, and returns
// it with its store and what it reports.
func startMirror[T any](t *testing.T, lw source.ListWatcher[etcdmirror.Object[T]]) (*mirror.Reflector[etcdmirror.Object[T]], *recordingStore[T], *errorLog) {
	t.Helper()
	store, log := newRecordingStore[T](), &errorLog{}
	r := mirror.NewReflector(lw, store, mirror.ReflectorOptions{
		Name:         t.Name(),
		ErrorHandler: log.add,
		ListWatch:    mirror.ListWatchOptions{PageSize: 5_000, InitialBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond},
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return r, store, log
}

// fastOptions make a watch notice a lost member within a second.
var fastOptions = etcdmirror.Options{ProgressInterval: 100 * time.Millisecond, RequestTimeout: time.Second}

// syncedRev is the revision r last handed to its store, 0 before the first
// list.
func syncedRev[T any](r *mirror.Reflector[T]) int64 {
	rev, _ := strconv.ParseInt(r.Freshness().ResourceVersion, 10, 64)
	return rev
}

// requireConverged waits until store holds exactly what etcd holds under
// prefix, at etcd's current revision.
func requireConverged[T any](t *testing.T, c *clientv3.Client, prefix string, r *mirror.Reflector[etcdmirror.Object[T]], store *recordingStore[T]) {
	t.Helper()
	resp, err := c.Get(context.Background(), prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	require.NoError(t, err)
	rev := resp.Header.Revision
	require.Eventually(t, func() bool {
		return syncedRev(r) >= rev
	}, convergeTimeout, 10*time.Millisecond, "mirror reaches revision %d", rev)

	want := make(map[string]int64)
	for _, kv := range kvsAt(t, c, prefix, rev) {
		want[kv.Key] = kv.ModRevision
	}
	got := make(map[string]int64, store.Len())
	for k, o := range store.All() {
		got[k] = o.ModRevision
	}
	require.Equal(t, want, got, "mirror equals etcd at revision %d", rev)
}

func TestReflector_InitialSyncOf100kKeysWhileWritersRunEqualsEtcd(t *testing.T) {
	t.Parallel() // its writers and list wait on the server as much as they run
	m := startEtcd(t)
	c := newClient(t, m.endpoint())
	const keys = 100_000
	putN(t, c, "/sync/", keys)

	ctx := context.Background()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { // runs through the list and the start of the watch
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			_, err := c.Delete(ctx, fmt.Sprintf("/sync/%08d", (i*13)%keys))
			assert.NoError(t, err)
			_, err = c.Put(ctx, fmt.Sprintf("/sync/%08d", (i*17)%keys), "changed")
			assert.NoError(t, err)
			_, err = c.Put(ctx, fmt.Sprintf("/sync/new-%d", i), "new")
			assert.NoError(t, err)
		}
	})
	r, store, log := startMirror(t, etcdmirror.New(c, "/sync/", etcdmirror.Options{}))
	require.Eventually(t, func() bool { return r.Stats().Lists > 0 }, convergeTimeout, 10*time.Millisecond)
	close(stop)
	wg.Wait()

	requireConverged(t, c, "/sync/", r, store)
	assert.Empty(t, log.all())
}

func TestReflector_CompactionWhileDisconnectedRelistsWithOneDeletePerDeletedKey(t *testing.T) {
	m := startEtcd(t)
	direct := newClient(t, m.endpoint())
	p := newProxy(t, m.cliURL.Host)
	c := newClient(t, p.endpoint())
	ctx := context.Background()
	putN(t, direct, "/off/", 100)

	r, store, log := startMirror(t, etcdmirror.New(c, "/off/", fastOptions))
	requireConverged(t, direct, "/off/", r, store)
	require.Empty(t, store.deleteCounts())

	p.Cut()
	deleted := make(map[string]int)
	for i := range 10 {
		k := fmt.Sprintf("/off/%08d", i)
		_, err := direct.Delete(ctx, k)
		require.NoError(t, err)
		deleted[k] = 1
	}
	for i := range 5 {
		_, err := direct.Put(ctx, fmt.Sprintf("/off/%08d", 50+i), "changed")
		require.NoError(t, err)
		_, err = direct.Put(ctx, fmt.Sprintf("/off/new-%d", i), "new")
		require.NoError(t, err)
	}
	// A key created and deleted while cut was never known: no delete.
	_, err := direct.Put(ctx, "/off/ephemeral", "x")
	require.NoError(t, err)
	d, err := direct.Delete(ctx, "/off/ephemeral")
	require.NoError(t, err)
	_, err = direct.Compact(ctx, d.Header.Revision, clientv3.WithCompactPhysical())
	require.NoError(t, err)
	require.Eventually(t, func() bool { return log.has(source.ErrUnavailable) }, convergeTimeout, 10*time.Millisecond,
		"the mirror notices the cut")
	p.Resume()

	requireConverged(t, direct, "/off/", r, store)
	assert.Equal(t, deleted, store.deleteCounts(), "exactly one delete per key deleted while cut")
	assert.True(t, log.has(source.ErrExpired), "the watch found its revision compacted")
	assert.Positive(t, r.Stats().Relists)
}

func TestReflector_ClusterWithClientsMemberStoppedConverges(t *testing.T) {
	t.Parallel() // mostly waits for elections and reconnections
	cl := startCluster(t, 3)
	ends := []string{cl.members[0].endpoint(), cl.members[1].endpoint(), cl.members[2].endpoint()}
	c := newClient(t, ends...)
	writer := newClient(t, cl.members[1].endpoint())
	ctx := context.Background()
	putN(t, writer, "/cl/", 1000)

	r, store, _ := startMirror(t, etcdmirror.New(c, "/cl/", fastOptions))
	requireConverged(t, writer, "/cl/", r, store)

	cl.members[0].close()
	for i := range 100 {
		_, err := writer.Delete(ctx, fmt.Sprintf("/cl/%08d", i))
		require.NoError(t, err)
		_, err = writer.Put(ctx, fmt.Sprintf("/cl/%08d", 500+i), "changed")
		require.NoError(t, err)
	}
	requireConverged(t, writer, "/cl/", r, store)
	for i := range 100 {
		assert.Equal(t, 1, store.deleteCounts()[fmt.Sprintf("/cl/%08d", i)])
	}
}

func TestReflector_MemberRestartedFromItsDataDirConverges(t *testing.T) {
	t.Parallel() // mostly waits for elections and reconnections
	m := startEtcd(t)
	c := newClient(t, m.endpoint())
	ctx := context.Background()
	putN(t, c, "/rs/", 100)

	r, store, log := startMirror(t, etcdmirror.New(c, "/rs/", fastOptions))
	requireConverged(t, c, "/rs/", r, store)

	m.close()
	require.Eventually(t, func() bool { return log.has(source.ErrUnavailable) }, convergeTimeout, 10*time.Millisecond)
	m.restart(t)
	for i := range 10 {
		_, err := c.Delete(ctx, fmt.Sprintf("/rs/%08d", i))
		require.NoError(t, err)
	}
	_, err := c.Put(ctx, "/rs/after-restart", "x")
	require.NoError(t, err)

	requireConverged(t, c, "/rs/", r, store)
	assert.Len(t, store.deleteCounts(), 10)
}

func TestReflector_DecodeFailureIsReportedAndEverythingElseMirrored(t *testing.T) {
	m := startEtcd(t)
	c := newClient(t, m.endpoint())
	ctx := context.Background()
	for i := range 20 {
		v := fmt.Sprint(i)
		if i%5 == 0 {
			v = "bad-list"
		}
		_, err := c.Put(ctx, fmt.Sprintf("/dec/%02d", i), v)
		require.NoError(t, err)
	}

	r, store, log := startMirror(t, etcdmirror.NewTyped(c, "/dec/", decodeInt, etcdmirror.Options{}))
	require.Eventually(t, func() bool { return r.Stats().Lists > 0 }, convergeTimeout, 10*time.Millisecond)
	_, err := c.Put(ctx, "/dec/watched-bad", "bad-watch")
	require.NoError(t, err)
	p, err := c.Put(ctx, "/dec/watched-good", "7")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return syncedRev(r) >= p.Header.Revision
	}, convergeTimeout, 10*time.Millisecond)

	var skipped []string
	for _, err := range log.all() {
		var oe *mirror.ObjectError
		require.ErrorAs(t, err, &oe)
		skipped = append(skipped, oe.Key)
	}
	assert.ElementsMatch(t, []string{"/dec/00", "/dec/05", "/dec/10", "/dec/15", "/dec/watched-bad"}, skipped)
	assert.Equal(t, 17, store.Len(), "16 good keys listed, one watched")
	o, ok := store.GetByKey("/dec/watched-good")
	require.True(t, ok)
	assert.Equal(t, 7, o.Value)
}
