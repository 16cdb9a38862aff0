package mirror

import (
	"sync/atomic"
	"time"
)

// defaultStuckAfter is HandlerOptions.StuckAfter's default.
const defaultStuckAfter = 30 * time.Second

// stuckCheckPeriod is how often the watchdog looks at the handlers' calls
// in progress.
const stuckCheckPeriod = time.Second

// stuckAfter returns the listener's stuckAfter for HandlerOptions'
// value: zero for never.
func stuckAfter(opt time.Duration) time.Duration {
	switch {
	case opt == 0:
		return defaultStuckAfter
	case opt < 0:
		return 0
	}
	return opt
}

// watchState is what the watchdog knows of a listener's call in
// progress. Only the watchdog's goroutine uses it, but for since.
type watchState struct {
	call   uint64    // the call seen at the last check (state & stateCall)
	seen   time.Time // when the watchdog first saw it
	logged int       // how many of its StuckAfter periods were logged
	// since is seen, for a call logged as stuck, as a time after the
	// processor's epoch; the listener and Stats read it once they find
	// stateStuck set, which is set after it.
	since atomic.Int64
}

// watch is the processor's watchdog: it logs each handler whose call has
// lasted its StuckAfter, and again each StuckAfter until it returns. It
// costs the listeners nothing but their state word: it looks at every
// running listener's once every stuckCheckPeriod, and measures a call
// from when it first saw it. It returns once the processor has stopped
// and no listener runs, so it keeps naming a stuck handler while Run,
// whose context has ended, waits for it.
func (p *processor[K, T]) watch() {
	t := time.NewTicker(stuckCheckPeriod)
	defer t.Stop()
	var running []*listener[K, T]
	for {
		select {
		case <-t.C:
		case <-p.watchWake:
		}
		p.mu.RLock()
		running = append(running[:0], p.running...)
		stopped := p.stopped
		p.mu.RUnlock()
		if stopped && len(running) == 0 {
			return
		}
		// Outside the lock: the logger is the user's.
		now := time.Now()
		for _, l := range running {
			p.checkStuck(l, now, stopped)
		}
		clear(running)
	}
}

// checkStuck logs l's call in progress if it has lasted l's stuckAfter
// since it was first seen, or another stuckAfter since it was logged.
func (p *processor[K, T]) checkStuck(l *listener[K, T], now time.Time, stopped bool) {
	w := &l.watch
	v := l.state.Load()
	call := v & stateCall
	if l.stuckAfter <= 0 || call == 0 {
		w.call = 0
		return
	}
	if call != w.call {
		w.call, w.seen, w.logged = call, now, 0
		return
	}
	d := now.Sub(w.seen)
	if d < l.stuckAfter*time.Duration(w.logged+1) {
		return
	}
	if w.logged == 0 {
		w.since.Store(int64(w.seen.Sub(p.epoch)))
		for !l.state.CompareAndSwap(v, v|stateStuck) {
			if v = l.state.Load(); v&stateCall != call {
				return // it has just returned
			}
		}
	}
	w.logged = int(d / l.stuckAfter)
	msg := "mirror: handler has not returned"
	if stopped {
		msg = "mirror: handler has not returned; Run waits for it"
	}
	p.logger.Warn(msg, "handler", l.name, "call", l.callName(call), "for", d.Round(time.Millisecond))
}

// returned logs the return of l's call was, which was logged as stuck.
func (p *processor[K, T]) returned(l *listener[K, T], was uint64) {
	p.logger.Warn("mirror: handler returned", "handler", l.name, "call", l.callName(was), "after", p.stuckFor(l).Round(time.Millisecond))
}

// stuckFor returns how long l's call logged as stuck has lasted.
func (p *processor[K, T]) stuckFor(l *listener[K, T]) time.Duration {
	return time.Since(p.epoch) - time.Duration(l.watch.since.Load())
}

// exited forgets l, whose goroutine is returning, and tells the watchdog.
func (p *processor[K, T]) exited(l *listener[K, T]) {
	p.mu.Lock()
	for i, x := range p.running {
		if x == l {
			p.running = append(p.running[:i], p.running[i+1:]...)
			break
		}
	}
	p.mu.Unlock()
	p.wakeWatchdog()
}

func (p *processor[K, T]) wakeWatchdog() {
	select {
	case p.watchWake <- struct{}{}:
	default:
	}
}

// callName names the handler method of a call in the listener's state
// word.
func (l *listener[K, T]) callName(state uint64) string {
	kind := notifyKind(state >> stateKindShift & 3)
	if l.byChange && kind != 0 {
		return "change(" + DeltaType(kind).String() + ")"
	}
	switch kind {
	case notifyAdd:
		return "OnAdd"
	case notifyUpdate:
		return "OnUpdate"
	case notifyDelete:
		return "OnDelete"
	}
	return "none"
}
