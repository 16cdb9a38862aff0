package mirror_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/source"
)

func TestGetAfterWrite_WaitsUntilTheCacheHasTheRecordedWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, ps := newPrefixFixture(t)
		_, err := ps.Put(item{Name: "a", Group: "a", Val: 1})
		require.NoError(t, err)
		f.start()
		f.synced()
		release := ps.pause()
		rev, err := ps.Put(item{Name: "a", Group: "a", Val: 2})
		require.NoError(t, err)
		require.NoError(t, f.inf.RecordWrite("a", revString(rev)))
		assert.False(t, f.inf.WriteApplied("a"))
		assert.True(t, f.inf.WriteApplied("b"), "no write recorded for b")

		type result struct {
			it  item
			ok  bool
			err error
		}
		done := make(chan result, 1)
		go func() {
			it, ok, err := f.inf.GetAfterWrite(bounded(t), "a", mirror.ConsistentOptions{Timeout: time.Minute})
			done <- result{it, ok, err}
		}()
		synctest.Wait()
		select {
		case r := <-done:
			t.Fatalf("returned before the cache had the write: %+v", r)
		default:
		}
		release()
		synctest.Wait()
		r := <-done
		require.NoError(t, r.err)
		require.True(t, r.ok)
		assert.Equal(t, 2, r.it.Val, "the read sees the program's own write")
		assert.True(t, f.inf.WriteApplied("a"))
		f.stop()
	})
}

func TestGetAfterWrite_KeyWithoutAPendingWriteDoesNotWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, ps := newPrefixFixture(t)
		_, err := ps.Put(item{Name: "b", Group: "a", Val: 1})
		require.NoError(t, err)
		f.start()
		f.synced()
		release := ps.pause()
		rev, err := ps.Put(item{Name: "a", Group: "a"})
		require.NoError(t, err)
		require.NoError(t, f.inf.RecordWrite("a", revString(rev)))
		before := time.Now()
		it, ok, err := f.inf.GetAfterWrite(t.Context(), "b", mirror.ConsistentOptions{})
		require.NoError(t, err)
		require.True(t, ok)
		assert.Equal(t, 1, it.Val)
		assert.Equal(t, before, time.Now(), "no wait for another key's write")
		release()
		f.stop()
	})
}

func TestGetAfterWrite_BoundEndsInATypedErrorOrAReadOfTheSource(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, ps := newPrefixFixture(t)
		f.start()
		f.synced()
		release := ps.pause()
		rev, err := ps.Put(item{Name: "a", Group: "a", Val: 7})
		require.NoError(t, err)
		require.NoError(t, f.inf.RecordWrite("a", revString(rev)))

		_, _, err = f.inf.GetAfterWrite(t.Context(), "a", mirror.ConsistentOptions{Timeout: time.Second})
		require.ErrorIs(t, err, mirror.ErrNotCurrent)
		var se *mirror.StaleError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, revString(rev), se.Want)

		it, ok, err := f.inf.GetAfterWrite(t.Context(), "a", mirror.ConsistentOptions{Timeout: time.Second, Fallback: true})
		require.NoError(t, err)
		require.True(t, ok, "the source has the write")
		assert.Equal(t, 7, it.Val)
		assert.False(t, f.inf.WriteApplied("a"), "the cache still lacks it")
		release()
		f.stop()
	})
}

func TestRecordWrite_KeepsTheNewerVersionAndRefusesBadOnes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, ps := newPrefixFixture(t)
		f.start()
		f.synced()
		release := ps.pause()
		first, err := ps.Put(item{Name: "a", Group: "a", Val: 1})
		require.NoError(t, err)
		second, err := ps.Put(item{Name: "a", Group: "a", Val: 2})
		require.NoError(t, err)
		require.NoError(t, f.inf.RecordWrite("a", revString(second)))
		require.NoError(t, f.inf.RecordWrite("a", revString(first)), "an older record arriving late")
		require.ErrorIs(t, f.inf.RecordWrite("a", "not-a-version"), source.ErrInvalidVersion)

		_, _, err = f.inf.GetAfterWrite(t.Context(), "a", mirror.ConsistentOptions{Timeout: time.Second})
		var se *mirror.StaleError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, revString(second), se.Want, "the newer write is the one waited for")
		release()
		synctest.Wait()
		assert.True(t, f.inf.WriteApplied("a"))
		f.stop()
	})
}

func TestRecordRevision_RecordsANumericRevisionAsRecordWriteDoes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, ps := newPrefixFixture(t)
		f.start()
		f.synced()
		release := ps.pause()
		rev, err := ps.Put(item{Name: "a", Group: "a", Val: 1})
		require.NoError(t, err)
		require.NoError(t, f.inf.RecordRevision("a", rev))
		assert.False(t, f.inf.WriteApplied("a"), "the cache has yet to apply the recorded revision")
		require.ErrorIs(t, f.inf.RecordRevision("a", -1), source.ErrInvalidVersion)

		_, _, err = f.inf.GetAfterWrite(t.Context(), "a", mirror.ConsistentOptions{Timeout: time.Second})
		var se *mirror.StaleError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, revString(rev), se.Want)
		release()
		synctest.Wait()
		assert.True(t, f.inf.WriteApplied("a"))
		f.stop()
	})
}
