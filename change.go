package mirror

import "fmt"

// Origin says what made the informer notify a handler: a change the
// watch saw, the first list, a later relist, or a periodic resync. It is
// what a controller needs to rank work: a live change is urgent, the
// rest is background (see the workqueue package's priorities).
type Origin uint8

const (
	// OriginLive is a change a watch event brought: an addition, update
	// or deletion, an object evicted because its state cannot be
	// represented, and the
	// deletion and addition of a key that a watch event shows naming
	// another object (see InformerOptions.SameObject).
	OriginLive Origin = iota + 1
	// OriginInitialList is the informer's first list: its objects, and,
	// for an informer resumed from a checkpoint, the changes that list
	// finds against the checkpoint; a handler added late is handed the
	// cache with this origin, and so is a handler handed a checkpoint's
	// objects.
	OriginInitialList
	// OriginRelist is a later list, made when the watch could not resume
	// (its history was compacted, say): the changes it finds, the
	// deletions it infers (finalStateUnknown), and the deletion and
	// addition of a key it finds naming another object. Such changes
	// happened while the informer was not watching, so they may be
	// older than they look.
	OriginRelist
	// OriginResync is a periodic resync (HandlerOptions.ResyncPeriod): an
	// object offered again unchanged, as an update from itself to
	// itself. A relist's objects found at the version cached (see
	// InformerOptions.ResourceVersion), which go, like a resync, only to
	// the handlers due for one, have this origin too.
	OriginResync
)

// String returns "live", "initial-list", "relist" or "resync".
func (o Origin) String() string {
	switch o {
	case OriginLive:
		return "live"
	case OriginInitialList:
		return "initial-list"
	case OriginRelist:
		return "relist"
	case OriginResync:
		return "resync"
	}
	return fmt.Sprintf("Origin(%d)", uint8(o))
}

// urgency ranks origins for a handler in bounded mode, whose pending
// notifications for a key merge into one (see HandlerOptions.MaxBacklog):
// the merged notification keeps the most urgent origin of those it
// stands for, so that a queue fed by the handler never ranks a live
// change behind background work because a resync came after it. A
// relist ranks above the initial list: it brings changes the informer
// missed, which have waited already.
func (o Origin) urgency() int {
	switch o {
	case OriginLive:
		return 4
	case OriginRelist:
		return 3
	case OriginInitialList:
		return 2
	case OriginResync:
		return 1
	}
	return 0
}

// moreUrgent returns the more urgent of a and b.
func moreUrgent(a, b Origin) Origin {
	if b.urgency() > a.urgency() {
		return b
	}
	return a
}

// Change is one notification, as a function registered with
// Informer.AddChangeHandler receives it: what Handler's OnAdd, OnUpdate
// and OnDelete are told, with the object's key and the notification's
// origin. It hands a controller's queue the key without computing it
// again, and the origin from which to rank the work.
type Change[K comparable, T any] struct {
	// Type says which of OnAdd, OnUpdate, OnDelete this stands for.
	Type DeltaType
	// Origin says what made the informer notify (see Origin).
	Origin Origin
	// FinalStateUnknown is OnDelete's finalStateUnknown: set on a
	// Deleted whose Object may be older than the object's final
	// state.
	FinalStateUnknown bool
	// Key is the object's key in the informer's cache.
	Key K
	// Old is, for Updated, the state the handler was last told
	// of (OnUpdate's oldObj); the zero T otherwise.
	Old T
	// Object is the state after the change; for Deleted, the
	// object's last state, as OnDelete's obj.
	Object T
}
