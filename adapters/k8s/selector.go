package k8s

import (
	"errors"

	"github.com/listwatch/mirror"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
)

// LabelIndex is the name of the index IndexByLabels computes, which a
// Lister serves label selectors from.
const LabelIndex = "labels"

// IndexByLabels indexes an object under each of its labels, as
// "key=value". It never fails; its signature lets it serve as a
// mirror.IndexFunc[T]. The informers of a Factory have it; NewLister adds
// it to an informer that lacks it.
func IndexByLabels[T Object](obj T) ([]string, error) {
	l := obj.GetLabels()
	if len(l) == 0 {
		return nil, nil
	}
	vals := make([]string, 0, len(l))
	for k, v := range l {
		vals = append(vals, k+"="+v)
	}
	return vals, nil
}

// Lister reads an informer's cache by label selector, and by namespace,
// from its indexes: a selector that requires a label to have a value (or
// one of some values) is served from the objects under that label in
// LabelIndex, the fewest among its requirements, or under the namespace
// in NamespaceIndex if there are fewer; only those objects are matched
// against the whole selector. A selector with no such requirement (only
// "!=", "notin", exists, does not exist) reads every object of the
// namespace, or of the cache. client-go's listers match the selector
// against every object of the cache (or the namespace).
//
// A Lister is safe for concurrent use. The objects it returns are the
// cache's: they must not be modified.
type Lister[T Object] struct {
	inf *mirror.Informer[Key, T]
}

// NewLister returns a Lister of inf's cache, an informer made by
// NewInformer (it needs NamespaceIndex), adding LabelIndex to inf if it
// lacks one (see mirror.Informer.AddIndexers).
func NewLister[T Object](inf *mirror.Informer[Key, T]) (*Lister[T], error) {
	if _, err := inf.IndexKeys(LabelIndex, ""); errors.Is(err, mirror.ErrUnknownIndex) {
		if err := inf.AddIndexers(mirror.Indexers[T]{LabelIndex: IndexByLabels[T]}); err != nil {
			return nil, err
		}
	}
	return &Lister[T]{inf: inf}, nil
}

// List returns the cached objects whose labels sel selects, in no
// particular order, in a slice the caller owns. A nil sel selects every
// object.
func (l *Lister[T]) List(sel labels.Selector) []T {
	return l.list(sel, "", false)
}

// Get returns the cached object of that namespace and name, if any.
func (l *Lister[T]) Get(namespace, name string) (T, bool) {
	return l.inf.GetByKey(Key{Namespace: namespace, Name: name})
}

// Namespace returns a lister of the cached objects of one namespace.
func (l *Lister[T]) Namespace(namespace string) NamespaceLister[T] {
	return NamespaceLister[T]{l: l, ns: namespace}
}

// NamespaceLister reads the cached objects of one namespace; see Lister.
type NamespaceLister[T Object] struct {
	l  *Lister[T]
	ns string
}

// List returns the namespace's cached objects whose labels sel selects,
// in no particular order, in a slice the caller owns. A nil sel selects
// every object of the namespace.
func (n NamespaceLister[T]) List(sel labels.Selector) []T {
	return n.l.list(sel, n.ns, true)
}

// Get returns the namespace's cached object of that name, if any.
func (n NamespaceLister[T]) Get(name string) (T, bool) {
	return n.l.inf.GetByKey(Key{Namespace: n.ns, Name: name})
}

// list serves List: it picks the smallest set of candidates the indexes
// offer, then matches each against the namespace and the selector.
func (l *Lister[T]) list(sel labels.Selector, ns string, inNS bool) []T {
	if sel == nil {
		sel = labels.Everything()
	}
	index, values, n := "", []string(nil), l.inf.Len()
	if inNS {
		index, values, n = NamespaceIndex, []string{ns}, l.inf.IndexLen(NamespaceIndex, ns)
	}
	if reqs, selectable := sel.Requirements(); selectable {
		for _, r := range reqs {
			var vals []string
			switch r.Operator() {
			case selection.Equals, selection.DoubleEquals, selection.In:
				for v := range r.Values() {
					vals = append(vals, r.Key()+"="+v)
				}
			default:
				continue
			}
			c := 0
			for _, v := range vals {
				c += l.inf.IndexLen(LabelIndex, v)
			}
			if index == "" || c < n {
				index, values, n = LabelIndex, vals, c
			}
		}
	}
	out := make([]T, 0, n)
	match := func(obj T) {
		if (!inNS || obj.GetNamespace() == ns) && sel.Matches(labels.Set(obj.GetLabels())) {
			out = append(out, obj)
		}
	}
	if index == "" {
		for _, obj := range l.inf.All() {
			match(obj)
		}
		return out
	}
	// A label has one value per object, so the sets of an "in" are
	// disjoint: no object comes twice.
	for _, v := range values {
		for _, obj := range l.inf.ByIndexAll(index, v) {
			match(obj)
		}
	}
	return out
}
