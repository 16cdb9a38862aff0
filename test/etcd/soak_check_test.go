package etcd

import (
	"fmt"
	"math"
	"testing"

	etcdmirror "github.com/listwatch/mirror/adapters/etcd"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// callCounts counts the notifications a check went through.
type callCounts struct {
	adds, updates int
	// observedDeletes and unknownDeletes count OnDelete by
	// finalStateUnknown.
	observedDeletes, unknownDeletes int
	// resyncs counts OnUpdate(obj, obj).
	resyncs int
	// replaced counts the unknown OnDeletes followed by an OnAdd of
	// another object under the key: a key re-created while the mirror was
	// away.
	replaced int
}

func (c *callCounts) addUp(o callCounts) {
	c.adds += o.adds
	c.updates += o.updates
	c.observedDeletes += o.observedDeletes
	c.unknownDeletes += o.unknownDeletes
	c.resyncs += o.resyncs
	c.replaced += o.replaced
}

// checkOptions says what checkCalls lets pass.
type checkOptions struct {
	// bounded says the handler has a MaxBacklog, and so may be told of a
	// delete with a newer state of the object than it was last given.
	bounded bool
}

// checkCalls checks one handler's calls, in the order it received them,
// against etcd's history h, whose values decode reads. Each key's calls
// must tell a story etcd's history allows:
//   - every object added, updated to or deleted is a state some put
//     left, and its value decodes;
//   - OnAdd comes only for a key the handler does not hold, OnUpdate and
//     OnDelete only for one it holds, with the state it holds, so no
//     object is deleted twice and none left without a delete; a bounded
//     handler may be told of the delete of a later state of the object it
//     holds, the updates between folded;
//   - a resync, OnUpdate(obj, obj), offers the state the handler holds;
//   - OnUpdate stays within one object (CreateRevision);
//   - a key's ModRevision, as the handler sees it, only goes forward;
//   - an observed OnDelete (finalStateUnknown false) carries the state
//     etcd deleted: the next change after it is a deletion;
//   - an unknown OnDelete comes after the object left: a deletion or a
//     value that does not decode follows its state, before any state the
//     handler is given next.
//
// Together with a handler's final view equal to etcd's state, these say
// that every object the handler knew and that left it gave exactly one
// OnDelete. checkCalls returns what it counted and one line per rule
// broken.
func checkCalls(h *history, decode etcdmirror.DecodeFunc[string], calls []call[string], opts checkOptions) (callCounts, []string) {
	type indexed struct {
		i int
		c call[string]
	}
	perKey := make(map[string][]indexed)
	for i, c := range calls {
		perKey[c.obj.Key] = append(perKey[c.obj.Key], indexed{i, c})
	}
	var n callCounts
	var broken []string
	for key, seq := range perKey {
		var held *etcdmirror.Object[string]
		var gone *etcdmirror.Object[string] // what the last unknown OnDelete removed
		var lastMod int64
		for j, ic := range seq {
			c := ic.c
			bad := func(format string, args ...any) {
				broken = append(broken, fmt.Sprintf("%s: call %d, %v: %s", key, ic.i, c.kind, fmt.Sprintf(format, args...)))
			}
			switch {
			case c.kind == callUpdate && c.old == c.obj:
				n.resyncs++
				if held == nil || c.obj != *held {
					bad("resync of %s, the handler holds %s", desc(c.obj), descp(held))
				}
			case c.kind == callAdd || c.kind == callUpdate:
				if c.kind == callAdd {
					n.adds++
					if held != nil {
						bad("the handler holds %s already and was told of no delete", desc(*held))
					}
					if gone != nil && gone.CreateRevision != c.obj.CreateRevision {
						n.replaced++
					}
				} else {
					n.updates++
					switch {
					case held == nil:
						bad("the handler holds nothing for the key")
					case c.old != *held:
						bad("old is %s, the handler holds %s", desc(c.old), desc(*held))
					}
					if c.old.CreateRevision != c.obj.CreateRevision {
						bad("from one object to another: %s to %s", desc(c.old), desc(c.obj))
					}
				}
				if c.obj.ModRevision <= lastMod {
					bad("%s: ModRevision goes back from %d", desc(c.obj), lastMod)
				}
				if msg := realState(h, decode, c.obj); msg != "" {
					bad("%s", msg)
				}
				obj := c.obj
				held, gone, lastMod = &obj, nil, c.obj.ModRevision
			case c.kind == callDelete:
				switch {
				case held == nil:
					bad("of %s, which the handler does not hold: a second or spurious delete", desc(c.obj))
				case c.obj == *held:
				case !opts.bounded || c.obj.CreateRevision != held.CreateRevision || c.obj.ModRevision < held.ModRevision:
					bad("carries %s, the handler holds %s", desc(c.obj), desc(*held))
				default:
					if msg := realState(h, decode, c.obj); msg != "" {
						bad("%s", msg)
					}
				}
				if c.unknown {
					n.unknownDeletes++
					until := int64(math.MaxInt64)
					if j+1 < len(seq) && seq[j+1].c.kind != callDelete {
						until = seq[j+1].c.obj.ModRevision
					}
					if !leftBetween(h, decode, key, c.obj.ModRevision, until) {
						bad("unknown delete of %s, but in etcd's history the key was neither deleted nor undecodable after it (and before rev %d)", desc(c.obj), until)
					}
				} else {
					n.observedDeletes++
					next := h.after(key, c.obj.ModRevision)
					switch {
					case len(next) > 0 && next[0].deleted:
					default:
						bad("observed delete of %s, but etcd's next change of the key is %v", desc(c.obj), firstChange(next))
					}
				}
				held, gone = nil, nil
				if c.unknown {
					obj := c.obj
					gone = &obj
				}
			}
		}
	}
	return n, broken
}

// realState says what is wrong with o as a state of its key in h, or ""
// if some put left exactly o.
func realState(h *history, decode etcdmirror.DecodeFunc[string], o etcdmirror.Object[string]) string {
	p, ok := h.put(o.Key, o.ModRevision)
	if !ok {
		return fmt.Sprintf("%s: no put at rev %d in etcd's history", desc(o), o.ModRevision)
	}
	want, good := p.object(o.Key, decode)
	switch {
	case !good:
		return fmt.Sprintf("%s: etcd's value %q does not decode", desc(o), p.value)
	case want != o:
		return fmt.Sprintf("%s: etcd's put left %s", desc(o), desc(want))
	}
	return ""
}

// leftBetween reports whether key was deleted, or given a value decode
// refuses, after revision from and before revision until.
func leftBetween(h *history, decode etcdmirror.DecodeFunc[string], key string, from, until int64) bool {
	for _, c := range h.after(key, from) {
		if c.rev >= until {
			return false
		}
		if c.deleted {
			return true
		}
		if _, good := c.object(key, decode); !good {
			return true
		}
	}
	return false
}

func firstChange(cs []change) string {
	if len(cs) == 0 {
		return "none"
	}
	if cs[0].deleted {
		return fmt.Sprintf("a deletion at rev %d", cs[0].rev)
	}
	return fmt.Sprintf("a put at rev %d (created %d) of %q", cs[0].rev, cs[0].createRev, cs[0].value)
}

// descp is desc of o, or "nothing" for nil.
func descp(o *etcdmirror.Object[string]) string {
	if o == nil {
		return "nothing"
	}
	return desc(*o)
}

// desc names one state of an object in messages.
func desc(o etcdmirror.Object[string]) string {
	return fmt.Sprintf("{create %d, mod %d, version %d, %q}", o.CreateRevision, o.ModRevision, o.Version, o.Value)
}

// The soak is only as good as its checker: each rule must catch the lie
// it names, and pass what etcd's history allows.
func TestCheckCalls_FindsEachLieAndPassesEachTrueStory(t *testing.T) {
	const k = "/k"
	h := &history{keys: make(map[string][]change)}
	put := func(rev, create, version int64, v string) *clientv3.Event {
		return &clientv3.Event{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{
			Key: []byte(k), Value: []byte(v), CreateRevision: create, ModRevision: rev, Version: version}}
	}
	h.add([]*clientv3.Event{
		put(2, 2, 1, "a"),
		put(3, 2, 2, "b"),
		{Type: mvccpb.DELETE, Kv: &mvccpb.KeyValue{Key: []byte(k), ModRevision: 4}},
		put(5, 5, 1, "c"),
		put(6, 5, 2, soakBad+"-x"),
		put(7, 5, 3, "d"),
		put(8, 5, 4, soakBad+"-y"),
		{Type: mvccpb.DELETE, Kv: &mvccpb.KeyValue{Key: []byte(k), ModRevision: 9}},
	})
	obj := func(rev int64) etcdmirror.Object[string] {
		p, ok := h.put(k, rev)
		require.True(t, ok)
		o, _ := p.object(k, soakDecode)
		return o
	}
	a, b, c, d := obj(2), obj(3), obj(5), obj(7)
	add := func(o etcdmirror.Object[string]) call[string] { return call[string]{kind: callAdd, obj: o} }
	update := func(old, o etcdmirror.Object[string]) call[string] {
		return call[string]{kind: callUpdate, old: old, obj: o}
	}
	del := func(o etcdmirror.Object[string], unknown bool) call[string] {
		return call[string]{kind: callDelete, obj: o, unknown: unknown}
	}
	forged := b
	forged.Value = "never"

	for _, tc := range []struct {
		name  string
		calls []call[string]
		opts  checkOptions
		lie   string // a part of the one line checkCalls must return; "" for none
	}{
		{name: "the watch saw everything", calls: []call[string]{add(a), update(a, b), del(b, false), add(c), del(c, true), add(d)}},
		{name: "a relist after compaction", calls: []call[string]{add(a), del(a, true), add(d)}},
		{name: "an undecodable value compacted away", calls: []call[string]{add(c), update(c, d)}},
		{name: "an update across objects", calls: []call[string]{add(b), update(b, c)}, lie: "from one object to another"},
		{name: "a second delete", calls: []call[string]{add(b), del(b, true), del(b, true)}, lie: "a second or spurious delete"},
		{name: "an add over a held object", calls: []call[string]{add(b), add(c)}, lie: "was told of no delete"},
		{name: "a revision going back", calls: []call[string]{add(b), update(b, a)}, lie: "goes back"},
		{name: "a stale state deleted as observed", calls: []call[string]{add(a), del(a, false)}, lie: "observed delete"},
		{name: "an undecodable put as an observed delete", calls: []call[string]{add(c), del(c, false)}, lie: "observed delete"},
		{name: "an unknown delete of an object that did not leave", calls: []call[string]{add(a), del(a, true), add(b)}, lie: "neither deleted nor undecodable"},
		{name: "a state that never was", calls: []call[string]{add(forged)}, lie: "etcd's put left"},
		{name: "an undecodable state", calls: []call[string]{add(etcdmirror.Object[string]{Key: k, CreateRevision: 5, ModRevision: 6, Version: 2})}, lie: "does not decode"},
		{name: "a delete of another state than held", calls: []call[string]{add(b), del(a, true)}, lie: "the handler holds"},
		{name: "a delete of a later state", calls: []call[string]{add(a), del(b, false)}, lie: "the handler holds"},
		{name: "a bounded handler's delete of a later state", calls: []call[string]{add(a), del(b, false)}, opts: checkOptions{bounded: true}},
		{name: "a bounded handler's delete of an earlier state", calls: []call[string]{add(b), del(a, true)}, opts: checkOptions{bounded: true}, lie: "the handler holds"},
		{name: "a bounded handler's delete of another object", calls: []call[string]{add(b), del(c, true)}, opts: checkOptions{bounded: true}, lie: "the handler holds"},
		// The DeltaFIFO bug the soak found: an observed delete of the
		// state before values that do not decode, then a deletion.
		{name: "an observed delete of a state undecodable values followed", calls: []call[string]{add(d), del(d, false)}, lie: "observed delete"},
		{name: "a resync", calls: []call[string]{add(a), update(a, a), update(a, b)}},
		{name: "a resync of a state not held", calls: []call[string]{add(b), update(a, a)}, lie: "resync of"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, broken := checkCalls(h, soakDecode, tc.calls, tc.opts)
			if tc.lie == "" {
				assert.Empty(t, broken)
				return
			}
			require.Len(t, broken, 1, "one rule broken")
			assert.Contains(t, broken[0], tc.lie)
		})
	}
}
