package mirror

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReflector_FreshnessSaysWhenTheSourceLastConfirmedTheMirror(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newRig(ReflectorOptions{ListWatch: ListWatchOptions{Jitter: noJitter}})
		assert.Zero(t, g.r.Freshness(), "nothing confirmed before Run")
		start := time.Now()
		g.lw.page("10", "")
		w := g.lw.watch(step{after: 5 * time.Second, ev: bookmark("12").ev})
		g.runFor(t, 6*time.Second)

		f := g.r.Freshness()
		assert.Equal(t, "12", f.ResourceVersion)
		assert.Equal(t, start.Add(5*time.Second), f.ConfirmedAt, "the bookmark's arrival")
		assert.NoError(t, f.Err)

		// The source goes away: the failure shows, the confirmation
		// stays where it was.
		w.push(end(errSrcUnavailable))
		g.lw.watchErr(errSrcUnavailable)
		synctest.Wait()
		f = g.r.Freshness()
		require.ErrorIs(t, f.Err, source.ErrUnavailable)
		assert.Equal(t, start.Add(5*time.Second), f.ConfirmedAt)
		assert.Equal(t, "12", f.ResourceVersion)

		// Back: the watch opens again, then an event confirms.
		w = g.lw.watch()
		time.Sleep(time.Minute)
		synctest.Wait()
		f = g.r.Freshness()
		assert.NoError(t, f.Err, "the source accepted a watch")
		assert.Equal(t, start.Add(5*time.Second), f.ConfirmedAt, "but has not confirmed anything yet")
		w.push(addedEvent("a", "1", "13"))
		synctest.Wait()
		f = g.r.Freshness()
		assert.Equal(t, "13", f.ResourceVersion)
		assert.Equal(t, time.Now(), f.ConfirmedAt)
		g.stopRun()
	})
}

func TestReflector_FreshnessOfABurstLagsItsLastEventByAtMostTheGrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newRig(ReflectorOptions{})
		g.lw.page("10", "")
		var steps []step
		for i := range 50 {
			s := addedEvent("a", "1", string(rune('a'+i)))
			s.after = 10 * time.Millisecond
			steps = append(steps, s)
		}
		g.lw.watch(steps...)
		g.runFor(t, time.Second)
		last := g.lw.Watches()[0].At.Add(500 * time.Millisecond)
		f := g.r.Freshness()
		assert.Equal(t, string(rune('a'+49)), f.ResourceVersion)
		assert.LessOrEqual(t, last.Sub(f.ConfirmedAt), freshnessGrain)
		assert.True(t, !f.ConfirmedAt.After(last))
		g.stopRun()
	})
}
