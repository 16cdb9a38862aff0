package mirror_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/memsource"
	"github.com/listwatch/mirror/source"
)

// errUndecodable is what decodingSource reports for a value it cannot
// produce.
var errUndecodable = errors.New("undecodable value")

// decodingSource is a source that cannot produce items with a negative
// Val, as the etcd adapter cannot produce a value that fails to decode:
// a list leaves them out and reports them as skipped, and a watch turns
// their puts into source.Error events naming the key (KeyOnly).
type decodingSource struct{ *memsource.Source[item] }

func (s decodingSource) List(ctx context.Context, opts source.ListOptions) (source.ListResult[item], error) {
	res, err := s.Source.List(ctx, opts)
	good := res.Items[:0:0]
	for _, it := range res.Items {
		if it.Val < 0 {
			res.Skipped = append(res.Skipped, undecodable(it))
			continue
		}
		good = append(good, it)
	}
	res.Items = good
	return res, err
}

func (s decodingSource) Watch(ctx context.Context, opts source.WatchOptions) (source.Watcher[item], error) {
	w, err := s.Source.Watch(ctx, opts)
	if err != nil {
		return nil, err
	}
	return decodingWatcher{w}, nil
}

type decodingWatcher struct{ source.Watcher[item] }

func (w decodingWatcher) Next(ctx context.Context) (source.Event[item], error) {
	ev, err := w.Watcher.Next(ctx)
	if (ev.Type == source.Added || ev.Type == source.Updated) && ev.Object.Val < 0 {
		ev = source.Event[item]{Type: source.Error, Object: item{Name: ev.Object.Name}, KeyOnly: true,
			ResourceVersion: ev.ResourceVersion, Err: undecodable(ev.Object)}
	}
	return ev, err
}

// undecodable is the error for it. Its ResourceVersion names the state
// that failed, as the etcd adapter names it by the key's ModRevision; an
// item's Val stands for that here.
func undecodable(it item) *mirror.ObjectError {
	return &mirror.ObjectError{Key: it.Name, ResourceVersion: strconv.Itoa(it.Val), Err: errUndecodable}
}

func TestInformer_UndecodableValueLeavesTheMirrorAsAnUnknownDeletion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		wrap := func(src *memsource.Source[item]) source.ListWatcher[item] { return decodingSource{src} }
		f := newFixtureOver(t, wrap, func(o *mirror.InformerOptions[string, item]) {
			o.ResourceVersion = func(it item) string { return strconv.Itoa(it.Val) }
		})
		for _, n := range []string{"a", "b"} {
			f.src.Put(item{Name: n, Val: 1})
		}
		rec := f.startRecording()

		// a's new value cannot be produced: the mirror drops a, saying
		// that its final state is unknown, for a is still there.
		f.src.Put(item{Name: "a", Val: -1})
		synctest.Wait()
		assert.Equal(t, []string{"delete a=1 unknown=true"}, rendered(rec.take()))
		assert.Equal(t, map[string]int{"b": 1}, f.cacheState())

		// A good value brings it back.
		f.src.Put(item{Name: "a", Val: 2})
		synctest.Wait()
		assert.Equal(t, []string{"add a=2 initial=false"}, rendered(rec.take()))

		// The same through a relist: b turns bad while the watch is down.
		f.missWhileDown(func() { f.src.Put(item{Name: "b", Val: -1}) })
		assert.Equal(t, []string{"delete b=1 unknown=true"}, rendered(rec.take()))
		assert.Equal(t, map[string]int{"a": 2}, f.cacheState())

		// Another relist meets b's bad value again: nothing new.
		f.missWhileDown(func() { f.src.Put(item{Name: "c", Val: 1}) })
		assert.Equal(t, []string{"add c=1 initial=false"}, rendered(rec.take()))

		var bad []string
		for _, err := range f.errs.all() {
			var oe *mirror.ObjectError
			if errors.As(err, &oe) {
				bad = append(bad, oe.Key)
			}
		}
		assert.Equal(t, []string{"a", "b"}, bad, "each bad value reported once")
		f.stop()
	})
}

func sameGen(cached, incoming item) bool { return cached.Gen == incoming.Gen }

func TestInformer_RecreatedKeyIsADeleteThenAnAddNeverAnUpdate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, func(o *mirror.InformerOptions[string, item]) {
			o.SameObject = sameGen
			o.ResourceVersion = func(it item) string { return strconv.Itoa(it.Val) }
		})
		for _, n := range []string{"kept", "changed", "recreated", "gone"} {
			f.src.Put(item{Name: n, Val: 1, Gen: 1})
		}
		rec := f.startRecording()

		// While the watch is down, recreated is deleted and created
		// again, and the history that would tell is compacted away.
		f.missWhileDown(func() {
			f.src.Put(item{Name: "changed", Val: 2, Gen: 1})
			f.src.Delete("recreated")
			f.src.Put(item{Name: "recreated", Val: 1, Gen: 2})
			f.src.Delete("gone")
		})
		evs := rec.take()
		assert.Equal(t, []string{
			"add recreated=1 initial=false", "delete gone=1 unknown=true",
			"delete recreated=1 unknown=true", "update changed 1->2",
		}, sorted(evs))
		// The deletion comes before the addition.
		var order []string
		for _, e := range evs {
			if e.Obj.Name == "recreated" {
				order = append(order, e.Op+" gen "+strconv.Itoa(e.Obj.Gen))
			}
		}
		assert.Equal(t, []string{"delete gen 1", "add gen 2"}, order)

		// The same key re-created under the watch's eyes, as a source
		// that merges history can report it: a modification that
		// brings another object.
		f.src.Put(item{Name: "kept", Val: 5, Gen: 7})
		synctest.Wait()
		assert.Equal(t, []string{"delete kept=1 unknown=true", "add kept=5 initial=false"}, rendered(rec.take()))
		got, _ := f.inf.GetByKey("kept")
		assert.Equal(t, 7, got.Gen)
		f.stop()
	})
}

func TestInformer_FreshnessFollowsTheSource(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, nil)
		assert.Zero(t, f.inf.Freshness())
		f.src.Put(item{Name: "a", Val: 1})
		f.startRecording()
		listed := time.Now()
		assert.Equal(t, mirror.Freshness{ResourceVersion: strconv.FormatInt(f.src.Revision(), 10), ConfirmedAt: listed},
			f.inf.Freshness())

		time.Sleep(time.Minute)
		f.src.Bookmark()
		synctest.Wait()
		assert.Equal(t, mirror.Freshness{ResourceVersion: strconv.FormatInt(f.src.Revision(), 10), ConfirmedAt: time.Now()},
			f.inf.Freshness())
		f.stop()
	})
}
