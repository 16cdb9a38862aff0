package etcd

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/listwatch/mirror"
	etcdmirror "github.com/listwatch/mirror/adapters/etcd"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// notification is one handler call about one key.
type notification struct {
	kind    string // "add", "update" or "delete"
	obj     etcdmirror.Object[int]
	unknown bool // a delete's finalStateUnknown
}

// keyHandler records the handler calls about one key, in order.
type keyHandler struct {
	key   string
	mu    sync.Mutex
	calls []notification
}

func (h *keyHandler) record(n notification) {
	if n.obj.Key != h.key {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, n)
}

func (h *keyHandler) OnAdd(obj etcdmirror.Object[int], _ bool) {
	h.record(notification{kind: "add", obj: obj})
}

func (h *keyHandler) OnUpdate(_, obj etcdmirror.Object[int]) {
	h.record(notification{kind: "update", obj: obj})
}

func (h *keyHandler) OnDelete(obj etcdmirror.Object[int], finalStateUnknown bool) {
	h.record(notification{kind: "delete", obj: obj, unknown: finalStateUnknown})
}

func (h *keyHandler) notifications() []notification {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]notification(nil), h.calls...)
}

// objectErrors returns the *mirror.ObjectError about key among errs.
func objectErrors(errs []error, key string) []*mirror.ObjectError {
	var out []*mirror.ObjectError
	for _, err := range errs {
		var oe *mirror.ObjectError
		if errors.As(err, &oe) && oe.Key == key {
			out = append(out, oe)
		}
	}
	return out
}

func TestInformer_ValueThatTurnsUndecodableIsAnUnknownDeleteReportedOnceAcrossARelist(t *testing.T) {
	t.Parallel()
	for _, q := range informerQueues {
		t.Run(q.name, func(t *testing.T) {
			t.Parallel()
			m := startEtcd(t)
			direct := newClient(t, m.endpoint())
			p := newProxy(t, m.cliURL.Host)
			c := newClient(t, p.endpoint())
			ctx := context.Background()
			const key = "/iundec/k"
			_, err := direct.Put(ctx, key, "1")
			require.NoError(t, err)
			_, err = direct.Put(ctx, "/iundec/other", "2")
			require.NoError(t, err)

			inf, _, log := startInformer(t, etcdmirror.NewTyped(c, "/iundec/", decodeInt, silenceOptions), 0)
			h := &keyHandler{key: key}
			reg, err := inf.AddEventHandler(h, mirror.HandlerOptions{})
			require.NoError(t, err)
			wctx, cancel := context.WithTimeout(ctx, convergeTimeout)
			defer cancel()
			require.NoError(t, mirror.WaitForCacheSync(wctx, reg))
			last, ok := inf.GetByKey(key)
			require.True(t, ok)
			require.Equal(t, 1, last.Value)

			// The value turns undecodable: the key leaves the cache and
			// the handler learns it as a deletion of unknown final state.
			bad, err := direct.Put(ctx, key, "not a number")
			require.NoError(t, err)
			badRV := rvOf(bad.Header.Revision)
			require.Eventually(t, func() bool { return len(h.notifications()) == 2 }, convergeTimeout, 10*time.Millisecond)
			assert.Equal(t, []notification{
				{kind: "add", obj: last},
				{kind: "delete", obj: last, unknown: true},
			}, h.notifications(), "the last good value leaves, its final state unknown")
			_, ok = inf.GetByKey(key)
			assert.False(t, ok, "the key left the cache")

			// A relist meets the bad value again: the watch is cut while
			// etcd compacts past where it would resume.
			relists := inf.Stats().Reflector.Relists
			p.Cut()
			_, err = direct.Put(ctx, "/iundec/other", "3")
			require.NoError(t, err)
			later, err := direct.Put(ctx, "/iundec/other", "4")
			require.NoError(t, err)
			_, err = direct.Compact(ctx, later.Header.Revision, clientv3.WithCompactPhysical())
			require.NoError(t, err)
			p.Resume()
			require.Eventually(t, func() bool {
				o, ok := inf.GetByKey("/iundec/other")
				return inf.Stats().Reflector.Relists > relists && ok && o.Value == 4
			}, convergeTimeout, 10*time.Millisecond, "the informer relists")
			reports := objectErrors(log.all(), key)
			require.Len(t, reports, 1, "the bad value is reported once, by the watch, not again by the relist")
			assert.Equal(t, badRV, reports[0].ResourceVersion)
			assert.ErrorIs(t, reports[0], strconv.ErrSyntax)
			assert.Len(t, h.notifications(), 2, "the relist tells the handler nothing more about the key")

			// A good value comes back as a new key.
			good, err := direct.Put(ctx, key, "5")
			require.NoError(t, err)
			require.Eventually(t, func() bool { return len(h.notifications()) == 3 }, convergeTimeout, 10*time.Millisecond)
			added := h.notifications()[2]
			assert.Equal(t, "add", added.kind)
			assert.Equal(t, 5, added.obj.Value)
			assert.Equal(t, good.Header.Revision, added.obj.ModRevision)
			cached, ok := inf.GetByKey(key)
			require.True(t, ok)
			assert.Equal(t, added.obj, cached)
		})
	}
}
