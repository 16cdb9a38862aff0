package mirror

// A list against a cache that holds a state (a relist after an expired
// watch, or the first list of an informer resumed from a checkpoint whose
// version the source no longer has) is applied as one step at its end
// (see listing). Usually most of what it lists is unchanged, and telling
// so is most of the work: finding each key in the cache and comparing
// identity and version. That part changes nothing, so the informer does it
// as each chunk arrives, while the Reflector reads the next, as a list
// into an empty cache is applied; at the end it deletes what the list
// lacks and applies only the objects that are new or changed. The cache
// keeps its value of an object found unchanged, and a handler due for a
// resync is offered it, as before.
//
// This needs InformerOptions.ResourceVersion, which alone tells an object
// unchanged; without it every listed object is an update, and the list is
// applied whole at its end. Between the chunks of a list nothing changes
// the cache (see listing.direct), so what a chunk found still holds at the
// end; if the cache changed all the same, the list is applied whole.

// relistDiff is what the chunks of a staged list were found to be.
type relistDiff[K comparable, T any] struct {
	// marks are the cached keys the list holds.
	marks listedMarks[K]
	// unchanged[p] are the positions, increasing, of the objects of the
	// list's p-th chunk found unchanged.
	unchanged [][]int
}

// diffPart compares the objects of part, the next chunk of a staged list,
// with the cache and records what it finds in d.
func (inf *Informer[K, T]) diffPart(d *relistDiff[K, T], part *listPart[K, T]) {
	var unchanged []int
	skip := part.skip
	for i, obj := range part.objs {
		if len(skip) > 0 && skip[0] == i {
			skip = skip[1:]
			continue
		}
		if old, ok := inf.cache.markListed(&d.marks, part.keys[i]); ok && inf.unchanged(old, obj) {
			unchanged = append(unchanged, i)
		}
	}
	for _, k := range part.kept {
		inf.cache.markListed(&d.marks, k)
	}
	d.unchanged = append(d.unchanged, unchanged)
}

// unchanged reports whether obj, listed, is the cached old unchanged: the
// same object (SameObject) at the same version (ResourceVersion). If
// either function panics it reports false, and the object is applied as
// changed, where the panic is reported (see applyDelta).
func (inf *Informer[K, T]) unchanged(old, obj T) (same bool) {
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	if inf.opts.SameObject != nil && !inf.opts.SameObject(old, obj) {
		return false
	}
	return inf.opts.ResourceVersion(old) == inf.opts.ResourceVersion(obj)
}

// applyDiffed applies list, diffed as it arrived into d, as one step:
// deletes for every cached key it does not list, resync offers of the
// objects found unchanged to the handlers due for one, then the other
// objects. It returns false, having changed nothing, if the cache changed
// since the diff began.
func (inf *Informer[K, T]) applyDiffed(list *relist[K, T], d *relistDiff[K, T], initial bool) bool {
	gone, ok := inf.cache.unmarked(&d.marks)
	if !ok {
		return false
	}
	inf.deleteKeys(gone, listOrigin(initial))
	syncing := inf.proc.anySyncing()
	for p, part := range list.parts {
		unchanged := d.unchanged[p]
		if syncing {
			for _, i := range unchanged {
				key := part.keys[i]
				if old, ok := inf.cache.GetByKey(key); ok {
					inf.proc.distribute(notification[K, T]{kind: notifyUpdate, key: key, old: old, obj: old, origin: OriginResync}, true)
				}
			}
		}
		part.skip = mergeSorted(part.skip, unchanged)
	}
	inf.cache.reserve(list.n)
	for _, p := range list.parts {
		inf.applyPart(p, initial)
	}
	return true
}

// mergeSorted returns the increasing positions of a and b together; a and
// b are increasing and disjoint.
func mergeSorted(a, b []int) []int {
	if len(b) == 0 {
		return a
	}
	if len(a) == 0 {
		return b
	}
	out := make([]int, 0, len(a)+len(b))
	for len(a) > 0 && len(b) > 0 {
		if a[0] < b[0] {
			out, a = append(out, a[0]), a[1:]
		} else {
			out, b = append(out, b[0]), b[1:]
		}
	}
	out = append(out, a...)
	return append(out, b...)
}

// anySyncing reports whether a resync round is offering objects to some
// handlers.
func (p *processor[K, T]) anySyncing() bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return len(p.syncing) > 0
}
