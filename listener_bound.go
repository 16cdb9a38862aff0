package mirror

// A listener with HandlerOptions.MaxBacklog is bounded: once more
// notifications wait than the bound, it folds what waits into one slot
// per key (pending, in the order keys were first pending) until the
// backlog drains, so that a slow handler holds at most one or two
// notifications a key, and is handed each key's latest state.

// boundLocked keeps a bounded listener within its bound: once the backlog
// passes it, and from then on until pending drains, it folds everything
// waiting into one slot per key.
func (l *listener[K, T]) boundLocked() {
	if l.maxBacklog <= 0 || (l.pending == nil && l.waitingLocked() <= l.maxBacklog) {
		return
	}
	if l.pending == nil {
		l.pending = make(map[K]*slot[K, T], l.waitingLocked())
	}
	var buf [listenerBatch]notification[K, T]
	for {
		n := l.takeOrderedLocked(buf[:])
		if n == 0 {
			return
		}
		for i := range buf[:n] {
			l.mergeLocked(buf[i])
		}
		clear(buf[:n])
	}
}

// mergeLocked folds n into its key's slot. A key has one slot and one
// place in order while it is pending, however often it changes, so both
// stay bounded by the number of keys.
func (l *listener[K, T]) mergeLocked(n notification[K, T]) {
	s := l.pending[n.key]
	if s == nil {
		s = &slot[K, T]{}
		l.pending[n.key] = s
		l.order.push(n.key)
	}
	if s.empty() {
		s.first = n
		return
	}
	l.initialPending -= s.merge(n)
}

// nextPendingLocked takes the next notification in bounded mode. When
// pending has drained it returns to ordered mode and reports false.
func (l *listener[K, T]) nextPendingLocked() (notification[K, T], bool) {
	for l.order.len() > 0 {
		k := l.order.pop()
		s := l.pending[k]
		if s == nil || s.empty() {
			// Added and deleted before the handler saw either.
			delete(l.pending, k)
			continue
		}
		n := s.first
		if s.hasThen {
			// A delete followed by a re-creation: deliver the delete
			// now, and the re-creation when the key comes round again.
			s.first, s.hasThen = s.then, false
			var zero notification[K, T]
			s.then = zero
			l.order.push(k)
		} else {
			delete(l.pending, k)
		}
		return n, true
	}
	// Drained: back to ordered delivery, releasing the order's storage.
	l.pending = nil
	l.order = seqQueue[K]{}
	var zero notification[K, T]
	return zero, false
}

// slot is a key's pending notifications in bounded mode: one, or a delete
// followed by a re-creation (a delete must stay a delete, and the handler
// must also learn of the new object). A notification that others merge
// into keeps the most urgent origin among them (see Origin.urgency).
type slot[K comparable, T any] struct {
	first   notification[K, T]
	then    notification[K, T]
	hasThen bool
}

func (s *slot[K, T]) empty() bool { return s.first.kind == 0 }

// merge folds n into s and returns how many initial-list adds it dropped
// (each was counted when pushed).
func (s *slot[K, T]) merge(n notification[K, T]) (droppedInitial int) {
	var zero notification[K, T]
	if s.hasThen {
		// s: delete(x), then add(a); the handler saw x.
		if n.kind == notifyDelete {
			// The re-created object was never seen: only the delete of
			// x remains.
			droppedInitial += countInitial(s.then)
			s.first.origin = moreUrgent(s.first.origin, moreUrgent(s.then.origin, n.origin))
			s.then, s.hasThen = zero, false
			return droppedInitial
		}
		return absorbInto(&s.then, n)
	}
	switch s.first.kind {
	case notifyAdd:
		// The handler has not seen the object yet.
		if n.kind == notifyDelete {
			droppedInitial = countInitial(s.first)
			s.first = zero
			return droppedInitial
		}
		return absorbInto(&s.first, n)
	case notifyUpdate:
		// The handler saw s.first.old.
		if n.kind == notifyDelete {
			n.origin = moreUrgent(s.first.origin, n.origin)
			s.first = n
			return 0
		}
		return absorbInto(&s.first, n)
	case notifyDelete:
		if n.kind == notifyDelete {
			// A second delete: keep the one that knows the final state.
			origin := moreUrgent(s.first.origin, n.origin)
			if s.first.unknown && !n.unknown {
				s.first = n
			}
			s.first.origin = origin
			return 0
		}
		s.then = notification[K, T]{kind: notifyAdd, key: n.key, obj: n.obj, initial: n.initial, origin: n.origin}
		s.hasThen = true
	}
	return 0
}

// absorbInto makes the pending add or update dst carry the newer state of
// the add or update n, and returns 1 if that dropped an initial-list add.
func absorbInto[K comparable, T any](dst *notification[K, T], n notification[K, T]) int {
	dst.obj = n.obj
	dst.origin = moreUrgent(dst.origin, n.origin)
	if !n.initial {
		return 0
	}
	if dst.kind == notifyAdd && !dst.initial {
		dst.initial = true
		return 0
	}
	return 1
}

func countInitial[K comparable, T any](n notification[K, T]) int {
	if n.initial {
		return 1
	}
	return 0
}
