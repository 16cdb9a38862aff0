package mirror

import "fmt"

// Origin says what made the informer notify a handler, for ranking
// work: a live change is urgent, the rest background.
type Origin uint8

const (
	// OriginLive is a change a watch event brought, including an object
	// evicted as unrepresentable and a key re-created under another
	// object (see InformerOptions.SameObject).
	OriginLive Origin = iota + 1
	// OriginInitialList is the first list (and, after a checkpoint, the
	// changes it finds against it), a checkpoint's objects, and the
	// cache handed to a handler added late.
	OriginInitialList
	// OriginRelist is a later list, made when the watch could not
	// resume: the changes and deletions it finds, which happened while
	// the informer was not watching, so may be older than they look.
	OriginRelist
	// OriginResync is a periodic resync (HandlerOptions.ResyncPeriod),
	// and a relisted object found at the version cached (see
	// InformerOptions.ResourceVersion).
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

// Change is one notification as Informer.AddChangeHandler hands it: a
// Handler call's arguments with the object's key and the Origin.
type Change[K comparable, T any] struct {
	// Type says which of OnAdd, OnUpdate, OnDelete this stands for.
	Type DeltaType
	// Origin says what made the informer notify.
	Origin Origin
	// FinalStateUnknown is OnDelete's finalStateUnknown.
	FinalStateUnknown bool
	// Key is the object's key in the informer's cache.
	Key K
	// Old is, for Updated, OnUpdate's oldObj; the zero T otherwise.
	Old T
	// Object is the state after the change; for Deleted, its last.
	Object T
}
