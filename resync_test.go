package mirror

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ms is a duration in milliseconds, for tables of delays.
func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// TestProcessor_ShouldResyncFindsEachHandlerOncePerPeriod feeds the due
// check the times a real scheduler would run it at: each later than the
// time it was due, by a delay that varies from one check to the next,
// sometimes by more than a period. A handler whose period is P, scheduled
// from start, must be found due at the first check at or after each of
// start+P, start+2P, …: once per period, never twice for one, and no
// period skipped because a check ran earlier after its due time than the
// one before.
func TestProcessor_ShouldResyncFindsEachHandlerOncePerPeriod(t *testing.T) {
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	// every returns checks every period from start, each late by the next
	// of delays.
	every := func(period time.Duration, delays ...time.Duration) []time.Duration {
		at := make([]time.Duration, len(delays))
		for i, d := range delays {
			at[i] = time.Duration(i+1)*period + d
		}
		return at
	}
	tests := []struct {
		name    string
		periods []time.Duration
		checks  []time.Duration // since start, increasing
	}{
		{
			name:    "checks every period, late by varying delays",
			periods: []time.Duration{time.Second},
			checks:  every(time.Second, ms(300), ms(100), ms(450), ms(50), ms(250), ms(20), ms(400), ms(150), 0, ms(330)),
		},
		{
			name:    "periods that are not multiples of the check period",
			periods: []time.Duration{time.Second, 2500 * time.Millisecond, 1500 * time.Millisecond, 3 * time.Second},
			checks:  every(time.Second, ms(30), ms(700), ms(10), ms(400), ms(5), ms(650), ms(100), ms(2), ms(900), ms(300), ms(1), ms(500)),
		},
		{
			name:    "a check that runs more than a period late",
			periods: []time.Duration{time.Second, 2 * time.Second},
			checks:  []time.Duration{ms(1000), ms(2050), ms(4600), ms(5010), ms(6000), ms(7999), ms(8000), ms(9900)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &processor[string, string]{report: func(error) {}}
			ls := make([]*listener[string, string], len(tt.periods))
			for i, period := range tt.periods {
				ls[i] = newListener[string, string](nil, nil, period, 0, func(error) {}, func() bool { return true })
				require.NoError(t, p.add(ls[i], func() {}))
				ls[i].nextResync = start.Add(period)
			}
			prev := time.Duration(0)
			for _, at := range tt.checks {
				var want []string
				for _, period := range tt.periods {
					// Due iff one of its due times passed since the
					// last check.
					if at/period > prev/period {
						want = append(want, fmt.Sprint(period))
					}
				}
				got := p.shouldResync(start.Add(at))
				var due []string
				for _, l := range p.syncing {
					due = append(due, fmt.Sprint(l.resyncPeriod))
				}
				assert.Equal(t, want, due, "check at %v (the last at %v)", at, prev)
				assert.Equal(t, len(want) > 0, got, "check at %v", at)
				prev = at
			}
		})
	}
}

// TestProcessor_NextResyncFollowsTheHandlers pins what the informer's
// resync loop waits for: the earliest due time of the handlers registered
// at the moment, so that a handler added with a shorter period than the
// others' is resynced at its own, and the rounds slow down again once it
// is removed. Each change is signalled, so the loop looks again.
func TestProcessor_NextResyncFollowsTheHandlers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &processor[string, string]{report: func(error) {}, resyncMoved: make(chan struct{}, 1)}
		moved := func() bool {
			select {
			case <-p.resyncMoved:
				return true
			default:
				return false
			}
		}
		add := func(period time.Duration) *listener[string, string] {
			l := newListener[string, string](nil, nil, period, 0, func(error) {}, func() bool { return true })
			require.NoError(t, p.add(l, func() {}))
			return l
		}
		start := time.Now()
		assert.True(t, p.nextResync().IsZero(), "no handler with a period")

		add(10 * time.Second)
		assert.True(t, moved())
		assert.Equal(t, start.Add(10*time.Second), p.nextResync())

		time.Sleep(time.Second)
		fast := add(2 * time.Second)
		assert.True(t, moved())
		assert.Equal(t, start.Add(3*time.Second), p.nextResync(), "the late handler's own period")

		never := add(0)
		assert.False(t, moved(), "a handler without resync")
		require.True(t, p.remove(never))
		assert.False(t, moved())

		require.True(t, p.remove(fast))
		assert.True(t, moved())
		assert.Equal(t, start.Add(10*time.Second), p.nextResync(), "back to the remaining handler's")
	})
}
