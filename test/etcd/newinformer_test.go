package etcd

import (
	"context"
	"fmt"
	"slices"
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

// noteLog records what a handler is told, one line per notification.
type noteLog struct {
	mu    sync.Mutex
	notes []string
}

func (l *noteLog) add(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.notes = append(l.notes, fmt.Sprintf(format, args...))
}

func (l *noteLog) since(i int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.notes[i:])
}

func (l *noteLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.notes)
}

// An informer from etcd.NewInformer that relists after a compaction
// reports what changed while it was cut off, and nothing else: no update
// for the keys that did not change, and a key deleted and created again
// as a deletion and then an addition.
func TestNewInformer_RelistAfterCompactionReportsOnlyChangesAndARecreatedKeyAsDeleteThenAdd(t *testing.T) {
	t.Parallel()
	m := startEtcd(t)
	direct := newClient(t, m.endpoint())
	p := newProxy(t, m.cliURL.Host)
	c := newClient(t, p.endpoint())
	ctx := context.Background()
	putN(t, direct, "/ni/", 1000)

	log := &errorLog{}
	inf := etcdmirror.NewInformer(etcdmirror.New(c, "/ni/", fastOptions), etcdmirror.InformerOptions[[]byte]{
		ListWatch:    mirror.ListWatchOptions{InitialBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond},
		ErrorHandler: log.add,
	})
	notes := &noteLog{}
	reg, err := inf.AddEventHandler(mirror.HandlerFuncs[etcdmirror.KV]{
		AddFunc:    func(o etcdmirror.KV, _ bool) { notes.add("add %s %s", o.Key, o.Value) },
		UpdateFunc: func(old, o etcdmirror.KV) { notes.add("update %s %s->%s", o.Key, old.Value, o.Value) },
		DeleteFunc: func(o etcdmirror.KV, unknown bool) { notes.add("delete %s %s unknown=%t", o.Key, o.Value, unknown) },
	}, mirror.HandlerOptions{})
	require.NoError(t, err)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- inf.Run(rctx) }()
	t.Cleanup(func() {
		cancel()
		assert.NoError(t, <-done)
	})
	wctx, wcancel := context.WithTimeout(ctx, convergeTimeout)
	defer wcancel()
	require.NoError(t, mirror.WaitForCacheSync(wctx, reg))
	require.Eventually(t, func() bool { return notes.len() == 1000 }, convergeTimeout, 10*time.Millisecond, "the initial adds")

	p.Cut()
	_, err = direct.Put(ctx, "/ni/00000001", "changed")
	require.NoError(t, err)
	_, err = direct.Delete(ctx, "/ni/00000002")
	require.NoError(t, err)
	_, err = direct.Put(ctx, "/ni/00000002", "again")
	require.NoError(t, err)
	d, err := direct.Delete(ctx, "/ni/00000003")
	require.NoError(t, err)
	_, err = direct.Compact(ctx, d.Header.Revision, clientv3.WithCompactPhysical())
	require.NoError(t, err)
	require.Eventually(t, func() bool { return log.has(source.ErrUnavailable) }, convergeTimeout, 10*time.Millisecond,
		"the informer notices the cut")
	p.Resume()

	// The relist's deletions come last; a key created after them is
	// reported after anything else the relist made.
	require.Eventually(t, func() bool { return slices.Contains(notes.since(1000), "delete /ni/00000003 v3 unknown=true") },
		convergeTimeout, 10*time.Millisecond, "the relist")
	_, err = direct.Put(ctx, "/ni/later", "x")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return slices.Contains(notes.since(1000), "add /ni/later x") },
		convergeTimeout, 10*time.Millisecond, "the key created after the relist")

	got := notes.since(1000)
	assert.ElementsMatch(t, []string{
		"update /ni/00000001 v1->changed",
		"delete /ni/00000002 v2 unknown=true", // its deletion was not seen
		"add /ni/00000002 again",
		"delete /ni/00000003 v3 unknown=true",
		"add /ni/later x",
	}, got, "no update for the 997 keys that did not change")
	assert.Less(t, slices.Index(got, "delete /ni/00000002 v2 unknown=true"), slices.Index(got, "add /ni/00000002 again"),
		"the re-created key: delete, then add")
	assert.True(t, log.has(source.ErrExpired), "the watch found its revision compacted")
}
