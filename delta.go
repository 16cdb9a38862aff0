package mirror

import "fmt"

// DeltaType says what happened to an object.
type DeltaType uint8

const (
	// Added means the object was created at the source.
	Added DeltaType = iota + 1
	// Updated means the object changed at the source.
	Updated
	// Deleted means the object left the source. A Deleted delta with
	// FinalStateUnknown set was inferred by a relist rather than observed.
	Deleted
	// Replaced means a relist listed the object (with
	// DeltaFIFOOptions.EmitDeltaTypeReplaced; Sync otherwise).
	Replaced
	// Sync means the object is unchanged and is being offered again, by a
	// periodic resync or (without EmitDeltaTypeReplaced) by a relist.
	Sync
)

// String returns the name of t in lower case, such as "added".
func (t DeltaType) String() string {
	switch t {
	case Added:
		return "added"
	case Updated:
		return "updated"
	case Deleted:
		return "deleted"
	case Replaced:
		return "replaced"
	case Sync:
		return "sync"
	}
	return fmt.Sprintf("DeltaType(%d)", uint8(t))
}

// Delta is one change to one object.
type Delta[T any] struct {
	// Object is the state after the change; for Deleted, the last state
	// known.
	Object T
	// Type says what happened.
	Type DeltaType
	// FinalStateUnknown is set on a Deleted delta that was inferred, not seen (a
	// relist lacked the object, or it was evicted): Object is the last
	// state known here, and the final state is unknown.
	FinalStateUnknown bool
}

// Deltas is the history of one key, oldest first.
type Deltas[T any] []Delta[T]

// Oldest returns the oldest delta, or false if d is empty.
func (d Deltas[T]) Oldest() (Delta[T], bool) {
	if len(d) == 0 {
		return Delta[T]{}, false
	}
	return d[0], true
}

// Newest returns the newest delta, or false if d is empty.
func (d Deltas[T]) Newest() (Delta[T], bool) {
	if len(d) == 0 {
		return Delta[T]{}, false
	}
	return d[len(d)-1], true
}
