package mirror

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/listwatch/mirror/source"
)

// shortWatch is how long a watch must last, unless it delivered an event,
// to count as a working one. A source that keeps closing watches at once
// would otherwise make the Reflector spin on Watch calls.
const shortWatch = time.Second

// errVeryShortWatch is reported for a watch that ended (io.EOF) in under
// shortWatch without delivering an event.
var errVeryShortWatch = errors.New("very short watch: ended in under a second with no event")

// errNoWatcher is reported when a ListWatcher's Watch returns neither a
// Watcher nor an error.
var errNoWatcher = errors.New("nil Watcher and nil error from Watch")

// watch applies the events of w, if not nil, and then of new watches from
// the last version seen, until a relist is needed or ctx is done. It
// returns whether the relist may start at once.
func (r *Reflector[T]) watch(ctx context.Context, w source.Watcher[T]) (relistNow bool) {
	start := time.Now()
	// restart, once a watch has ended, counts the next watch opened as a
	// restart, for the reason the last one ended.
	var restart *atomic.Int64
	for {
		rv := r.lastVersion()
		if w == nil {
			start = time.Now()
			r.attemptStart = start
			var err error
			w, err = r.openWatch(ctx, rv, false)
			if err != nil {
				if ctx.Err() != nil {
					return false
				}
				if !r.watchFailed(ctx, rv, rv, err) {
					return r.relistAfter(err)
				}
				restart = &r.stats.restartsUnavailable
				continue
			}
			r.stats.watches.Add(1)
			r.reachable()
			// A watch from the last complete version brings the change
			// the last one broke inside of again, from its start.
			r.change.skip = r.change.passed
			if r.resumed != nil {
				resumed := r.resumed
				r.resumed = nil
				resumed()
			}
			if restart != nil {
				r.stats.watchRestarts.Add(1)
				restart.Add(1)
			}
		}
		n, err := r.consume(ctx, w)
		w.Stop()
		w = nil
		reached := r.lastVersion()
		restart = &r.stats.restartsClosed
		if n > 0 {
			// The source delivered: whatever failed before is over, and
			// the next failure is a new one.
			r.backoff.succeeded()
		}
		switch {
		case ctx.Err() != nil:
			return false
		case errors.Is(err, io.EOF):
			if n == 0 && time.Since(start) < shortWatch {
				restart = &r.stats.restartsShort
				r.fail(&r.stats.watchErrors, r.errorf("%s: %w", watchName(rv, reached), errVeryShortWatch))
				if !r.pause(ctx) {
					return false
				}
			}
		case !r.watchFailed(ctx, rv, reached, err):
			return r.relistAfter(err)
		default:
			restart = &r.stats.restartsUnavailable
		}
	}
}

// watchFailed reports err, which ended a watch from version from after
// it had reached version reached, and pauses if err says the source is
// unavailable. It returns whether to watch again from the last version
// seen; if not, a relist is needed.
func (r *Reflector[T]) watchFailed(ctx context.Context, from, reached string, err error) (rewatch bool) {
	r.fail(&r.stats.watchErrors, r.errorf("%s: %w; %s", watchName(from, reached), err, afterWatchError(err, reached)))
	// An unavailable source still has the history after the version the
	// Reflector holds; a relist would only add load when it comes back.
	return errors.Is(err, source.ErrUnavailable) && r.pause(ctx)
}

// watchName names a watch in an error: by the version it started from
// and, if its events took the Reflector further, the version it reached,
// which is where a new watch starts and what an expiry is about.
func watchName(from, reached string) string {
	if reached == from {
		return fmt.Sprintf("watch from version %q", from)
	}
	return fmt.Sprintf("watch from version %q, reached %q", from, reached)
}

// afterWatchError says what the Reflector does after err ended a watch
// that reached version rv (see watch).
func afterWatchError(err error, rv string) string {
	switch {
	case errors.Is(err, source.ErrUnavailable):
		return fmt.Sprintf("watching again from version %q after a pause", rv)
	case isGone(err):
		return "listing again"
	default:
		return "listing again after a pause"
	}
}

// relistAfter decides how to relist after err ended watching: at once if
// the version is gone, unless the previous relist was for the same reason
// and no event came in since, in which case the source keeps expiring the
// versions it hands out and a pause is due.
func (r *Reflector[T]) relistAfter(err error) (relistNow bool) {
	if errors.Is(err, source.ErrTooLargeResourceVersion) {
		r.setVersionGone()
	}
	if !isGone(err) {
		r.listCause = ListAfterError
		r.expiredRelist = false
		return false
	}
	r.listCause = ListExpired
	relistNow = !r.expiredRelist || r.eventsSinceList > 0
	if !relistNow {
		// The list at the last version succeeded but its version expired
		// again before one event came: the source serves that version
		// from a cache it cannot watch from (a restarted kube-apiserver
		// does this). Only a consistent list breaks the loop.
		r.setVersionGone()
	}
	r.expiredRelist = true
	return relistNow
}

// consume applies the events of w until it ends, and returns how many
// events it applied and the error that ended it.
func (r *Reflector[T]) consume(ctx context.Context, w source.Watcher[T]) (n int, err error) {
	for {
		ev, err := w.Next(ctx)
		if err != nil {
			return n, err
		}
		n++
		r.apply(ev)
	}
}

// apply hands one watch event to the store and records its version. The
// version advances even if the store refused the object: the event was
// seen, and asking for it again would bring the same refusal.
func (r *Reflector[T]) apply(ev source.Event[T]) {
	r.stats.events.Add(1)
	r.eventsSinceList++
	if r.change.repeated(at(ev)) {
		return
	}
	if ev.Type == source.Error {
		// Before the store has the eviction, so that the ErrorHandler
		// has learnt why an object goes before any handler sees it go.
		r.reportSkipped(r.errorf("watch at version %q: %w", ev.ResourceVersion, eventErr(ev)), nil)
	}
	var err error
	r.lockStore()
	switch {
	case r.events != nil && ev.Type >= source.Added && ev.Type <= source.Error:
		err = r.events.event(ev)
	default:
		err = r.applyToStore(ev)
	}
	r.unlockStore()
	if err != nil {
		r.stats.storeErrors.Add(1)
		r.report(r.errorf("%v event at version %q: %w", ev.Type, ev.ResourceVersion, err))
	}
	// An event without a version (an source.Error may have none) says
	// nothing about progress; taking "" would make the next watch start
	// from "now" and miss what came between.
	// Nor does an event with more of its change to come: a watch that
	// broke before the rest came must start again at the change.
	if ev.ResourceVersion != "" && !ev.More {
		r.confirmed(ev.ResourceVersion, ev.Type == source.Bookmark)
	}
	r.change.handed(at(ev))
}

// openChange is the change at the source (see Event.More) that the
// Reflector has handed part of to the store. A watch that breaks inside
// it is opened again from the last complete version, and brings the
// change again from its start: the events the store has had already are
// passed over, or the store would apply them twice, and an informer's
// handlers would see an update from each of those states to itself.
type openChange struct {
	rv string // the change's version; "" if none is open
	// passed counts the change's events handed to the store; skip, how
	// many of those the current watch has yet to bring again.
	passed, skip int
}

// repeated reports whether the event at pos is one of the change's events
// that the store had before the watch broke, brought again by the watch
// since.
func (c *openChange) repeated(pos position) bool {
	if c.skip == 0 || pos.rv == "" {
		return false
	}
	if pos.rv == c.rv && pos.more {
		c.skip--
		return true
	}
	// The source did not bring the change again as Event.More says it
	// must: what it brings now is new, and is handed on.
	*c = openChange{}
	return false
}

// handed records that the event at pos was handed to the store.
func (c *openChange) handed(pos position) {
	switch {
	case pos.rv == "":
	case pos.more:
		if pos.rv != c.rv {
			*c = openChange{rv: pos.rv}
		}
		c.passed++
	default:
		*c = openChange{}
	}
}

// applyToStore hands ev to a store that is not an eventStore, through
// the store's methods.
func (r *Reflector[T]) applyToStore(ev source.Event[T]) error {
	var err error
	switch ev.Type {
	case source.Added:
		err = r.store.Add(ev.Object)
	case source.Updated:
		err = r.store.Update(ev.Object)
	case source.Deleted:
		if ev.KeyOnly && r.keyOnly != nil {
			err = r.keyOnly.DeleteKeyOnly(ev.Object)
		} else {
			err = r.store.Delete(ev.Object)
		}
	case source.Bookmark:
	case source.Error:
		if ev.KeyOnly {
			err = r.evict(ev.Object)
		}
	default:
		err = fmt.Errorf("unknown event type %v", ev.Type)
	}
	return err
}

// eventStore is a store the Reflector hands each watch event whole, with
// its version: the informer's queues are, so that the informer knows
// which version its cache is at once it has applied what they hold.
type eventStore[T any] interface {
	// event takes ev: a change, a bookmark, or an source.Error (to be
	// evicted if KeyOnly), as the Reflector would hand it to the store's
	// other methods.
	event(ev source.Event[T]) error
}

// evict drops the object obj identifies from the store: with Evict where
// the store has it, or else with Delete, which is all a plain store needs.
func (r *Reflector[T]) evict(obj T) error {
	if r.evicter != nil {
		return r.evicter.Evict(obj)
	}
	return r.store.Delete(obj)
}

// openWatch starts a watch from rv, with bookmarks and a random timeout in
// [WatchTimeout, 2*WatchTimeout); initialEvents asks for a streaming list.
func (r *Reflector[T]) openWatch(ctx context.Context, rv string, initialEvents bool) (source.Watcher[T], error) {
	w, err := r.lw.Watch(ctx, source.WatchOptions{
		ResourceVersion:   rv,
		AllowBookmarks:    true,
		SendInitialEvents: initialEvents,
		Timeout:           r.opts.ListWatch.WatchTimeout + rand.N(r.opts.ListWatch.WatchTimeout),
	})
	if err == nil && w == nil {
		// Carrying on would call a nil Watcher.
		err = errNoWatcher
	}
	return w, err
}

// eventErr returns the error an source.Error carries.
func eventErr[T any](ev source.Event[T]) error {
	if ev.Err == nil {
		return errors.New("error event without a cause")
	}
	return ev.Err
}
