package mirror

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// evictingStore is a recStore that takes evictions apart.
type evictingStore struct{ *recStore }

func (s evictingStore) Evict(obj tobj) error { return s.record("evict", obj) }

func badValue(key, rv string) *ObjectError {
	return &ObjectError{Key: key, ResourceVersion: rv, Err: errors.New("cannot decode")}
}

func TestReflector_KeyOnlyErrorEventEvictsTheObject(t *testing.T) {
	evict := step{ev: source.Event[tobj]{Type: source.Error, Object: tobj{Key: "a"}, ResourceVersion: "12",
		KeyOnly: true, Err: badValue("a", "12")}}
	// Without KeyOnly the event names no object: the store is left alone.
	plain := errEvent("13", badValue("b", "13"))
	for _, tc := range []struct {
		name    string
		store   func(*recStore) ReflectorStore[tobj]
		wantLog []string
	}{
		{"Evicter", func(s *recStore) ReflectorStore[tobj] { return evictingStore{s} },
			[]string{"replace@10 []", "evict a="}},
		{"plain store", func(s *recStore) ReflectorStore[tobj] { return s },
			[]string{"replace@10 []", "delete a="}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				lw, rec, errs := newFakeLW(), newRecStore(), &errLog{}
				r := NewReflector[tobj](lw, tc.store(rec), ReflectorOptions{ErrorHandler: errs.handle})
				lw.page("10", "")
				lw.watch(evict, plain)
				ctx, cancel := context.WithCancel(t.Context())
				done := make(chan struct{})
				go func() { defer close(done); r.Run(ctx) }()
				synctest.Wait()
				assert.Equal(t, tc.wantLog, rec.Log())
				assert.Equal(t, "13", r.Freshness().ResourceVersion)
				require.Len(t, errs.Errors(), 2, "both errors are reported")
				for i, key := range []string{"a", "b"} {
					var oe *ObjectError
					require.ErrorAs(t, errs.Errors()[i], &oe)
					assert.Equal(t, key, oe.Key)
				}
				cancel()
				<-done
			})
		})
	}
}

func TestReflector_SkippedObjectIsReportedOncePerState(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newRig(ReflectorOptions{})
		list := func(rv string, skipped ...error) {
			g.lw.lists <- listReply{res: source.ListResult[tobj]{ResourceVersion: rv, Skipped: skipped}}
		}
		// The first list skips bad@9; the watch sees worse@12 fail.
		list("10", badValue("bad", "9"))
		g.lw.watch(errEvent("12", badValue("worse", "12")), end(errSrcExpired))
		// Relists find the same states again: nothing new to say.
		list("13", badValue("bad", "9"), badValue("worse", "12"))
		g.lw.watch(end(errSrcExpired))
		list("14", badValue("bad", "9"), badValue("worse", "12"))
		g.lw.watch(end(errSrcExpired))
		// bad got another value that fails too: that is news. worse
		// was fixed, and then broke again at the same revision (a
		// source that went back): reported again as well.
		list("15", badValue("bad", "15"))
		g.lw.watch(end(errSrcExpired))
		list("16", badValue("bad", "15"), badValue("worse", "12"))
		g.lw.watch()
		// Relists without events in between are paced by backoff.
		g.runFor(t, 10*time.Minute)
		require.Len(t, g.lw.ListVersions(), 5)

		var got []string
		for _, err := range g.errs.Errors() {
			var oe *ObjectError
			if errors.As(err, &oe) {
				got = append(got, oe.Key+"@"+oe.ResourceVersion)
			}
		}
		assert.Equal(t, []string{"bad@9", "worse@12", "bad@15", "worse@12"}, got)
		g.stopRun()
	})
}

// An ErrorHandler learns why an object goes before the store drops it, so
// that whatever tells handlers of the removal (an informer's OnDelete with
// finalStateUnknown) comes after the reason.
func TestReflector_SkippedObjectIsReportedBeforeItsEviction(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lw, rec := newFakeLW(), newRecStore()
		report := func(err error) {
			var oe *ObjectError
			if errors.As(err, &oe) {
				_ = rec.record("report", tobj{Key: oe.Key})
			}
		}
		r := NewReflector[tobj](lw, evictingStore{rec}, ReflectorOptions{ErrorHandler: report})
		lw.page("10", "", tobj{"a", "1"})
		lw.watch(step{ev: source.Event[tobj]{Type: source.Error, Object: tobj{Key: "a"}, ResourceVersion: "12",
			KeyOnly: true, Err: badValue("a", "12")}})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { defer close(done); r.Run(ctx) }()
		synctest.Wait()
		assert.Equal(t, []string{"replace@10 [a=1]", "report a=", "evict a="}, rec.Log())
		cancel()
		<-done
	})
}
