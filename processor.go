package mirror

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// Handler receives an Informer's notifications. Each registered Handler
// is called from a goroutine of its own, one call at a time, so a Handler
// needs no locking of its own unless it shares state with other code; and a
// slow Handler delays only itself.
type Handler[T any] interface {
	// OnAdd is called when an object enters the cache, or, for a handler
	// added to a running informer, once for every object already cached.
	// isInInitialList reports that the object came with the initial list
	// (or that replay) rather than from a later change.
	OnAdd(obj T, isInInitialList bool)

	// OnUpdate is called when a cached object changes, and on a periodic
	// resync (then oldObj and newObj are the same object).
	OnUpdate(oldObj, newObj T)

	// OnDelete is called when an object leaves the cache. For an observed
	// deletion, obj is the object's last state: what the source's delete
	// event carried, or, if that held only the key (Event.KeyOnly, as
	// from the etcd adapter), the state the cache held, which the watch
	// kept current up to the deletion. finalStateUnknown reports that the
	// deletion was inferred by a relist, not observed; obj is then the
	// last state the cache held, which may be older than the object's
	// real final state.
	OnDelete(obj T, finalStateUnknown bool)
}

// HandlerFuncs adapts functions to a Handler. A nil function ignores its
// notifications.
type HandlerFuncs[T any] struct {
	AddFunc    func(obj T, isInInitialList bool)
	UpdateFunc func(oldObj, newObj T)
	DeleteFunc func(obj T, finalStateUnknown bool)
}

// OnAdd calls AddFunc if it is not nil.
func (f HandlerFuncs[T]) OnAdd(obj T, isInInitialList bool) {
	if f.AddFunc != nil {
		f.AddFunc(obj, isInInitialList)
	}
}

// OnUpdate calls UpdateFunc if it is not nil.
func (f HandlerFuncs[T]) OnUpdate(oldObj, newObj T) {
	if f.UpdateFunc != nil {
		f.UpdateFunc(oldObj, newObj)
	}
}

// OnDelete calls DeleteFunc if it is not nil.
func (f HandlerFuncs[T]) OnDelete(obj T, finalStateUnknown bool) {
	if f.DeleteFunc != nil {
		f.DeleteFunc(obj, finalStateUnknown)
	}
}

// HandlerOptions tunes one handler's registration. The zero value is a
// handler that resyncs with the informer's default period and whose
// backlog is unbounded.
type HandlerOptions struct {
	// ResyncPeriod is how often the handler is offered every cached object
	// again, as OnUpdate(obj, obj). Zero means the informer's
	// ResyncPeriod; a negative value means never. Periods under one second
	// are raised to one second. On a running informer, a period shorter
	// than the informer's own resync period is raised to it.
	ResyncPeriod time.Duration

	// MaxBacklog bounds the handler's backlog. Once more than MaxBacklog
	// notifications wait for the handler, they collapse to at most one
	// pending notification per key until the handler catches up: the
	// latest state wins, a delete stays a delete, and an update's old
	// object is the one the handler last saw. Memory is then bounded by
	// the number of keys, not of events; the price is that notifications
	// for different keys may arrive out of source order. Zero means
	// unbounded: every notification is delivered, in order.
	MaxBacklog int
}

// HandlerPanicError reports a handler that panicked. The panic is
// recovered; the notification that caused it is dropped for that handler
// only, and the handler goes on receiving notifications.
type HandlerPanicError struct {
	// Value is the value the handler panicked with.
	Value any
	// Stack is the goroutine's stack at the panic.
	Stack []byte
}

// Error implements error.
func (e *HandlerPanicError) Error() string {
	return fmt.Sprintf("mirror: event handler panicked: %v", e.Value)
}

// minResyncPeriod is the shortest resync period a handler can have: a
// tighter loop would mostly burn CPU re-delivering unchanged objects.
const minResyncPeriod = time.Second

type notifyKind uint8

const (
	notifyAdd notifyKind = iota + 1
	notifyUpdate
	notifyDelete
)

// notification is one call to make on a handler.
type notification[K comparable, T any] struct {
	kind notifyKind
	key  K
	old  T // notifyUpdate: the state the handler saw before
	obj  T
	// initial is set on an add that belongs to the initial list (or to a
	// late handler's replay); the handler has not synced until all of
	// them are delivered.
	initial bool
	// unknown is set on a delete whose final state is unknown.
	unknown bool
}

// processor fans notifications out to listeners, one per handler.
type processor[K comparable, T any] struct {
	report func(error)

	mu        sync.RWMutex
	listeners []*listener[K, T]
	// syncing holds the listeners found due by the last shouldResync; the
	// Sync notifications of that resync go to them only.
	syncing []*listener[K, T]

	// ctx and wg are set by run; listeners added later start at once.
	ctx context.Context
	wg  *sync.WaitGroup

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

// add registers l, starting its goroutine if the processor runs. l must
// follow the feed already (see listener.follow).
func (p *processor[K, T]) add(l *listener[K, T]) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.listeners = append(p.listeners, l)
	if p.ctx != nil {
		p.startLocked(l)
	}
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
	}
	return found
}

// run starts every listener's goroutine under ctx and wg.
func (p *processor[K, T]) run(ctx context.Context, wg *sync.WaitGroup) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ctx, p.wg = ctx, wg
	for _, l := range p.listeners {
		p.startLocked(l)
	}
}

func (p *processor[K, T]) startLocked(l *listener[K, T]) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		l.run(p.ctx)
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
	p.mu.RLock()
	defer p.mu.RUnlock()
	for _, l := range p.listeners {
		l.publish(end, p.initial)
	}
	p.initial = 0
}

// shouldResync finds the listeners due for a resync at now, schedules
// their next one, and reports whether there are any.
func (p *processor[K, T]) shouldResync(now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.syncing = p.syncing[:0]
	for _, l := range p.listeners {
		if l.resyncPeriod > 0 && !now.Before(l.nextResync) {
			p.syncing = append(p.syncing, l)
			l.nextResync = now.Add(l.resyncPeriod)
		}
	}
	return len(p.syncing) > 0
}

// signalSynced wakes every listener so it re-checks whether it has synced.
func (p *processor[K, T]) signalSynced() {
	p.mu.RLock()
	defer p.mu.RUnlock()
	for _, l := range p.listeners {
		l.wakeUp()
	}
}

// listener delivers one handler's notifications, in order, on a
// goroutine of its own. What waits for the handler is the part of the
// feed it has been told of and has not read, and its own queue: a late
// handler's replay and the resync notifications meant for it alone. So
// the backlog of a handler that keeps up costs nothing of its own, and a
// slow handler's costs what the feed holds for it, given back as it
// catches up.
//
// In bounded mode (HandlerOptions.MaxBacklog), once the backlog passes
// the bound, the listener reads everything waiting into pending, one slot
// per key, and does the same with everything published until pending has
// drained.
type listener[K comparable, T any] struct {
	handler      Handler[T]
	report       func(error)
	upstream     func() bool // the informer has synced
	resyncPeriod time.Duration
	nextResync   time.Time // guarded by processor.mu
	maxBacklog   int

	wake     chan struct{} // capacity 1: a pending wake-up
	stopped  chan struct{} // closed by stop
	halted   atomic.Bool   // set by stop or when run's context ends
	done     chan struct{} // closed when run returns
	stopOnce sync.Once

	syncedCh   chan struct{} // closed once the handler has synced
	syncedOnce sync.Once

	mu   sync.Mutex
	feed *feed[K, T]
	// pos is the next feed notification to deliver; the feed's
	// notifications numbered below end have been published to this
	// listener.
	pos feedPos[K, T]
	end uint64
	own seqQueue[ownNotification[K, T]]
	// removed is set by stop: nothing is queued any more.
	removed bool
	pending map[K]*slot[K, T] // bounded mode, one slot per key
	order   seqQueue[K]       // bounded mode, keys in first-pending order
	// initialPending counts undelivered initial-list adds.
	initialPending int
}

// ownNotification is a notification for one listener only, delivered
// after the feed's notifications numbered below at and before the others.
type ownNotification[K comparable, T any] struct {
	at uint64
	n  notification[K, T]
}

func newListener[K comparable, T any](h Handler[T], resync time.Duration, maxBacklog int, report func(error), upstream func() bool) *listener[K, T] {
	return &listener[K, T]{
		handler:      h,
		report:       report,
		upstream:     upstream,
		resyncPeriod: resync,
		maxBacklog:   maxBacklog,
		wake:         make(chan struct{}, 1),
		stopped:      make(chan struct{}),
		done:         make(chan struct{}),
		syncedCh:     make(chan struct{}),
	}
}

func (l *listener[K, T]) wakeUp() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// stop halts the listener and drops what waits for it, so that a removed
// handler's registration, if the program keeps it, does not keep the
// feed's chunks reachable.
func (l *listener[K, T]) stop() {
	l.stopOnce.Do(func() {
		l.halted.Store(true)
		close(l.stopped)
		l.mu.Lock()
		defer l.mu.Unlock()
		l.removed = true
		l.pos, l.end = feedPos[K, T]{}, 0
		l.own, l.order = seqQueue[ownNotification[K, T]]{}, seqQueue[K]{}
		l.pending = nil
	})
}

// follow makes the listener read f from the next notification appended
// on. It is called once, under the informer's applyMu, before anything is
// queued for the listener.
func (l *listener[K, T]) follow(f *feed[K, T]) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.feed = f
	l.pos = f.follow()
	l.end = l.pos.seq
}

// publish tells the listener that the feed's notifications numbered below
// end are there to read, initial of them initial-list adds it has not
// been told of yet.
func (l *listener[K, T]) publish(end uint64, initial int) {
	l.mu.Lock()
	if l.removed {
		l.mu.Unlock()
		return
	}
	l.initialPending += initial
	l.end = end
	l.boundLocked()
	l.mu.Unlock()
	l.wakeUp()
}

// pushOwn queues n for this listener alone, after the feed's
// notifications numbered below at.
func (l *listener[K, T]) pushOwn(n notification[K, T], at uint64) {
	l.mu.Lock()
	if l.removed {
		l.mu.Unlock()
		return
	}
	if n.initial {
		l.initialPending++
	}
	l.own.push(ownNotification[K, T]{at: at, n: n})
	l.boundLocked()
	l.mu.Unlock()
	l.wakeUp()
}

// boundLocked keeps a bounded listener within its bound: once the backlog
// passes it, and from then on until pending drains, it folds everything
// waiting into one slot per key.
func (l *listener[K, T]) boundLocked() {
	if l.maxBacklog <= 0 || (l.pending == nil && l.waitingLocked() <= l.maxBacklog) {
		return
	}
	if l.pending == nil {
		l.pending = make(map[K]*slot[K, T], l.waitingLocked())
	}
	var buf [listenerBatch]notification[K, T]
	for {
		n := l.takeOrderedLocked(buf[:])
		if n == 0 {
			return
		}
		for i := range buf[:n] {
			l.mergeLocked(buf[i])
		}
		clear(buf[:n])
	}
}

// waitingLocked is the number of notifications waiting outside pending.
func (l *listener[K, T]) waitingLocked() int {
	return int(l.end-l.pos.seq) + l.own.len()
}

// mergeLocked folds n into its key's slot. A key has one slot and one
// place in order while it is pending, however often it changes, so both
// stay bounded by the number of keys.
func (l *listener[K, T]) mergeLocked(n notification[K, T]) {
	s := l.pending[n.key]
	if s == nil {
		s = &slot[K, T]{}
		l.pending[n.key] = s
		l.order.push(n.key)
	}
	if s.empty() {
		s.first = n
		return
	}
	l.initialPending -= s.merge(n)
}

// takeLocked moves up to len(dst) notifications, the next to deliver,
// into dst and returns how many it moved.
func (l *listener[K, T]) takeLocked(dst []notification[K, T]) int {
	n := 0
	for l.pending != nil && n < len(dst) {
		if x, ok := l.nextPendingLocked(); ok {
			dst[n] = x
			n++
		}
	}
	return n + l.takeOrderedLocked(dst[n:])
}

// takeOrderedLocked moves up to len(dst) published notifications, from
// the feed and the listener's own queue in the order they were
// distributed, into dst and returns how many it moved.
func (l *listener[K, T]) takeOrderedLocked(dst []notification[K, T]) int {
	n := 0
	for n < len(dst) {
		if l.own.len() > 0 {
			if l.own.front().at <= l.pos.seq {
				dst[n] = l.own.pop().n
				n++
				continue
			}
		}
		end := l.end
		if l.own.len() > 0 {
			end = min(end, l.own.front().at)
		}
		k, pos := l.feed.read(l.pos, dst[n:], end)
		if k == 0 {
			break
		}
		l.pos = pos
		n += k
	}
	return n
}

// nextPendingLocked takes the next notification in bounded mode. When
// pending has drained it returns to ordered mode and reports false.
func (l *listener[K, T]) nextPendingLocked() (notification[K, T], bool) {
	for l.order.len() > 0 {
		k := l.order.pop()
		s := l.pending[k]
		if s == nil || s.empty() {
			// Added and deleted before the handler saw either.
			delete(l.pending, k)
			continue
		}
		n := s.first
		if s.hasThen {
			// A delete followed by a re-creation: deliver the delete
			// now, and the re-creation when the key comes round again.
			s.first, s.hasThen = s.then, false
			var zero notification[K, T]
			s.then = zero
			l.order.push(k)
		} else {
			delete(l.pending, k)
		}
		return n, true
	}
	// Drained: back to ordered delivery, releasing the order's storage.
	l.pending = nil
	l.order = seqQueue[K]{}
	var zero notification[K, T]
	return zero, false
}

// backlog returns the number of notifications waiting.
func (l *listener[K, T]) backlog() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.waitingLocked()
	for _, s := range l.pending {
		if !s.empty() {
			n++
		}
		if s.hasThen {
			n++
		}
	}
	return n
}

// hasSynced reports whether the informer has synced and this handler has
// been handed every initial-list add.
func (l *listener[K, T]) hasSynced() bool {
	select {
	case <-l.syncedCh:
		return true
	default:
	}
	l.mu.Lock()
	pending := l.initialPending
	l.mu.Unlock()
	if pending == 0 && l.upstream() {
		l.syncedOnce.Do(func() { close(l.syncedCh) })
		return true
	}
	return false
}

// listenerBatch is how many notifications run takes per lock acquisition.
// Taken notifications are out of the backlog's reach (Backlog does not
// count them, bounded mode does not merge them), so it stays small.
const listenerBatch = 32

// run delivers notifications until ctx ends or the listener is stopped.
// Once either happens, no further handler call starts.
func (l *listener[K, T]) run(ctx context.Context) {
	defer close(l.done)
	defer afterFunc(ctx, func() { l.halted.Store(true) })()
	// The batch is copied out of the feed, not read in place: a handler
	// stuck in a call would otherwise keep the chunk it came from, and
	// with it every later chunk, reachable.
	var batch [listenerBatch]notification[K, T]
	for {
		l.hasSynced()
		l.mu.Lock()
		n := l.takeLocked(batch[:])
		l.mu.Unlock()
		if n == 0 {
			select {
			case <-l.wake:
				continue
			case <-l.stopped:
				return
			case <-ctx.Done():
				return
			}
		}
		initial := 0
		for i := range batch[:n] {
			if l.halted.Load() {
				return
			}
			l.call(&batch[i])
			if batch[i].initial {
				initial++
			}
		}
		clear(batch[:n]) // do not keep them reachable
		if initial > 0 {
			l.mu.Lock()
			l.initialPending -= initial
			l.mu.Unlock()
		}
	}
}

// call runs the handler for n, recovering a panic.
func (l *listener[K, T]) call(n *notification[K, T]) {
	defer func() {
		if v := recover(); v != nil {
			l.report(&HandlerPanicError{Value: v, Stack: debug.Stack()})
		}
	}()
	switch n.kind {
	case notifyAdd:
		l.handler.OnAdd(n.obj, n.initial)
	case notifyUpdate:
		l.handler.OnUpdate(n.old, n.obj)
	case notifyDelete:
		l.handler.OnDelete(n.obj, n.unknown)
	}
}

// slot is a key's pending notifications in bounded mode: one, or a delete
// followed by a re-creation (a delete must stay a delete, and the handler
// must also learn of the new object).
type slot[K comparable, T any] struct {
	first   notification[K, T]
	then    notification[K, T]
	hasThen bool
}

func (s *slot[K, T]) empty() bool { return s.first.kind == 0 }

// merge folds n into s and returns how many initial-list adds it dropped
// (each was counted when pushed).
func (s *slot[K, T]) merge(n notification[K, T]) (droppedInitial int) {
	var zero notification[K, T]
	if s.hasThen {
		// s: delete(x), then add(a); the handler saw x.
		if n.kind == notifyDelete {
			// The re-created object was never seen: only the delete of
			// x remains.
			droppedInitial += countInitial(s.then)
			s.then, s.hasThen = zero, false
			return droppedInitial
		}
		return absorbInto(&s.then, n)
	}
	switch s.first.kind {
	case notifyAdd:
		// The handler has not seen the object yet.
		if n.kind == notifyDelete {
			droppedInitial = countInitial(s.first)
			s.first = zero
			return droppedInitial
		}
		return absorbInto(&s.first, n)
	case notifyUpdate:
		// The handler saw s.first.old.
		if n.kind == notifyDelete {
			s.first = n
			return 0
		}
		return absorbInto(&s.first, n)
	case notifyDelete:
		if n.kind == notifyDelete {
			// A second delete: keep the one that knows the final state.
			if s.first.unknown && !n.unknown {
				s.first = n
			}
			return 0
		}
		s.then = notification[K, T]{kind: notifyAdd, key: n.key, obj: n.obj, initial: n.initial}
		s.hasThen = true
	}
	return 0
}

// absorbInto makes the pending add or update dst carry the newer state of
// the add or update n, and returns 1 if that dropped an initial-list add.
func absorbInto[K comparable, T any](dst *notification[K, T], n notification[K, T]) int {
	dst.obj = n.obj
	if !n.initial {
		return 0
	}
	if dst.kind == notifyAdd && !dst.initial {
		dst.initial = true
		return 0
	}
	return 1
}

func countInitial[K comparable, T any](n notification[K, T]) int {
	if n.initial {
		return 1
	}
	return 0
}
