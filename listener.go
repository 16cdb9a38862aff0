package mirror

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

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
	// Exactly one of h (AddEventHandler) and f (AddChangeHandler) is set.
	// A Handler is called directly rather than through a function of
	// changes: with many handlers, the Change built and the extra
	// indirect call per notification showed in the informer's CPU.
	h Handler[T]
	f func(Change[K, T])
	// byChange says that f is set, for the watchdog's logs.
	byChange     bool
	name         string // HandlerOptions.Name
	changesOnly  bool   // HandlerOptions.ChangesOnly
	report       func(error)
	upstream     func() bool // the informer has synced
	resyncPeriod time.Duration
	nextResync   time.Time // guarded by processor.mu
	// stuckAfter is how long a call may last before the watchdog logs
	// it (HandlerOptions.StuckAfter); zero means never.
	stuckAfter time.Duration
	proc       *processor[K, T]

	// delivered and panics count handler calls, for Informer.Stats.
	delivered, panics atomic.Int64
	// stampNext is the first of the processor's stamps this listener has
	// not passed yet; it belongs to run.
	stampNext  uint64
	maxBacklog int

	wake     chan struct{} // capacity 1: a pending wake-up
	stopped  chan struct{} // closed by stop
	done     chan struct{} // closed when run returns
	stopOnce sync.Once

	// state says whether the listener is halted and which call, if
	// any, is in progress (see beginCall). calls numbers the calls, and
	// cur is the call run last left in state; both belong to run. watch
	// is the watchdog's (see watchdog.go).
	state atomic.Uint64
	calls uint64
	cur   uint64
	watch watchState

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
	// replaying is the state the listener is being handed, if any (see
	// replay): before its own queue and the feed from its place on.
	replaying *replayCursor[K, T]
	// removed is set by stop: nothing is queued any more.
	removed bool
	pending map[K]*slot[K, T] // bounded mode, one slot per key
	order   seqQueue[K]       // bounded mode, keys in first-pending order
	// initialPending counts undelivered initial-list adds.
	initialPending int
	// sinceCheckpoint is set on a listener that, registered with
	// ChangesOnly before its informer resumed from a checkpoint whose
	// version the source no longer had, is told what changed since that
	// checkpoint while the others are handed the listed state: it reads
	// the feed's notifications for audienceChanges, the others those
	// for audienceState (see checkpoint_relist.go).
	sinceCheckpoint bool
}

// ownNotification is a notification for one listener only, delivered
// after the feed's notifications numbered below at and before the others.
type ownNotification[K comparable, T any] struct {
	at uint64
	n  notification[K, T]
}

func newListener[K comparable, T any](h Handler[T], f func(Change[K, T]), resync time.Duration, maxBacklog int, report func(error), upstream func() bool) *listener[K, T] {
	return &listener[K, T]{
		h:            h,
		f:            f,
		byChange:     f != nil,
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
		l.halt()
		close(l.stopped)
		l.mu.Lock()
		defer l.mu.Unlock()
		l.removed = true
		l.pos, l.end = feedPos[K, T]{}, 0
		l.own, l.order = seqQueue[ownNotification[K, T]]{}, seqQueue[K]{}
		l.replaying = nil
		l.pending = nil
	})
}

// waitStopped waits, after stop, until the handler call in progress, if
// any, has returned: then it returns nil. If ctx ends first, it returns
// ctx.Err().
func (l *listener[K, T]) waitStopped(ctx context.Context) error {
	if l.state.Load()&stateCall == 0 {
		return nil // halted between calls: none begins any more
	}
	select {
	case <-l.done:
		return nil
	case <-ctx.Done():
		select {
		case <-l.done:
			return nil
		default:
			return ctx.Err()
		}
	}
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

// waitingLocked is the number of notifications waiting outside pending.
func (l *listener[K, T]) waitingLocked() int {
	n := int(l.end-l.pos.seq) + l.own.len()
	if l.replaying != nil {
		n += l.replaying.left()
	}
	return n
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
// the state it is being handed, its own queue and the feed, in the order
// they were distributed, into dst and returns how many it moved.
func (l *listener[K, T]) takeOrderedLocked(dst []notification[K, T]) int {
	n := 0
	for n < len(dst) {
		if l.replaying != nil {
			if k := l.takeReplayLocked(dst[n:]); k > 0 {
				n += k
				continue
			}
		}
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
		if l.replaying != nil {
			end = min(end, l.replaying.at)
		}
		k, pos := l.feed.read(l.pos, dst[n:], end)
		if k == 0 {
			break
		}
		l.pos = pos
		n += l.ownAudienceLocked(dst[n : n+k])
	}
	return n
}

// ownAudienceLocked keeps, at the front of ns, the notifications read
// off the feed that are for this listener (see audience), and returns how
// many it kept.
func (l *listener[K, T]) ownAudienceLocked(ns []notification[K, T]) int {
	kept := 0
	for i := range ns {
		if a := ns[i].audience; a == audienceAll || (a == audienceChanges) == l.sinceCheckpoint {
			if kept != i {
				ns[kept] = ns[i]
			}
			kept++
		} else if ns[i].initial {
			// Counted by publish for every listener.
			l.initialPending--
		}
	}
	clear(ns[kept:])
	return kept
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
// Once either happens, no further handler call begins.
func (l *listener[K, T]) run(ctx context.Context) {
	defer close(l.done)
	defer afterFunc(ctx, l.halt)()
	// The batch is copied out of the feed, not read in place: a handler
	// stuck in a call would otherwise keep the chunk it came from, and
	// with it every later chunk, reachable.
	var batch [listenerBatch]notification[K, T]
	for {
		l.hasSynced()
		l.mu.Lock()
		n := l.takeLocked(batch[:])
		pos := l.pos.seq
		l.mu.Unlock()
		if m := l.proc.metrics; m != nil && n > 0 {
			l.proc.stamps.passed(&l.stampNext, pos, time.Now, func(d time.Duration) { m.Delivered(l.name, d) })
		}
		if n == 0 {
			l.idle()
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
			if !l.beginCall(batch[i].kind) {
				l.delivered.Add(int64(i))
				return
			}
			l.deliver(&batch[i])
			if batch[i].initial {
				initial++
			}
		}
		l.delivered.Add(int64(n))
		clear(batch[:n]) // do not keep them reachable
		if initial > 0 {
			l.mu.Lock()
			l.initialPending -= initial
			l.mu.Unlock()
		}
	}
}

// The listener's state word: whether it is halted, and the call in
// progress, if any, as its number and kind. One word, so that claiming a
// call and finding the listener halted are one atomic step: once halt
// has run, no call begins, and a call that had begun is visible to stop
// and to the watchdog. So that a call costs one atomic operation, a call
// stays in the word after it returns, until the listener claims the next
// or goes idle, which it does at once.
const (
	stateHalted uint64 = 1 << 0
	// stateStuck is set by the watchdog on a call it logged as stuck.
	stateStuck     uint64 = 1 << 1
	stateKindShift        = 2 // 2 bits: the call's notifyKind
	stateNumShift         = 4 // the rest: the call's number
	stateCall             = ^(stateHalted | stateStuck)
)

// beginCall ends the listener's last call and claims the handler call
// that delivers a notification of kind, unless the listener is halted.
func (l *listener[K, T]) beginCall(kind notifyKind) bool {
	l.calls++
	next := l.calls<<stateNumShift | uint64(kind)<<stateKindShift
	if l.state.CompareAndSwap(l.cur, next) {
		l.cur = next
		return true
	}
	return l.settle(next)
}

// idle ends the listener's last call, before it waits for more.
func (l *listener[K, T]) idle() {
	if l.cur == 0 {
		return
	}
	if l.state.CompareAndSwap(l.cur, 0) {
		l.cur = 0
		return
	}
	l.settle(0)
}

// settle is the way of beginCall and idle when the state word is not as
// the listener left it: the watchdog logged its last call as stuck, or
// it was halted. It ends the last call, logging its return if it was
// logged as stuck, and makes next the call in progress unless the
// listener is halted; it reports whether it did.
func (l *listener[K, T]) settle(next uint64) bool {
	for {
		was := l.state.Load()
		now := next
		if was&stateHalted != 0 {
			now = stateHalted
		}
		if l.state.CompareAndSwap(was, now) {
			if was&stateStuck != 0 {
				l.proc.returned(l, was)
			}
			l.cur = now & stateCall
			return now == next
		}
	}
}

// halt makes sure no handler call begins any more.
func (l *listener[K, T]) halt() { l.state.Or(stateHalted) }

// deliver runs the handler for n, recovering a panic.
func (l *listener[K, T]) deliver(n *notification[K, T]) {
	defer func() {
		if v := recover(); v != nil {
			l.panics.Add(1)
			l.report(&HandlerPanicError{Handler: l.name, PanicError: *panicked(v)})
		}
	}()
	if l.f != nil {
		l.f(Change[K, T]{Type: DeltaType(n.kind), Origin: n.origin, FinalStateUnknown: n.unknown, Key: n.key, Old: n.old, Object: n.obj})
		return
	}
	switch n.kind {
	case notifyAdd:
		l.h.OnAdd(n.obj, n.initial)
	case notifyUpdate:
		l.h.OnUpdate(n.old, n.obj)
	case notifyDelete:
		l.h.OnDelete(n.obj, n.unknown)
	}
}
