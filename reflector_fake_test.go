package mirror

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/listwatch/mirror/source"
)

// tobj is the object type of the Reflector tests.
type tobj struct{ Key, Val string }

func (o tobj) String() string { return o.Key + "=" + o.Val }

// fakeLW is a scripted ListWatcher: each List and Watch call takes the next
// reply the test queued, or blocks until its context ends if there is none.
// It records every call with its options and the (fake) time it came.
type fakeLW struct {
	lists   chan listReply
	watches chan watchReply

	mu         sync.Mutex
	listCalls  []listCall
	watchCalls []watchCall
}

type listCall struct {
	Opts source.ListOptions
	At   time.Time
}

type watchCall struct {
	Opts source.WatchOptions
	At   time.Time
}

type listReply struct {
	res source.ListResult[tobj]
	err error
}

type watchReply struct {
	w   *fakeWatcher
	err error
}

func newFakeLW() *fakeLW {
	return &fakeLW{lists: make(chan listReply, 256), watches: make(chan watchReply, 256)}
}

// page queues a successful List reply.
func (f *fakeLW) page(rv, cont string, items ...tobj) {
	f.lists <- listReply{res: source.ListResult[tobj]{Items: items, ResourceVersion: rv, Continue: cont}}
}

// listErr queues a failing List reply.
func (f *fakeLW) listErr(err error) { f.lists <- listReply{err: err} }

// watch queues a Watch reply that opens a stream with the given steps and
// returns it.
func (f *fakeLW) watch(steps ...step) *fakeWatcher {
	w := newFakeWatcher(steps...)
	f.watches <- watchReply{w: w}
	return w
}

// watchErr queues a failing Watch reply.
func (f *fakeLW) watchErr(err error) { f.watches <- watchReply{err: err} }

func (f *fakeLW) List(ctx context.Context, opts source.ListOptions) (source.ListResult[tobj], error) {
	f.mu.Lock()
	f.listCalls = append(f.listCalls, listCall{opts, time.Now()})
	f.mu.Unlock()
	select {
	case <-ctx.Done():
		return source.ListResult[tobj]{}, ctx.Err()
	case r := <-f.lists:
		return r.res, r.err
	}
}

func (f *fakeLW) Watch(ctx context.Context, opts source.WatchOptions) (source.Watcher[tobj], error) {
	f.mu.Lock()
	f.watchCalls = append(f.watchCalls, watchCall{opts, time.Now()})
	f.mu.Unlock()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case r := <-f.watches:
		if r.w == nil {
			return nil, r.err // a reply without either is a broken source
		}
		return r.w, r.err
	}
}

// Lists returns a copy of the List calls so far.
func (f *fakeLW) Lists() []listCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.listCalls)
}

// Watches returns a copy of the Watch calls so far.
func (f *fakeLW) Watches() []watchCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.watchCalls)
}

// ListVersions returns the ResourceVersion of every List call that started
// a list (the first page's), in order.
func (f *fakeLW) ListVersions() []string {
	var rvs []string
	for _, c := range f.Lists() {
		if c.Opts.Continue == "" {
			rvs = append(rvs, c.Opts.ResourceVersion)
		}
	}
	return rvs
}

// WatchVersions returns the ResourceVersion of every Watch call, in order.
func (f *fakeLW) WatchVersions() []string {
	var rvs []string
	for _, c := range f.Watches() {
		rvs = append(rvs, c.Opts.ResourceVersion)
	}
	return rvs
}

// step is one thing a fakeWatcher's Next does: wait for after (fake time
// in a synctest bubble), then return ev, or end the stream with err.
type step struct {
	after time.Duration
	ev    source.Event[tobj]
	err   error
}

func addedEvent(key, val, rv string) step {
	return step{ev: source.Event[tobj]{Type: source.Added, Object: tobj{key, val}, ResourceVersion: rv}}
}

func modified(key, val, rv string) step {
	return step{ev: source.Event[tobj]{Type: source.Updated, Object: tobj{key, val}, ResourceVersion: rv}}
}

func deletedEvent(key, val, rv string) step {
	return step{ev: source.Event[tobj]{Type: source.Deleted, Object: tobj{key, val}, ResourceVersion: rv}}
}

func bookmark(rv string) step {
	return step{ev: source.Event[tobj]{Type: source.Bookmark, ResourceVersion: rv}}
}

func initialEnd(rv string) step {
	return step{ev: source.Event[tobj]{Type: source.Bookmark, ResourceVersion: rv, InitialEventsEnd: true}}
}

func errEvent(rv string, err error) step {
	return step{ev: source.Event[tobj]{Type: source.Error, ResourceVersion: rv, Err: err}}
}

func end(err error) step { return step{err: err} }

// eofAfter ends a stream with io.EOF after d.
func eofAfter(d time.Duration) step { return step{after: d, err: io.EOF} }

// fakeWatcher plays the steps pushed to it; with none left, Next blocks
// until its context ends or the watcher is stopped.
type fakeWatcher struct {
	steps    chan step
	stop     chan struct{}
	stopOnce sync.Once
	err      error // sticky once the stream ended
}

func newFakeWatcher(steps ...step) *fakeWatcher {
	w := &fakeWatcher{steps: make(chan step, len(steps)+64), stop: make(chan struct{})}
	for _, s := range steps {
		w.steps <- s
	}
	return w
}

// push adds steps to a running stream.
func (w *fakeWatcher) push(steps ...step) {
	for _, s := range steps {
		w.steps <- s
	}
}

func (w *fakeWatcher) Next(ctx context.Context) (source.Event[tobj], error) {
	if w.err != nil {
		return source.Event[tobj]{}, w.err
	}
	select {
	case <-ctx.Done():
		w.err = ctx.Err()
	case <-w.stop:
		w.err = io.EOF
	case s := <-w.steps:
		if s.after > 0 {
			t := time.NewTimer(s.after)
			defer t.Stop()
			select {
			case <-ctx.Done():
				w.err = ctx.Err()
				return source.Event[tobj]{}, w.err
			case <-w.stop:
				w.err = io.EOF
				return source.Event[tobj]{}, w.err
			case <-t.C:
			}
		}
		if s.err == nil {
			return s.ev, nil
		}
		w.err = s.err
	}
	return source.Event[tobj]{}, w.err
}

func (w *fakeWatcher) Stop() { w.stopOnce.Do(func() { close(w.stop) }) }

// Stopped reports whether Stop was called.
func (w *fakeWatcher) Stopped() bool {
	select {
	case <-w.stop:
		return true
	default:
		return false
	}
}

// recStore is a ReflectorStore that keeps objects by key and logs every
// call, such as "add a=1", "replace@7 [a=1 b=2]" or "resync". Calls for a
// key in fail return that error and change nothing.
type recStore struct {
	mu    sync.Mutex
	items map[string]tobj
	log   []string
	fail  map[string]error
	// replaceErr, if set, is returned by Replace after applying the list.
	replaceErr error
}

func newRecStore() *recStore { return &recStore{items: map[string]tobj{}, fail: map[string]error{}} }

func (s *recStore) record(op string, obj tobj) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log = append(s.log, op+" "+obj.String())
	if err := s.fail[obj.Key]; err != nil {
		return &KeyError{Object: obj, Err: err}
	}
	if op == "delete" {
		delete(s.items, obj.Key)
	} else {
		s.items[obj.Key] = obj
	}
	return nil
}

func (s *recStore) Add(obj tobj) error    { return s.record("add", obj) }
func (s *recStore) Update(obj tobj) error { return s.record("update", obj) }
func (s *recStore) Delete(obj tobj) error { return s.record("delete", obj) }

func (s *recStore) Replace(list []tobj, rv string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, len(list))
	s.items = map[string]tobj{}
	for i, o := range list {
		names[i] = o.String()
		s.items[o.Key] = o
	}
	s.log = append(s.log, fmt.Sprintf("replace@%s [%s]", rv, strings.Join(names, " ")))
	return s.replaceErr
}

func (s *recStore) Resync() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log = append(s.log, "resync")
	return nil
}

// Log returns a copy of the calls so far.
func (s *recStore) Log() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.log)
}

// Count returns how many logged calls start with prefix.
func (s *recStore) Count(prefix string) int {
	n := 0
	for _, l := range s.Log() {
		if strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}

// errLog collects the errors a Reflector reports.
type errLog struct {
	mu   sync.Mutex
	errs []error
}

func (l *errLog) handle(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, err)
}

// Errors returns a copy of the errors so far.
func (l *errLog) Errors() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.errs)
}

// reflectorRig is a Reflector over a fakeLW and a recStore, with its errors
// collected. Build it inside a synctest bubble.
type reflectorRig struct {
	lw    *fakeLW
	store *recStore
	errs  *errLog
	r     *Reflector[tobj]
	done  chan struct{}
	stop  context.CancelFunc
}

// newRig returns a rig; opts.ErrorHandler is replaced by the rig's errLog.
func newRig(opts ReflectorOptions) *reflectorRig {
	g := &reflectorRig{lw: newFakeLW(), store: newRecStore(), errs: &errLog{}}
	opts.ErrorHandler = g.errs.handle
	g.r = NewReflector[tobj](g.lw, g.store, opts)
	return g
}

// start runs the Reflector until stopRun.
func (g *reflectorRig) start(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	g.stop = cancel
	g.done = make(chan struct{})
	go func() {
		defer close(g.done)
		g.r.Run(ctx)
	}()
}

// runFor starts the Reflector, lets the fake clock advance by d, and
// returns once every goroutine of the bubble is blocked again.
func (g *reflectorRig) runFor(t *testing.T, d time.Duration) {
	g.start(t)
	synctest.Wait()
	time.Sleep(d) // advance the fake clock
	synctest.Wait()
}

// stopRun cancels Run's context and waits for Run to return.
func (g *reflectorRig) stopRun() {
	g.stop()
	<-g.done
}

// returned reports whether Run has returned.
func (g *reflectorRig) returned() bool {
	select {
	case <-g.done:
		return true
	default:
		return false
	}
}

// gaps returns the time between consecutive calls.
func gaps(at []time.Time) []time.Duration {
	var d []time.Duration
	for i := 1; i < len(at); i++ {
		d = append(d, at[i].Sub(at[i-1]))
	}
	return d
}

func listTimes(calls []listCall) []time.Time {
	at := make([]time.Time, len(calls))
	for i, c := range calls {
		at[i] = c.At
	}
	return at
}

func watchTimes(calls []watchCall) []time.Time {
	at := make([]time.Time, len(calls))
	for i, c := range calls {
		at[i] = c.At
	}
	return at
}

// eachWatchFailure runs body in a synctest bubble once for each way err can
// end the first watch: from the Watch call, when the last version seen is
// the list's "10", and from Next after one event, when it is "11". The
// rig's source has the list and the failing watch queued; body queues what
// follows and starts the rig.
func eachWatchFailure(t *testing.T, opts ReflectorOptions, err error, body func(t *testing.T, g *reflectorRig, lastRV string)) {
	cases := []struct {
		name   string
		script func(lw *fakeLW)
		lastRV string
	}{
		{name: "from Watch", script: func(lw *fakeLW) { lw.watchErr(err) }, lastRV: "10"},
		{name: "from Next", script: func(lw *fakeLW) { lw.watch(addedEvent("a", "1", "11"), end(err)) }, lastRV: "11"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g := newRig(opts)
				g.lw.page("10", "")
				c.script(g.lw)
				body(t, g, c.lastRV)
			})
		})
	}
}
