package workqueue

import "strconv"

// Priority orders the keys waiting in a Queue: a key of higher priority is
// handed out before one of lower priority (unless the latter has aged, see
// Options.MaxWait), and keys of equal priority in the order they were
// queued. Any int is a priority; the constants name those an informer's
// notifications map to.
type Priority int

// The priorities of the notifications' origins. Gaps between them leave
// room for callers' own.
const (
	// PriorityLive is the priority Add gives: a change the source just
	// made, or an object whose identity changed.
	PriorityLive Priority = 0
	// PriorityBackground is for the keys of an initial list or a relist:
	// work that must be done, but behind live changes.
	PriorityBackground Priority = -100
	// PriorityResync is for the keys of a periodic resync, which
	// re-checks what has not changed.
	PriorityResync Priority = -200
)

// String returns "live", "background" or "resync" for the named
// priorities and the number for others, as a metric label uses it.
func (p Priority) String() string {
	switch p {
	case PriorityLive:
		return "live"
	case PriorityBackground:
		return "background"
	case PriorityResync:
		return "resync"
	}
	return strconv.Itoa(int(p))
}
