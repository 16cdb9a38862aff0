package mirror

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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

// testListener is a listener registered with a processor that is not
// running: the test distributes and publishes as the informer would, and
// takes what the listener would deliver.
type testListener struct {
	p *processor[string, string]
	l *listener[string, string]
}

func newTestListener(maxBacklog int) *testListener {
	p := &processor[string, string]{report: func(error) {}}
	l := newListener[string, string](nil, nil, 0, maxBacklog, func(error) {}, func() bool { return true })
	if err := p.add(l, func() { l.follow(&p.feed) }); err != nil {
		panic(err) // a processor that was never run is never stopped
	}
	return &testListener{p: p, l: l}
}

// send distributes n to every listener and publishes it.
func (tl *testListener) send(n notification[string, string]) {
	tl.p.distribute(n, false)
	tl.p.publish()
}

// drain takes everything the listener would deliver, as run does.
func (tl *testListener) drain() []notification[string, string] {
	var got []notification[string, string]
	for {
		var batch [listenerBatch]notification[string, string]
		tl.l.mu.Lock()
		k := tl.l.takeLocked(batch[:])
		for _, x := range batch[:k] {
			if x.initial {
				tl.l.initialPending--
			}
		}
		tl.l.mu.Unlock()
		if k == 0 {
			return got
		}
		got = append(got, batch[:k]...)
	}
}

func renderAll(ns []notification[string, string]) []string {
	var out []string
	for _, x := range ns {
		out = append(out, render(x))
	}
	return out
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
			tl := newTestListener(1)
			tl.l.pending = map[string]*slot[string, string]{} // bounded mode
			for _, s := range tt.in {
				tl.send(n(s))
			}
			assert.Equal(t, tt.want, renderAll(tl.drain()))
			assert.Zero(t, tl.l.initialPending, "initial-list adds still counted after draining")
			assert.Nil(t, tl.l.pending, "drained listener did not return to ordered mode")
		})
	}
}

func TestListener_CollapsesOnlyPastMaxBacklog(t *testing.T) {
	tl := newTestListener(3)
	for i := range 3 {
		tl.send(notification[string, string]{kind: notifyAdd, key: fmt.Sprint(i), obj: "v"})
	}
	assert.Nil(t, tl.l.pending, "collapsed at the limit, not past it")
	tl.send(notification[string, string]{kind: notifyUpdate, key: "0", old: "v", obj: "w"})
	assert.NotNil(t, tl.l.pending)
	assert.Equal(t, 3, tl.l.backlog(), "one pending notification per key")
	assert.Zero(t, tl.l.end-tl.l.pos.seq, "the feed is read into pending, not held")
}

// TestListener_OwnNotificationsKeepTheirPlaceAmongTheFeeds pins the order
// of a resync meant for some handlers only: it reaches each of them after
// the notifications distributed before it and before those after it,
// whether or not they were published yet.
func TestListener_OwnNotificationsKeepTheirPlaceAmongTheFeeds(t *testing.T) {
	tl := newTestListener(0)
	other := newListener[string, string](nil, nil, 0, 0, func(error) {}, func() bool { return true })
	require.NoError(t, tl.p.add(other, func() { other.follow(&tl.p.feed) }))
	tl.p.syncing = []*listener[string, string]{tl.l} // due for a resync; other is not

	tl.p.distribute(n("add:1"), false)
	tl.p.distribute(n("update:1>1"), true)
	assert.Empty(t, tl.drain(), "the resync went ahead of an add not yet published")
	tl.p.distribute(n("update:1>2"), false)
	tl.p.publish()
	tl.p.distribute(n("update:2>2"), true) // nothing unpublished before it
	assert.Equal(t, 4, tl.l.backlog())
	assert.Equal(t, 2, other.backlog(), "the handler not due counts only what it gets")

	assert.Equal(t, []string{"add:1", "update:1>1", "update:1>2", "update:2>2"}, renderAll(tl.drain()))
	assert.Zero(t, tl.l.backlog())
}

func TestProcessor_WithoutHandlersDistributesNothing(t *testing.T) {
	p := &processor[string, string]{report: func(error) {}}
	for i := range 3 * feedChunkLen {
		p.distribute(n("add:"+fmt.Sprint(i)), false)
	}
	p.publish()
	assert.Zero(t, p.feed.seq, "an informer without handlers filled the feed")
	assert.Nil(t, p.feed.tail)
}

func TestListener_RemovedDropsWhatWaits(t *testing.T) {
	tl := newTestListener(0)
	tl.p.syncing = []*listener[string, string]{tl.l}
	for range 2 * feedChunkLen {
		tl.send(n("add:1"))
	}
	tl.p.distribute(n("update:1>1"), true)
	require.True(t, tl.p.remove(tl.l))
	assert.Zero(t, tl.l.backlog())
	assert.Nil(t, tl.l.pos.c, "a removed listener still holds its place in the feed")
	tl.send(n("add:2"))
	tl.p.distribute(n("update:2>2"), true)
	assert.Empty(t, tl.drain())
	assert.Zero(t, tl.p.feed.followers.Load())
}

// FuzzProcessor checks delivery through the feed and the listeners' own
// queues against a model: each listener is handed, in order, what was
// distributed to it, a feed notification only once published, and its
// backlog is what it has not been handed, less what is not published. Chunks are reused as listeners
// pass them, so a chunk reused too early shows as a wrong notification.
func FuzzProcessor(f *testing.F) {
	f.Add([]byte{0, 0, 1, 2, 3, 0x13, 0x23, 0, 4, 2, 0x33})
	f.Add([]byte{0, 0, 0, 0, 2, 0x3f, 1, 0, 2, 0x1f, 0x2f})
	f.Fuzz(func(t *testing.T, ops []byte) {
		const listeners = 3
		type want struct {
			obj  string
			feed bool // needs a publish before it can be handed out
		}
		p := &processor[string, string]{report: func(error) {}}
		ls := make([]*listener[string, string], listeners)
		models := make([][]want, listeners)
		for i := range ls {
			ls[i] = newListener[string, string](nil, nil, 0, 0, func(error) {}, func() bool { return true })
			l := ls[i]
			require.NoError(t, p.add(l, func() { l.follow(&p.feed) }))
		}
		next := 0
		for _, op := range ops {
			switch op & 3 {
			case 0: // a change, for everyone; repeated to cross chunks
				for range int(op>>2)%(2*feedChunkLen) + 1 {
					next++
					p.distribute(notification[string, string]{kind: notifyAdd, key: "k", obj: fmt.Sprint(next)}, false)
					for i := range models {
						models[i] = append(models[i], want{obj: fmt.Sprint(next), feed: true})
					}
				}
			case 1: // a resync, for the listeners in the mask
				next++
				p.syncing = p.syncing[:0]
				for i := range ls {
					if op>>(2+i)&1 == 1 {
						p.syncing = append(p.syncing, ls[i])
						models[i] = append(models[i], want{obj: fmt.Sprint(next)})
					}
				}
				p.distribute(notification[string, string]{kind: notifyUpdate, key: "k", obj: fmt.Sprint(next)}, true)
			case 2:
				p.publish()
				for i := range models {
					for j := range models[i] {
						models[i][j].feed = false
					}
				}
			case 3: // listener op>>2%3 takes up to op>>4 notifications
				i := int(op>>2) % listeners
				buf := make([]notification[string, string], int(op>>4)+1)
				ls[i].mu.Lock()
				k := ls[i].takeLocked(buf)
				ls[i].mu.Unlock()
				var ready []string
				for _, w := range models[i] {
					if w.feed || len(ready) == len(buf) {
						break
					}
					ready = append(ready, w.obj)
				}
				var got []string
				for _, x := range buf[:k] {
					got = append(got, x.obj)
				}
				require.Equal(t, ready, got, "listener %d", i)
				models[i] = models[i][k:]
			}
			for i := range ls {
				waiting := 0 // what was published to the listener, or is its own
				for _, w := range models[i] {
					if !w.feed {
						waiting++
					}
				}
				require.Equal(t, waiting, ls[i].backlog(), "listener %d's backlog", i)
			}
		}
	})
}
