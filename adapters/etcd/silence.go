package etcd

import (
	"context"
	"fmt"
	"time"
)

// A watch of a quiet prefix hears nothing from etcd for as long as nobody
// writes under it, so silence alone tells nothing; a progress request does:
// etcd answers it on the watch's stream once the watch has caught up. A
// watch therefore asks when it has heard nothing for one progress interval,
// and asks again at every step while it still hears nothing, because etcd
// drops (does not defer) a request that comes while the watch is catching
// up, which it does within its next pass over such watches, every 100 ms.
// A member that answers does so within a round trip; a watch that has heard
// nothing for a second interval counts its member as gone. That covers both
// ways a member goes quiet: a paused one takes the requests and never
// answers; to one whose connection is lost the client sends nothing at all
// while it reconnects, and a progress request waits for the reconnection,
// which is why requests go through a goroutine of their own (probe) and
// never hold up Next. Waiting longer than two intervals would only make
// the program learn later that its mirror is behind.
//
// Silence is counted in steps of a quarter interval: each tick that finds
// nothing heard since the one before adds a step, and one that finds
// something starts again from zero. So the first ask goes out between one
// and one and a quarter intervals after etcd's last message, and the watch
// ends between two and two and a quarter (10 to 11.25 s with the default
// 5 s). A finer step would wake an idle watch more often for little gain.
// Counting ticks rather than reading the clock on every response keeps the
// cost per response to one store, and a caller that is slow to call Next
// costs at most one step per tick missed, as a timer fires once.
const (
	stepsPerInterval = 4
	// askSteps is the silence, in steps, after which a watch asks.
	askSteps = stepsPerInterval
	// silentSteps is the silence, in steps, after which a watch ends.
	silentSteps = 2 * stepsPerInterval
)

// silence is a watcher's silence accounting. The prober's goroutine uses
// interval and asks; everything else belongs to the goroutine calling Next.
type silence struct {
	// ticker fires every step while the watch is open; nil when progress
	// requests are off.
	ticker   *time.Timer
	interval time.Duration
	step     time.Duration
	// heard is set by every response; quiet counts the ticks in a row
	// that found it unset.
	heard bool
	quiet int
	// eager makes the watch ask at every silent step, not only after an
	// interval: set when it has just started again at from-1 (see tick),
	// whose only sign of life is the answer to an ask.
	eager bool

	// asks holds a pending request for the prober, which ends when
	// proberCancel is called and then closes proberDone.
	asks         chan struct{}
	proberCancel context.CancelFunc
	proberDone   chan struct{}
}

// startProber starts the goroutine that sends w's progress requests, and
// sets the silence accounting's pace from interval.
func (w *watcher[V]) startProber(interval time.Duration) {
	w.interval = interval
	w.step = max(interval/stepsPerInterval, 1)
	w.asks = make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(w.clientCtx)
	w.proberCancel, w.proberDone = cancel, make(chan struct{})
	go w.probe(ctx, w.asks, w.proberDone)
}

// probe sends a progress request for each ask until ctx ends. A request
// waits while the client reconnects the stream; its timeout lets the ask
// pending behind it try again.
func (w *watcher[V]) probe(ctx context.Context, asks <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	for {
		select {
		case <-ctx.Done():
			return
		case <-asks:
		}
		if ctx.Err() != nil { // both were ready
			return
		}
		rctx, cancel := context.WithTimeout(ctx, w.interval)
		// An error is not fatal: the silence count tells a stream
		// that stays down.
		_ = w.lw.client.RequestProgress(rctx)
		cancel()
	}
}

// stopProber ends the prober, if any, and waits until it has returned.
func (w *watcher[V]) stopProber() {
	if w.proberCancel != nil {
		w.proberCancel()
		<-w.proberDone
	}
}

// ask has the prober send a progress request, without waiting: if one is
// pending already, that one will do.
func (w *watcher[V]) ask() {
	select {
	case w.asks <- struct{}{}:
	default:
	}
}

// tick runs every step. It ends the watch with an error wrapping
// source.ErrUnavailable once it has heard nothing for silentSteps, and asks
// for progress once it has heard nothing for askSteps.
//
// etcd holds back its answer while its store is behind the start of any
// watch on the stream, and a watch started at from is ahead of a store that
// nothing has been written to since from-1. Such a store may stay idle for
// good, so a watch that started there and has heard nothing, not even an
// answer to its ask a step earlier, starts again at from-1, within what is
// left of its allowance; etcd catches the new watch up within 100 ms and
// answers after that. A store that has moved on answers the first ask, and
// then the watch never restarts: on a busy cluster, a watch from from-1
// would make etcd read every revision written since.
func (w *watcher[V]) tick(ctx context.Context) error {
	if w.heard {
		w.heard, w.quiet, w.eager = false, 0, false
		w.ticker.Reset(w.step)
		return nil
	}
	w.quiet++
	switch {
	case w.quiet >= silentSteps:
		return w.noAnswer(ctx, fmt.Sprintf("etcd did not answer for %v: no event, no answer to progress requests",
			time.Duration(w.quiet)*w.step), nil)
	case w.ahead && w.quiet > askSteps:
		w.ahead = false
		// A member that is gone does not accept the new watch: it gets
		// what is left of the allowance, not more.
		if err := w.open(ctx, w.from-1, w.allowance(), time.Duration(w.quiet)*w.step); err != nil {
			return err
		}
		// etcd accepted the watch: that was a message. The new watch
		// is not caught up yet, so its answer may take a few asks.
		w.quiet, w.eager = 0, true
	case w.eager || w.quiet >= askSteps:
		w.ask()
	}
	w.ticker.Reset(w.step)
	return nil
}

// allowance is how long the watch may still hear nothing before it ends,
// bounded by Options.RequestTimeout, as the start of a watch is.
func (w *watcher[V]) allowance() time.Duration {
	d := time.Duration(silentSteps-w.quiet) * w.step
	if t := w.lw.opts.requestTimeout(); t > 0 {
		d = min(d, t)
	}
	return d
}
