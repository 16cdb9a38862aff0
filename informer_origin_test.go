package mirror_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/memsource"
)

// changeLog records what a function registered with AddChangeHandler is
// told.
type changeLog struct {
	mu      sync.Mutex
	changes []mirror.Change[string, item]
}

func (c *changeLog) handler() func(mirror.Change[string, item]) {
	return func(ch mirror.Change[string, item]) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.changes = append(c.changes, ch)
	}
}

// take returns and forgets the recorded changes.
func (c *changeLog) take() []mirror.Change[string, item] {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := c.changes
	c.changes = nil
	return ch
}

// renderChanges renders changes sorted, as "origin type key=val" (with
// "old->new" for an update and "unknown" for a deletion whose final state
// is unknown), and checks that each carries its object's key.
func renderChanges(t *testing.T, changes []mirror.Change[string, item]) []string {
	var out []string
	for _, c := range changes {
		assert.Equal(t, c.Object.Name, c.Key, "the key of %v", c)
		s := fmt.Sprintf("%v %v %s=%d", c.Origin, c.Type, c.Key, c.Object.Val)
		switch {
		case c.Type == mirror.Updated:
			s = fmt.Sprintf("%v %v %s %d->%d", c.Origin, c.Type, c.Key, c.Old.Val, c.Object.Val)
		case c.FinalStateUnknown:
			s += " unknown"
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// asEvents renders changes as a plain Handler's calls (see event), taking
// an initial-list add for an add with isInInitialList.
func asEvents(changes []mirror.Change[string, item]) []string {
	var evs []event
	for _, c := range changes {
		switch c.Type {
		case mirror.Added:
			evs = append(evs, event{Op: "add", Obj: c.Object, Initial: c.Origin == mirror.OriginInitialList})
		case mirror.Updated:
			evs = append(evs, event{Op: "update", Old: c.Old, Obj: c.Object})
		case mirror.Deleted:
			evs = append(evs, event{Op: "delete", Obj: c.Object, Unknown: c.FinalStateUnknown})
		}
	}
	return sorted(evs)
}

func withIdentity(o *mirror.InformerOptions[string, item]) {
	o.SameObject = sameGen
	o.ResourceVersion = func(it item) string { return strconv.Itoa(it.Val) }
}

// TestInformer_ChangeFunctionIsToldEachNotificationsOrigin pins where each
// notification says it came from, and that a plain
// Handler registered beside the function of changes gets the same
// notifications as before, through OnAdd, OnUpdate and OnDelete.
func TestInformer_ChangeFunctionIsToldEachNotificationsOrigin(t *testing.T) {
	initial := []string{"initial-list added a=1", "initial-list added b=1", "initial-list added c=1"}
	tests := []struct {
		name      string
		configure func(*mirror.InformerOptions[string, item])
		handler   mirror.HandlerOptions
		late      bool // registered once the informer has synced
		act       func(f *fixture)
		want      []string // after the initial adds
	}{
		{name: "the first list is the initial list"},
		{name: "a late handler's replay of the cache is the initial list", late: true},
		{
			name: "watch events are live",
			act: func(f *fixture) {
				f.src.Put(item{Name: "d", Val: 1})
				f.src.Put(item{Name: "a", Val: 2})
				f.src.Delete("b")
			},
			want: []string{"live added d=1", "live deleted b=1", "live updated a 1->2"},
		},
		{
			name:      "an identity change a watch event shows is live",
			configure: withIdentity,
			act:       func(f *fixture) { f.src.Put(item{Name: "a", Val: 2, Gen: 2}) },
			want:      []string{"live added a=2", "live deleted a=1 unknown"},
		},
		{
			name:      "what a relist finds is relist",
			configure: withIdentity,
			act: func(f *fixture) {
				f.missWhileDown(func() {
					f.src.Put(item{Name: "a", Val: 2})
					f.src.Delete("b")
					f.src.Delete("c")
					f.src.Put(item{Name: "c", Val: 3, Gen: 2})
					f.src.Put(item{Name: "d", Val: 1})
				})
			},
			want: []string{
				"relist added c=3", "relist added d=1", "relist deleted b=1 unknown",
				"relist deleted c=1 unknown", "relist updated a 1->2",
			},
		},
		{
			name:    "a periodic resync is resync",
			handler: mirror.HandlerOptions{ResyncPeriod: 10 * time.Second},
			act:     func(*fixture) { time.Sleep(15 * time.Second) },
			want:    []string{"resync updated a 1->1", "resync updated b 1->1", "resync updated c 1->1"},
		},
		{
			// A relist offers the objects it finds unchanged to the
			// handlers found due by the last resync round, as that
			// round did.
			name:      "a relist's unchanged objects are resync",
			configure: withIdentity,
			handler:   mirror.HandlerOptions{ResyncPeriod: 100 * time.Second},
			act: func(f *fixture) {
				time.Sleep(105 * time.Second) // a round at 100 s
				f.missWhileDown(func() { f.src.Put(item{Name: "a", Val: 2}) })
			},
			want: []string{
				"relist updated a 1->2",
				"resync updated a 1->1", "resync updated b 1->1", "resync updated b 1->1",
				"resync updated c 1->1", "resync updated c 1->1",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFixture(t, tt.configure)
				for _, n := range []string{"a", "b", "c"} {
					f.src.Put(item{Name: n, Val: 1})
				}
				changes, plain := &changeLog{}, &recorder{}
				var reg *mirror.Registration
				register := func() {
					var err error
					reg, err = f.inf.AddChangeHandler(changes.handler(), tt.handler)
					require.NoError(t, err)
					_, err = f.inf.AddEventHandler(plain, tt.handler)
					require.NoError(t, err)
				}
				if !tt.late {
					register()
				}
				f.start()
				f.synced()
				if tt.late {
					register()
					synctest.Wait()
				}
				require.True(t, reg.HasSynced())
				if tt.act != nil {
					tt.act(f)
				}
				synctest.Wait()
				got := changes.take()
				want := slices.Sorted(slices.Values(append(slices.Clone(initial), tt.want...)))
				assert.Equal(t, want, renderChanges(t, got))
				assert.Equal(t, asEvents(got), sorted(plain.take()), "the plain Handler's calls")
				f.stop()
			})
		})
	}
}

// TestInformer_CheckpointReplayIsInitialList pins the origins of an
// informer resumed from a checkpoint: the checkpoint's objects are the
// initial list; the changes since are live if the watch resumes, and the
// initial list's if the history was compacted and a list completes the
// first sync instead.
func TestInformer_CheckpointReplayIsInitialList(t *testing.T) {
	for _, compacted := range []bool{false, true} {
		t.Run("compacted="+strconv.FormatBool(compacted), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "cp")
				src := memsource.New(itemKey, memsource.Options{})
				src.Put(item{Name: "a", Val: 1})
				src.Put(item{Name: "b", Val: 1})
				first := startCheckpointed(t, src, path)
				first.stop(t) // writes the checkpoint

				src.Put(item{Name: "a", Val: 2})
				src.Delete("b")
				since := "live"
				if compacted {
					src.Compact(src.Revision())
					since = "initial-list"
				}

				changes := &changeLog{}
				inf := mirror.NewInformer(src, mirror.InformerOptions[string, item]{
					KeyFunc: itemKey, SameObject: sameGen,
					ResourceVersion: func(it item) string { return strconv.Itoa(it.Val) },
					Checkpoint:      mirror.CheckpointOptions[item]{Path: path},
					ErrorHandler:    func(error) {},
				})
				_, err := inf.AddChangeHandler(changes.handler(), mirror.HandlerOptions{})
				require.NoError(t, err)
				ctx, cancel := context.WithCancel(t.Context())
				done := make(chan error, 1)
				go func() { done <- inf.Run(ctx) }()
				synctest.Wait()
				require.True(t, inf.HasSynced())
				got := renderChanges(t, changes.take())
				unknown := ""
				if compacted {
					unknown = " unknown" // a list infers the deletion
				}
				want := []string{
					"initial-list added a=1", "initial-list added b=1",
					since + " deleted b=1" + unknown, since + " updated a 1->2",
				}
				if compacted && len(got) == 1 {
					// The Reflector learned of the compaction before the
					// load looked for a list: the load stopped and the list
					// filled the cache as a first list does, told as the
					// initial list too (checkpoint_listfirst_test.go pins
					// that path; which one is taken is a race).
					want = []string{"initial-list added a=2"}
				}
				assert.Equal(t, want, got)
				cancel()
				require.NoError(t, <-done)
			})
		})
	}
}

func TestInformer_AddChangeHandlerRefusesANilFunction(t *testing.T) {
	inf := mirror.NewInformer(memsource.New(itemKey, memsource.Options{}), mirror.InformerOptions[string, item]{KeyFunc: itemKey})
	_, err := inf.AddChangeHandler(nil, mirror.HandlerOptions{})
	require.Error(t, err)
	_, err = inf.AddChangeHandler(func(mirror.Change[string, item]) {}, mirror.HandlerOptions{})
	assert.NoError(t, err)
}

func TestOrigin_String(t *testing.T) {
	for o, want := range map[mirror.Origin]string{
		mirror.OriginLive: "live", mirror.OriginInitialList: "initial-list",
		mirror.OriginRelist: "relist", mirror.OriginResync: "resync", 0: "Origin(0)",
	} {
		assert.Equal(t, want, o.String())
	}
}
