package mirror

import (
	"fmt"
	"time"
)

// Handler receives an Informer's notifications. Each registered Handler
// is called from a goroutine of its own, one call at a time, so a Handler
// needs no locking of its own unless it shares state with other code; and a
// slow Handler delays only itself. To be told each notification's key and
// where it came from (see Origin), register a function of Changes with
// Informer.AddChangeHandler instead.
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
	// object left the mirror without its deletion being observed: a
	// relist no longer lists it, its key now names another object (see
	// InformerOptions.SameObject), or the source holds a state of it the
	// mirror cannot represent (a value that fails to decode; see
	// source.Error). obj is then the last state the cache held, which may be
	// older than the object's real final state.
	OnDelete(obj T, finalStateUnknown bool)
}

// HandlerFuncs adapts functions to a Handler. A nil function ignores its
// notifications.
type HandlerFuncs[T any] struct {
	// AddFunc, if set, is called for OnAdd.
	AddFunc func(obj T, isInInitialList bool)
	// UpdateFunc, if set, is called for OnUpdate.
	UpdateFunc func(oldObj, newObj T)
	// DeleteFunc, if set, is called for OnDelete.
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
	// Name identifies the handler in logs and in a *HandlerPanicError.
	Name string

	// ResyncPeriod is how often the handler is offered every cached object
	// again, as OnUpdate(obj, obj): once every period, counted from the
	// informer's first sync, or from the registration for a handler added
	// later, whatever the periods of other handlers. A round that comes
	// late (the informer was busy) does not move the next; one late by a
	// period or more stands for those it missed. Rounds go on while the
	// source is unreachable: they offer the cache as it is. Zero means the
	// informer's ResyncPeriod; a negative value means never. Periods under
	// one second are raised to one second.
	ResyncPeriod time.Duration

	// ChangesOnly, for an informer resumed from a checkpoint (see
	// CheckpointOptions), keeps the checkpoint's objects from the handler:
	// it is handed only the changes since the checkpoint, as for a
	// handler that keeps state of its own along with the checkpoint. It
	// applies to handlers registered before Run has loaded the checkpoint,
	// while it loads it too; a handler added later is handed the cache as
	// it is then, as always. Without a checkpoint to resume from, the
	// handler gets the informer's first list as usual.
	ChangesOnly bool

	// MaxBacklog bounds the handler's backlog. Once more than MaxBacklog
	// notifications wait for the handler, they collapse to at most one
	// pending notification per key until the handler catches up: the
	// latest state wins, a delete stays a delete, and an update's old
	// object is the one the handler last saw. Memory is then bounded by
	// the number of keys, not of events; the price is that notifications
	// for different keys may arrive out of source order. Zero means
	// unbounded: every notification is delivered, in order.
	MaxBacklog int

	// StuckAfter is how long a call of the handler may last before the
	// informer logs it (at Warn, through InformerOptions.Logger) as
	// stuck, with the handler's Name, the method and how long the call
	// has lasted; it logs it again every StuckAfter until the call
	// returns, and then that it returned (see also HandlerStats.StuckFor).
	// Calls are looked at once a second and measured from when one was
	// first seen, so a log may come up to two seconds late, and the
	// durations it gives fall short by up to a second. Zero means 30
	// seconds; a negative value means never.
	StuckAfter time.Duration
}

// HandlerPanicError reports a handler that panicked. The panic is
// recovered; the notification that caused it is dropped for that handler
// only, and the handler goes on receiving notifications. Its Value and
// Stack are the panic's; errors.As finds its *PanicError too.
type HandlerPanicError struct {
	// Handler is the handler's name (HandlerOptions.Name); empty if it
	// has none.
	Handler string
	PanicError
}

// Error implements error.
func (e *HandlerPanicError) Error() string {
	if e.Handler != "" {
		return fmt.Sprintf("mirror: event handler %q panicked: %s", e.Handler, panicText(e.Value))
	}
	return "mirror: event handler panicked: " + panicText(e.Value)
}

// Unwrap returns the panic.
func (e *HandlerPanicError) Unwrap() error { return &e.PanicError }

// minResyncPeriod is the shortest resync period a handler can have: a
// tighter loop would mostly burn CPU re-delivering unchanged objects.
const minResyncPeriod = time.Second
