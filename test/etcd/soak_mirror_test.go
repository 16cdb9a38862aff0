package etcd

import (
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/listwatch/mirror"
	etcdmirror "github.com/listwatch/mirror/adapters/etcd"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// soakEpoch is one mirror's life, from a start to a stop: an informer
// and its handlers, whose accounting is their own.
type soakEpoch struct {
	n          int
	prevValues bool
	resync     time.Duration // the informer's ResyncPeriod
	run        *runningInformer[string]
	handlers   []soakHandler
	errs       *soakErrors
}

// soakHandler is one handler of a soak's mirror.
type soakHandler struct {
	name  string
	calls *callLog[string]
	// bounded says the handler has a MaxBacklog, and so may be told of
	// a delete with a newer state of the object than it was last given.
	bounded bool
}

func (e *soakEpoch) String() string {
	return fmt.Sprintf("mirror %d (PrevValues %v, ResyncPeriod %v)", e.n, e.prevValues, e.resync)
}

// startEpoch starts a new mirror on the phase's queue, with one handler
// registered before it runs.
func (s *soak) startEpoch() {
	errs := &soakErrors{reports: make(map[objectRef]int)}
	e := &soakEpoch{n: s.stats.epochs, prevValues: s.rng.IntN(2) == 0, errs: errs}
	opts := identityOptions[string](errs.add)
	if s.rng.IntN(3) == 0 {
		// Resyncs run through the queues alongside everything else.
		e.resync = time.Second
		opts.ResyncPeriod = e.resync
	}
	// Short watches and small pages, so that watches are renewed and
	// lists are paged, and compaction can catch a list between pages.
	opts.ListWatch.WatchTimeout = 3 * time.Second
	opts.ListWatch.PageSize = 500
	lwOpts := fastOptions
	lwOpts.PrevValues = e.prevValues
	run, err := runInformer(etcdmirror.NewTyped(s.mc, soakPrefix, soakDecode, lwOpts), opts)
	require.NoError(s.t, err)
	e.run = run
	e.handlers = []soakHandler{{name: "first", calls: run.calls}}
	s.epoch = e
	s.stats.epochs++
	s.logf("%v started", e)
}

// addLateHandler registers a second handler with the running mirror: it
// is replayed the cache while changes go on, and its backlog is bounded,
// so that it is also told of changes folded together.
func (s *soak) addLateHandler() {
	e := s.epoch
	h := soakHandler{name: "late", calls: &callLog[string]{}, bounded: true}
	opts := mirror.HandlerOptions{MaxBacklog: 64, ResyncPeriod: -1}
	if s.rng.IntN(2) == 0 {
		opts.ResyncPeriod = 0 // the informer's
	}
	_, err := e.run.inf.AddEventHandler(h.calls, opts)
	require.NoError(s.t, err)
	e.handlers = append(e.handlers, h)
	s.logf("late handler added to mirror %d", e.n)
}

// endEpoch stops the mirror and checks its handlers' calls against
// etcd's history. A mirror that caught up with etcd at revision rev,
// where etcd held want, is checked to have stayed there; rev is 0 for one
// stopped on the way.
func (s *soak) endEpoch(want map[string]etcdmirror.Object[string], rev int64) {
	t := s.t
	e := s.epoch
	s.logf("mirror %d stops", e.n)
	require.NoError(t, e.run.stop())
	s.epoch = nil
	// The mirror may have been ahead of the recording: the history must
	// hold every change the handlers could have been told of.
	seen := informerRev(e.run.inf)
	require.Eventually(t, func() bool { return s.hist.lastRev() >= seen }, convergeTimeout, 10*time.Millisecond,
		"the history reaches revision %d, where %v stopped", seen, e)
	require.NoError(t, s.hist.failure())
	var broken []string
	for _, h := range e.handlers {
		if rev > 0 {
			// Unless a late write has come since, no handler was told
			// anything after the cache caught up.
			if _, _, now, err := s.read(); err == nil && now == rev {
				assert.Equal(t, want, h.calls.view(), "%v: the %s handler's view after the informer stopped", e, h.name)
			}
		}
		opts := checkOptions{bounded: h.bounded}
		counts, hb := checkCalls(s.hist, soakDecode, h.calls.all(), opts)
		s.stats.calls.addUp(counts)
		for _, b := range hb {
			broken = append(broken, h.name+" handler: "+b)
		}
	}
	if rev > 0 {
		s.stats.checked++
	}
	for ref, n := range e.errs.reportCounts() {
		s.stats.objectErrors += n
		if n > 1 {
			broken = append(broken, fmt.Sprintf("%s: undecodable value at rev %s reported %d times", ref.key, ref.rv, n))
		}
	}
	st := e.run.inf.Stats().Reflector
	s.stats.lists += st.Lists
	s.stats.relists += st.Relists
	s.stats.watches += st.Watches
	s.stats.events += st.Events
	for i, b := range broken {
		if i == 20 {
			t.Errorf("%v: ... and %d more", e, len(broken)-i)
			break
		}
		t.Errorf("%v, seed %d: %s", e, s.seed, b)
	}
}

// soakErrors counts how many times a mirror reported each undecodable
// value.
type soakErrors struct {
	mu      sync.Mutex
	reports map[objectRef]int
}

// objectRef names one value of one key.
type objectRef struct{ key, rv string }

func (e *soakErrors) add(err error) {
	var oe *mirror.ObjectError
	if !errors.As(err, &oe) {
		return
	}
	e.mu.Lock()
	e.reports[objectRef{oe.Key, oe.ResourceVersion}]++
	e.mu.Unlock()
}

func (e *soakErrors) reportCounts() map[objectRef]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return maps.Clone(e.reports)
}
