package mirror

import "github.com/listwatch/mirror/source"

// position is where a queued event leaves the source's history: at
// version rv ("" if the event does not say), partway through the change
// made at rv if more of its events follow (Event.More).
type position struct {
	rv   string
	more bool
}

// at returns the position ev leaves the source's history at.
func at[T any](ev source.Event[T]) position { return position{rv: ev.ResourceVersion, more: ev.More} }

// partialChange tracks whether a cache or queue holds part of a change the
// source made in one step, and lets a checkpoint wait for the rest: a
// checkpoint taken between two events of one change would claim the whole
// change at its version, and an informer resumed from it, watching from
// that version, would never be given the rest. Its owner's lock guards it.
type partialChange struct {
	open bool
	// done is closed when the open change completes; nil until someone
	// waits.
	done chan struct{}
}

// set records the position of the last event taken, if it has a version.
func (p *partialChange) set(pos position) {
	if pos.rv == "" {
		return
	}
	if pos.more {
		p.begin()
	} else {
		p.end()
	}
}

// begin records that a change is partly taken.
func (p *partialChange) begin() { p.open = true }

// end records that the change partly taken, if any, has been taken whole.
func (p *partialChange) end() {
	if p.done != nil {
		close(p.done)
		p.done = nil
	}
	p.open = false
}

// wait returns nil if no change is partly taken, or else a channel closed
// once it has been taken whole.
func (p *partialChange) wait() <-chan struct{} {
	if !p.open {
		return nil
	}
	if p.done == nil {
		p.done = make(chan struct{})
	}
	return p.done
}
