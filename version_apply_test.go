package mirror

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// compareNumbers orders the fake source's versions, which are numbers.
func compareNumbers(a, b string) (int, error) {
	x, err := strconv.Atoi(a)
	if err != nil {
		return 0, source.ErrInvalidVersion
	}
	y, err := strconv.Atoi(b)
	if err != nil {
		return 0, source.ErrInvalidVersion
	}
	return x - y, nil
}

// waitResult starts inf.WaitForVersion(v) and returns where its result
// will arrive; the wait ends a minute of fake time from now at the latest.
func waitResult(t *testing.T, inf *Informer[string, tobj], v string) <-chan error {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	done := make(chan error, 1)
	go func() { done <- inf.WaitForVersion(ctx, v) }()
	return done
}

// A change made in one step (an etcd transaction) reaches the informer as
// several events of one version (Event.More): WaitForVersion of that
// version must not return while only part of them is applied, or a read
// after it sees half a transaction.
func TestWaitForVersion_WaitsForTheWholeChangeMadeAtIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lw := newFakeLW()
		lw.page("1", "", tobj{"a", "1"}, tobj{"b", "1"})
		w := lw.watch(more(modified("a", "2", "2")))
		inf := NewInformer[string, tobj](lw, InformerOptions[string, tobj]{KeyFunc: tobjKey, CompareVersions: compareNumbers})
		ctx, cancel := context.WithCancel(t.Context())
		run := make(chan error, 1)
		go func() { run <- inf.Run(ctx) }()
		synctest.Wait()
		a, _ := inf.GetByKey("a")
		require.Equal(t, "2", a.Val, "the first half of the change is applied")

		done := waitResult(t, inf, "2")
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("WaitForVersion returned (%v) with half of the change at its version applied", err)
		default:
		}

		w.push(modified("b", "2", "2"))
		synctest.Wait()
		select {
		case err := <-done:
			require.NoError(t, err)
		default:
			t.Fatal("still waiting once the whole change is applied")
		}
		b, _ := inf.GetByKey("b")
		assert.Equal(t, "2", b.Val)
		cancel()
		require.NoError(t, <-run)
	})
}

// An added event whose transform fails is left out, but the cache is at
// its version all the same: WaitForVersion of it returns.
func TestWaitForVersion_ReturnsAfterAnAddedEventWhoseTransformFailed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		errBad := errors.New("bad object")
		lw := newFakeLW()
		lw.page("1", "", tobj{"a", "1"})
		w := lw.watch()
		var reported []error
		inf := NewInformer[string, tobj](lw, InformerOptions[string, tobj]{
			KeyFunc:         tobjKey,
			CompareVersions: compareNumbers,
			Transform: func(o tobj) (tobj, error) {
				if o.Val == "bad" {
					return o, errBad
				}
				return o, nil
			},
			ErrorHandler: func(err error) { reported = append(reported, err) },
		})
		ctx, cancel := context.WithCancel(t.Context())
		run := make(chan error, 1)
		go func() { run <- inf.Run(ctx) }()
		synctest.Wait()

		done := waitResult(t, inf, "2")
		w.push(addedEvent("c", "bad", "2"))
		synctest.Wait()
		select {
		case err := <-done:
			require.NoError(t, err)
		default:
			t.Fatal("still waiting for the version of an event whose transform failed")
		}
		_, ok := inf.GetByKey("c")
		assert.False(t, ok, "the object whose transform failed is left out")
		require.Len(t, reported, 1)
		assert.ErrorIs(t, reported[0], errBad)
		cancel()
		require.NoError(t, <-run)
	})
}
