package mirror

import (
	"fmt"
	"time"

	"github.com/listwatch/mirror/internal/textcap"
)

// Handler receives an Informer's notifications. Each registered Handler
// is called on a goroutine of its own, one call at a time, so a slow
// Handler delays only itself. Informer.AddChangeHandler also gives each
// notification's key and Origin.
type Handler[T any] interface {
	// OnAdd is called when an object enters the cache, or, for a handler
	// added to a running informer, for every object already cached.
	// isInInitialList reports that the object came with the initial list
	// (or that replay).
	OnAdd(obj T, isInInitialList bool)

	// OnUpdate is called when a cached object changes, and on a periodic
	// resync (then oldObj and newObj are the same object).
	OnUpdate(oldObj, newObj T)

	// OnDelete is called when an object leaves the cache; obj is its last
	// state (for a key-only deletion, the state the cache held).
	// finalStateUnknown reports that its deletion was not observed: a
	// relist no longer lists it, its key names another object (see
	// InformerOptions.SameObject), or its state cannot be represented
	// (see source.Error); obj may then be older than its final state.
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

// HandlerOptions tunes one handler's registration. The zero value
// resyncs with the informer's period and has an unbounded backlog.
type HandlerOptions struct {
	// Name identifies the handler in logs and in a *HandlerPanicError.
	Name string

	// ResyncPeriod is how often the handler is offered every cached object
	// again, as OnUpdate(obj, obj), counted from the informer's first
	// sync (or the registration, if later). A late round does not move
	// the next, and stands for any it missed; rounds go on while the
	// source is unreachable. Zero means the informer's
	// ResyncPeriod; negative means never; under one second means one.
	ResyncPeriod time.Duration

	// ChangesOnly keeps a checkpoint's objects (see CheckpointOptions)
	// from a handler registered before Run has loaded it: the handler is
	// handed only the changes since, each once, whether the informer
	// watches from the checkpoint's version or lists because the source
	// no longer has it. A handler added later is handed the cache as
	// always; without a checkpoint, the first list as usual.
	ChangesOnly bool

	// MaxBacklog bounds the handler's backlog: past MaxBacklog waiting
	// notifications, they collapse to one per key (the latest state; a
	// delete stays a delete; an update's old object is the one the
	// handler last saw) until it catches up, so memory is bounded by keys,
	// but different keys may arrive out of source order. Zero means
	// unbounded: every notification is delivered, in order.
	MaxBacklog int

	// StuckAfter is how long a call of the handler may last before it is
	// logged as stuck, at Warn with Name and the method, and again every
	// StuckAfter until it returns (see HandlerStats.StuckFor). A log may
	// come up to two seconds late. Zero means 30 seconds; negative never.
	StuckAfter time.Duration
}

// HandlerPanicError reports a handler that panicked. The notification
// is dropped for that handler only, which goes on receiving the rest.
// errors.As finds its *PanicError too.
type HandlerPanicError struct {
	// Handler is HandlerOptions.Name.
	Handler string
	PanicError
}

// Error implements error.
func (e *HandlerPanicError) Error() string {
	if e.Handler != "" {
		return fmt.Sprintf("mirror: event handler %q panicked: %s", textcap.Clip(e.Handler, maxNameText), panicText(e.Value))
	}
	return "mirror: event handler panicked: " + panicText(e.Value)
}

// Unwrap returns the panic.
func (e *HandlerPanicError) Unwrap() error { return &e.PanicError }

// minResyncPeriod is the shortest resync period a handler can have: a
// tighter loop would mostly burn CPU re-delivering unchanged objects.
const minResyncPeriod = time.Second
