package mirror

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

type notifyKind uint8

const (
	notifyAdd notifyKind = iota + 1
	notifyUpdate
	notifyDelete
)

// notification is one call to make on a handler.
type notification[K comparable, T any] struct {
	// The small fields first, together: they share one word.
	kind notifyKind
	// initial is set on an add that belongs to the initial list (or to a
	// late handler's replay); the handler has not synced until all of
	// them are delivered. It is not origin == OriginInitialList: in
	// bounded mode a merged notification keeps the most urgent origin of
	// those it stands for, and stays an initial add if one of them was.
	initial bool
	// unknown is set on a delete whose final state is unknown.
	unknown bool
	origin  Origin
	// audience, if not audienceAll, says which listeners read it off the
	// feed: those following a checkpoint or the others (see
	// checkpoint_relist.go).
	audience audience
	key      K
	old      T // notifyUpdate: the state the handler saw before
	obj      T
}

// audience is which listeners a notification of the feed is for.
type audience uint8

const (
	audienceAll audience = iota
	// audienceState is for the listeners handed the state the informer
	// starts from; audienceChanges for those told only what changed
	// since the checkpoint it resumed from (listener.sinceCheckpoint).
	audienceState
	audienceChanges
)

// processor fans notifications out to listeners, one per handler.
type processor[K comparable, T any] struct {
	report func(error)
	logger *slog.Logger // for the watchdog

	mu        sync.RWMutex
	listeners []*listener[K, T]
	// syncing holds the listeners found due by the last shouldResync; the
	// Sync notifications of that resync go to them only. It changes only
	// under the informer's applyMu, with the resync it is for.
	syncing []*listener[K, T]
	// resyncMoved receives (capacity 1, never blocking the sender) when a
	// listener's next resync was set or changed, or a listener with one
	// went, for the informer's resync loop to look again (see
	// nextResync). Nil in a processor without an informer.
	resyncMoved chan struct{}

	// ctx and wg are set by run; listeners added later start at once,
	// until stop.
	ctx     context.Context
	wg      *sync.WaitGroup
	stopped bool
	// outer, set by bind, is the context Run was given: once it has
	// ended, add refuses as after stop, though Run has not seen it yet.
	outer context.Context
	// running are the listeners whose goroutine runs, removed or not, for
	// the watchdog (see watch), which watchWake wakes when one returns or
	// the processor stops. Times it measures are after epoch, set by run.
	running   []*listener[K, T]
	watchWake chan struct{}
	epoch     time.Time

	// metrics, if not nil, is set by run and receives the handlers'
	// delivery latencies, measured from stamps: the sampled times at
	// which publish told the listeners of new notifications.
	metrics InformerMetrics
	stamps  stampLog
	sample  sampler // publish's; under applyMu

	// The rest belongs to the goroutine holding the informer's applyMu,
	// which alone distributes and publishes; it publishes everything it
	// distributed before it lets go of applyMu, so a listener added under
	// applyMu starts at a feed with nothing unpublished.
	feed feed[K, T]
	// published is the feed's length at the last publish; initial counts
	// the initial-list adds appended since.
	published uint64
	initial   int
}

// add registers l, starting its goroutine if the processor runs. setup,
// called first, makes l follow the feed (see listener.follow) and queues
// what it must see first. add returns ErrStopped, and calls nothing, once
// the context given to bind has ended or stop was called.
func (p *processor[K, T]) add(l *listener[K, T], setup func()) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped || (p.outer != nil && p.outer.Err() != nil) {
		return ErrStopped
	}
	setup()
	l.proc = p
	l.stampNext = p.stamps.count()
	p.listeners = append(p.listeners, l)
	if l.resyncPeriod > 0 {
		// From its registration; the informer's resync loop moves it to
		// its first sync for listeners registered before (startResync).
		l.nextResync = time.Now().Add(l.resyncPeriod)
		p.resyncChanged()
	}
	if p.ctx != nil {
		p.startLocked(l)
	}
	return nil
}

// bind makes add refuse listeners once ctx, the context Run was given,
// has ended.
func (p *processor[K, T]) bind(ctx context.Context) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.outer = ctx
}

// stop makes add refuse listeners from now on, so that the WaitGroup run
// was given can be waited on: no goroutine starts after stop returns.
func (p *processor[K, T]) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopped = true
	p.sample.stop()
	p.wakeWatchdog()
}

// handlerStats returns the stats of every registered handler.
func (p *processor[K, T]) handlerStats() []HandlerStats {
	p.mu.RLock()
	defer p.mu.RUnlock()
	hs := make([]HandlerStats, len(p.listeners))
	for i, l := range p.listeners {
		hs[i] = HandlerStats{Name: l.name, Backlog: l.backlog(), Delivered: l.delivered.Load(), Panics: l.panics.Load()}
		if l.state.Load()&stateStuck != 0 {
			hs[i].StuckFor = p.stuckFor(l)
		}
	}
	return hs
}

// remove unregisters l and stops its goroutine; pending notifications are
// dropped. It reports whether l was registered.
func (p *processor[K, T]) remove(l *listener[K, T]) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	found := false
	for i, x := range p.listeners {
		if x == l {
			p.listeners = append(p.listeners[:i], p.listeners[i+1:]...)
			found = true
			break
		}
	}
	for i, x := range p.syncing {
		if x == l {
			p.syncing = append(p.syncing[:i], p.syncing[i+1:]...)
			break
		}
	}
	if found {
		l.stop()
		p.feed.unfollow()
		if l.resyncPeriod > 0 {
			p.resyncChanged() // the next round may come later now
		}
	}
	return found
}

// run starts every listener's goroutine, and the watchdog's, under ctx
// and wg; m, if not nil, receives delivery latencies. The watchdog
// returns after stop, once every listener has.
func (p *processor[K, T]) run(ctx context.Context, wg *sync.WaitGroup, m InformerMetrics) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ctx, p.wg, p.metrics = ctx, wg, m
	p.epoch, p.watchWake = time.Now(), make(chan struct{}, 1)
	if m != nil {
		p.sample.start(samplePeriod)
	}
	for _, l := range p.listeners {
		p.startLocked(l)
	}
	wg.Go(p.watch)
}

func (p *processor[K, T]) startLocked(l *listener[K, T]) {
	p.wg.Add(1)
	p.running = append(p.running, l)
	go func() {
		defer p.wg.Done()
		l.run(p.ctx)
		p.exited(l)
	}()
}

// distribute hands n to every listener, or, for a resync (isSync), to the
// listeners due for one. It never waits on a handler. A notification for
// every listener goes to the feed and reaches them at the next publish;
// one for some goes to each of those listeners' own queue, ordered after
// the feed's notifications distributed before it.
func (p *processor[K, T]) distribute(n notification[K, T], isSync bool) {
	if !isSync {
		if p.feed.followers.Load() == 0 {
			return // an informer used as a cache only
		}
		p.feed.append(n)
		if n.initial {
			p.initial++
		}
		return
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	for _, l := range p.syncing {
		l.pushOwn(n, p.feed.seq)
	}
}

// publish tells every listener of the notifications distributed to the
// feed since the last publish, and wakes them.
func (p *processor[K, T]) publish() {
	end := p.feed.seq
	if end == p.published {
		return
	}
	p.published = end
	if p.metrics != nil && p.sample.take() {
		p.stamps.add(end, time.Now())
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	for _, l := range p.listeners {
		l.publish(end, p.initial)
	}
	p.initial = 0
}

// signalSynced wakes every listener so it re-checks whether it has synced.
func (p *processor[K, T]) signalSynced() {
	p.mu.RLock()
	defer p.mu.RUnlock()
	for _, l := range p.listeners {
		l.wakeUp()
	}
}
