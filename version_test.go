package mirror_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/memsource"
	"github.com/listwatch/mirror/source"
)

// bounded returns a context that ends a minute of fake time from now, so
// that a wait never woken fails its test instead of hanging it.
func bounded(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// revString is a memsource revision as a resource version.
func revString(rev int64) string { return strconv.FormatInt(rev, 10) }

func TestWaitForVersion_ReturnsOnceTheCacheHasAppliedIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, nil)
		f.start()
		f.synced()
		want := revString(f.src.Revision() + 1)

		done := make(chan error, 1)
		go func() { done <- f.inf.WaitForVersion(bounded(t), want) }()
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("returned before the version existed: %v", err)
		default:
		}

		before := time.Now()
		rev, err := f.src.Put(item{Name: "a", Val: 1})
		require.NoError(t, err)
		require.Equal(t, want, revString(rev))
		synctest.Wait()
		select {
		case err := <-done:
			require.NoError(t, err)
		default:
			t.Fatal("still waiting after the cache applied the version")
		}
		assert.Equal(t, before, time.Now(), "woken by the apply: no timer fired, nothing polled")
		got, ok := f.inf.GetByKey("a")
		require.True(t, ok, "the change is in the cache once the wait returns")
		assert.Equal(t, 1, got.Val)

		// A version already applied, or older, returns at once.
		require.NoError(t, f.inf.WaitForVersion(bounded(t), want))
		require.NoError(t, f.inf.WaitForVersion(bounded(t), "1"))
		f.stop()
	})
}

func TestWaitForVersion_ContextEndReturnsItsErrorAndTheVersionReached(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, nil)
		f.start()
		f.synced()
		reached := revString(f.src.Revision())
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		err := f.inf.WaitForVersion(ctx, revString(f.src.Revision()+5))
		require.ErrorIs(t, err, context.DeadlineExceeded)
		var se *mirror.StaleError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, reached, se.Applied)
		assert.Equal(t, revString(f.src.Revision()+5), se.Want)
		f.stop()
	})
}

func TestWaitForVersion_ManyWaitersEachWokenByItsVersion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, nil)
		f.start()
		f.synced()
		base := f.src.Revision()
		// Bounded, so that a waiter never woken fails the test.
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		const n = 200
		var wg sync.WaitGroup
		errs := make([]error, n)
		seen := make([]bool, n)
		for i := range n {
			wg.Go(func() {
				// Waiter i waits for the i-th write, and must then see it.
				errs[i] = f.inf.WaitForVersion(ctx, revString(base+int64(i)+1))
				_, seen[i] = f.inf.GetByKey("k" + strconv.Itoa(i))
			})
		}
		synctest.Wait()
		for i := range n {
			_, err := f.src.Put(item{Name: "k" + strconv.Itoa(i)})
			require.NoError(t, err)
		}
		wg.Wait()
		for i := range n {
			require.NoError(t, errs[i], "waiter %d", i)
			require.True(t, seen[i], "waiter %d returned before its write was cached", i)
		}
		f.stop()
	})
}

func TestWaitForVersion_InformerStopEndsTheWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, nil)
		f.start()
		f.synced()
		done := make(chan error, 1)
		go func() { done <- f.inf.WaitForVersion(context.Background(), "100") }()
		synctest.Wait()
		f.stop()
		require.ErrorIs(t, <-done, mirror.ErrStopped)
		// And later waits do not block either.
		require.ErrorIs(t, f.inf.WaitForVersion(context.Background(), "100"), mirror.ErrStopped)
	})
}

func TestWaitForVersion_BadVersionIsATypedError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, nil)
		f.start()
		f.synced()
		for _, v := range []string{"", "abc", "-1", "1.5"} {
			err := f.inf.WaitForVersion(bounded(t), v)
			require.ErrorIs(t, err, source.ErrInvalidVersion, "version %q", v)
		}
		f.stop()
	})
}

// unordered hides the memsource's version order.
type unordered struct{ source.ListWatcher[item] }

func TestWaitForVersion_WithoutAnOrderIsUnsupported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixtureOver(t, func(s *memsource.Source[item]) source.ListWatcher[item] {
			return unordered{s}
		}, nil)
		require.ErrorIs(t, f.inf.WaitForVersion(bounded(t), "2"), errors.ErrUnsupported)

		// The option gives the order.
		f = newFixtureOver(t, func(s *memsource.Source[item]) source.ListWatcher[item] {
			return unordered{s}
		}, func(o *mirror.InformerOptions[string, item]) { o.CompareVersions = source.CompareDecimalVersions })
		f.start()
		f.synced()
		require.NoError(t, f.inf.WaitForVersion(bounded(t), "1"))
		f.stop()
	})
}

func TestCompareDecimalVersions_OrdersRevisions(t *testing.T) {
	tests := []struct {
		a, b string
		want int
		bad  bool
	}{
		{"1", "2", -1, false},
		{"10", "9", 1, false},
		{"42", "42", 0, false},
		{"18446744073709551615", "1", 1, false},
		{"", "1", 0, true},
		{"1", "x", 0, true},
		{"-3", "1", 0, true},
	}
	for _, tt := range tests {
		got, err := source.CompareDecimalVersions(tt.a, tt.b)
		if tt.bad {
			require.ErrorIs(t, err, source.ErrInvalidVersion, "%q %q", tt.a, tt.b)
			continue
		}
		require.NoError(t, err)
		assert.Equal(t, tt.want, got, "%q vs %q", tt.a, tt.b)
	}
}
