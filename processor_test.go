package mirror

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

// n builds a notification for key "k": "add:v", "add*:v" (initial list),
// "update:o>v", "delete:v", "delete?:v" (final state unknown).
func n(spec string) notification[string, string] {
	kind, a, b := spec, "", ""
	for i := range spec {
		if spec[i] == ':' {
			kind, a = spec[:i], spec[i+1:]
			break
		}
	}
	switch kind {
	case "add":
		return notification[string, string]{kind: notifyAdd, key: "k", obj: a}
	case "add*":
		return notification[string, string]{kind: notifyAdd, key: "k", obj: a, initial: true}
	case "update":
		for i := range a {
			if a[i] == '>' {
				a, b = a[:i], a[i+1:]
				break
			}
		}
		return notification[string, string]{kind: notifyUpdate, key: "k", old: a, obj: b}
	case "delete":
		return notification[string, string]{kind: notifyDelete, key: "k", obj: a}
	case "delete?":
		return notification[string, string]{kind: notifyDelete, key: "k", obj: a, unknown: true}
	}
	panic("bad spec " + spec)
}

func render(x notification[string, string]) string {
	switch x.kind {
	case notifyAdd:
		if x.initial {
			return "add*:" + x.obj
		}
		return "add:" + x.obj
	case notifyUpdate:
		return "update:" + x.old + ">" + x.obj
	case notifyDelete:
		if x.unknown {
			return "delete?:" + x.obj
		}
		return "delete:" + x.obj
	}
	return "none"
}

// TestListener_BoundedModeKeepsOnePendingStatePerKey pins the merge rules
// of a handler that fell behind: the latest state wins, a delete stays a
// delete, and an update's old object is the one the handler last saw.
func TestListener_BoundedModeKeepsOnePendingStatePerKey(t *testing.T) {
	tests := []struct {
		name string
		in   []string
		want []string // what the handler is handed, in order
	}{
		{"add then updates is one add of the latest", []string{"add:1", "update:1>2", "update:2>3"}, []string{"add:3"}},
		{"initial add stays initial", []string{"add*:1", "update:1>2"}, []string{"add*:2"}},
		{"add then delete is nothing", []string{"add:1", "update:1>2", "delete:2"}, nil},
		{"dropped initial add is no longer pending", []string{"add*:1", "delete:1"}, nil},
		{"updates keep the old state the handler saw", []string{"update:1>2", "update:2>3"}, []string{"update:1>3"}},
		{"update then delete is a delete of the last state", []string{"update:1>2", "delete:2"}, []string{"delete:2"}},
		{"delete then re-create is both", []string{"delete:1", "add:5", "update:5>6"}, []string{"delete:1", "add:6"}},
		{"delete, re-create, delete is the first delete", []string{"delete:1", "add:5", "delete:5"}, []string{"delete:1"}},
		{"a tombstone loses to a real delete", []string{"delete?:1", "delete:1"}, []string{"delete:1"}},
		{"a real delete is not replaced by a tombstone", []string{"delete:1", "delete?:1"}, []string{"delete:1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newListener[string, string](nil, 0, 1, func(error) {}, func() bool { return true })
			l.pending = map[string]*slot[string, string]{} // bounded mode
			for _, s := range tt.in {
				l.push(n(s))
			}
			var got []string
			for {
				x, ok := l.nextLocked()
				if !ok {
					break
				}
				got = append(got, render(x))
				if x.initial {
					l.initialPending--
				}
			}
			assert.Equal(t, tt.want, got)
			assert.Zero(t, l.initialPending, "initial-list adds still counted after draining")
			assert.Nil(t, l.pending, "drained listener did not return to ordered mode")
		})
	}
}

func TestListener_CollapsesOnlyPastMaxBacklog(t *testing.T) {
	l := newListener[string, string](nil, 0, 3, func(error) {}, func() bool { return true })
	for i := range 3 {
		l.push(notification[string, string]{kind: notifyAdd, key: fmt.Sprint(i), obj: "v"})
	}
	assert.Nil(t, l.pending, "collapsed at the limit, not past it")
	l.push(notification[string, string]{kind: notifyUpdate, key: "0", old: "v", obj: "w"})
	assert.NotNil(t, l.pending)
	assert.Equal(t, 3, l.backlog(), "one pending notification per key")
}
