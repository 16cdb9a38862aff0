package mirror_test

import (
	"errors"
	"regexp"
	"strconv"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/listwatch/mirror"
)

// poisoned reports whether it is a state the callbacks of these tests
// panic on.
func poisoned(it item) bool { return it.Val < 0 }

// panickingCallbacks are informer options whose one user function panics
// on a poisoned incoming object: the kinds of callback the informer must
// survive. onWatch says whether a watch's update calls it (ResourceVersion
// serves only relists); onAdd whether an object new to the cache does
// (SameObject and ResourceVersion compare with a cached state).
var panickingCallbacks = []struct {
	name           string
	onWatch, onAdd bool
	configure      func(*mirror.InformerOptions[string, item])
}{
	{"KeyFunc", true, true, func(o *mirror.InformerOptions[string, item]) {
		o.KeyFunc = func(it item) (string, error) {
			if poisoned(it) {
				panic("boom")
			}
			return it.Name, nil
		}
	}},
	{"IndexFunc", true, true, func(o *mirror.InformerOptions[string, item]) {
		o.Indexers["group"] = func(it item) ([]string, error) {
			if poisoned(it) {
				panic("boom")
			}
			return []string{it.Group}, nil
		}
	}},
	{"Transform", true, true, func(o *mirror.InformerOptions[string, item]) {
		o.Transform = func(it item) (item, error) {
			if poisoned(it) {
				panic("boom")
			}
			return it, nil
		}
	}},
	{"SameObject", true, false, func(o *mirror.InformerOptions[string, item]) {
		o.SameObject = func(cached, incoming item) bool {
			if poisoned(incoming) {
				panic("boom")
			}
			return cached.Gen == incoming.Gen
		}
	}},
	{"ResourceVersion", false, false, func(o *mirror.InformerOptions[string, item]) {
		o.ResourceVersion = func(it item) string {
			if poisoned(it) {
				panic("boom")
			}
			return strconv.Itoa(it.Val)
		}
	}},
}

var transformedKey = regexp.MustCompile(`transform object with key (\w+):`)

// panicReports returns the name of the object of each error that reports
// a panic of a test callback, and checks that it carries the panic's
// value and a stack that shows this file's callback.
func panicReports(t *testing.T, errs []error) []string {
	t.Helper()
	var names []string
	for _, err := range errs {
		var pe *mirror.PanicError
		if !errors.As(err, &pe) {
			continue
		}
		assert.Equal(t, "boom", pe.Value)
		assert.Contains(t, string(pe.Stack), "informer_panic_test.go", "the stack is the panic's")
		var ke *mirror.KeyError
		var ie *mirror.IndexError
		var oe *mirror.ObjectError
		switch {
		case errors.As(err, &ke):
			names = append(names, ke.Object.(item).Name)
		case errors.As(err, &ie):
			names = append(names, ie.Object.(item).Name)
		case errors.As(err, &oe):
			names = append(names, oe.Key)
		default:
			m := transformedKey.FindStringSubmatch(err.Error())
			require.NotNil(t, m, "%v names no object", err)
			names = append(names, m[1])
		}
	}
	return names
}

func TestInformer_PanickingCallbackSkipsOnlyThatObject(t *testing.T) {
	for _, cb := range panickingCallbacks {
		t.Run(cb.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFixture(t, cb.configure)
				f.src.Put(item{Name: "a", Val: 1})
				f.src.Put(item{Name: "b", Val: 1})
				rec := f.startRecording()

				// A relist whose b panics, between a and c, which
				// are applied.
				f.missWhileDown(func() {
					f.src.Put(item{Name: "a", Val: 2})
					f.src.Put(item{Name: "b", Val: -1})
					f.src.Put(item{Name: "c", Val: 1})
				})
				want := []string{"add c=1 initial=false", "update a 1->2"}
				b := 1
				if cb.name == "KeyFunc" {
					// Without its key, b is not in the list: gone.
					want = append(want, "delete b=1 unknown=true")
					b = 0
				}
				assert.ElementsMatch(t, want, rendered(rec.take()))
				wantCache := map[string]int{"a": 2, "b": b, "c": 1}
				if b == 0 {
					delete(wantCache, "b")
				}
				assert.Equal(t, wantCache, f.cacheState())
				assert.Equal(t, []string{"b"}, panicReports(t, f.errs.all()), "reported once")

				if cb.onWatch {
					// A watched update that panics, then one of
					// another key in the same batch.
					f.src.Put(item{Name: "b", Val: -2})
					f.src.Put(item{Name: "a", Val: 3})
					synctest.Wait()
					assert.Equal(t, []string{"update a 2->3"}, rendered(rec.take()))
					wantCache["a"] = 3
					assert.Equal(t, wantCache, f.cacheState())
					assert.Equal(t, []string{"b", "b"}, panicReports(t, f.errs.all()))
				}

				// A later good state of b is applied.
				f.src.Put(item{Name: "b", Val: 3})
				synctest.Wait()
				if b == 0 {
					assert.Equal(t, []string{"add b=3 initial=false"}, rendered(rec.take()))
				} else {
					assert.Equal(t, []string{"update b 1->3"}, rendered(rec.take()))
				}
				wantCache["b"] = 3
				assert.Equal(t, wantCache, f.cacheState())
				assert.Equal(t, f.sourceState(), f.cacheState())
				f.stop()
			})
		})
	}
}

func TestInformer_PanickingCallbackSkipsOnlyThatObjectOfTheInitialList(t *testing.T) {
	for _, cb := range panickingCallbacks {
		if !cb.onAdd {
			continue
		}
		t.Run(cb.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFixture(t, cb.configure)
				f.src.Put(item{Name: "a", Val: 1})
				f.src.Put(item{Name: "b", Val: -1})
				f.src.Put(item{Name: "c", Val: 1})
				rec := &recorder{}
				_, err := f.inf.AddEventHandler(rec, mirror.HandlerOptions{})
				require.NoError(t, err)
				f.start()
				f.synced()
				assert.ElementsMatch(t, []string{"add a=1 initial=true", "add c=1 initial=true"}, rendered(rec.take()))
				assert.Equal(t, map[string]int{"a": 1, "c": 1}, f.cacheState())
				assert.Equal(t, []string{"b"}, panicReports(t, f.errs.all()))

				f.src.Put(item{Name: "b", Val: 2})
				synctest.Wait()
				assert.Equal(t, []string{"add b=2 initial=false"}, rendered(rec.take()))
				assert.Equal(t, f.sourceState(), f.cacheState())
				f.stop()
			})
		})
	}
}

func TestInformer_DeletionWhoseTransformPanicsStillDeletes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, func(o *mirror.InformerOptions[string, item]) {
			o.Transform = func(it item) (item, error) {
				if poisoned(it) {
					panic("boom")
				}
				return it, nil
			}
		})
		f.src.Put(item{Name: "a", Val: 1})
		f.src.Put(item{Name: "b", Val: 1})
		rec := f.startRecording()

		// The deletion carries b's last state, which panics: b still
		// goes, with the last state the cache holds.
		f.src.Put(item{Name: "b", Val: -1})
		f.src.Delete("b")
		synctest.Wait()
		assert.Equal(t, []string{"delete b=1 unknown=false"}, rendered(rec.take()))
		assert.Equal(t, map[string]int{"a": 1}, f.cacheState())
		assert.Equal(t, []string{"b", "b"}, panicReports(t, f.errs.all()), "the update and the deletion")
		f.stop()
	})
}
