package mirror_test

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/listwatch/mirror"
)

// resyncsOf counts the resyncs of the object named name that rec was
// handed since it was last taken: updates from a state to itself.
func resyncsOf(rec *recorder, name string) int {
	n := 0
	for _, e := range rec.take() {
		if e.Op == "update" && e.Obj.Name == name && e.Old == e.Obj {
			n++
		}
	}
	return n
}

// lagIndex is an index whose function takes, for an item of group "lag",
// Val milliseconds of fake time: applying that item to the cache keeps
// the informer busy, as a large batch or a slow machine would, while
// later changes and resyncs wait their turn.
func lagIndex(o *mirror.InformerOptions[string, item]) {
	o.Indexers["lag"] = func(it item) ([]string, error) {
		if it.Group == "lag" {
			time.Sleep(time.Duration(it.Val) * time.Millisecond)
		}
		return nil, nil
	}
}

// handlerAt is a handler registered with a resync period: before Run if
// after is zero, else that long after the informer has synced.
type handlerAt struct {
	period time.Duration
	after  time.Duration
}

func TestInformer_ResyncKeepsEveryHandlersPeriod(t *testing.T) {
	tests := []struct {
		name     string
		informer time.Duration // InformerOptions.ResyncPeriod
		handlers []handlerAt
		// want is each handler's number of resyncs in the 10.5 s
		// after the informer synced: one per period.
		want []int
	}{
		{
			name:     "periods that are not multiples of the shortest",
			handlers: []handlerAt{{period: time.Second}, {period: 2500 * time.Millisecond}, {period: 3 * time.Second}},
			want:     []int{10, 4, 3},
		},
		{
			name:     "handlers added late, at their own periods",
			handlers: []handlerAt{{period: time.Second}, {period: 1500 * time.Millisecond, after: 300 * time.Millisecond}, {period: 2 * time.Second, after: 1700 * time.Millisecond}},
			want:     []int{10, 6, 4},
		},
		{
			name:     "a late handler on an informer without resync",
			handlers: []handlerAt{{period: -1}, {period: 2 * time.Second, after: 400 * time.Millisecond}},
			want:     []int{0, 5},
		},
		{
			name:     "a late handler with a shorter period than the informer's",
			informer: 10 * time.Second,
			handlers: []handlerAt{{}, {period: 2 * time.Second, after: 100 * time.Millisecond}},
			want:     []int{1, 5},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFixture(t, func(o *mirror.InformerOptions[string, item]) { o.ResyncPeriod = tt.informer })
				f.src.Put(item{Name: "a", Val: 1})
				recs := make([]*recorder, len(tt.handlers))
				add := func(i int) {
					recs[i] = &recorder{}
					_, err := f.inf.AddEventHandler(recs[i], mirror.HandlerOptions{ResyncPeriod: tt.handlers[i].period})
					require.NoError(t, err)
				}
				for i, h := range tt.handlers {
					if h.after == 0 {
						add(i)
					}
				}
				f.start()
				f.synced()
				elapsed := time.Duration(0)
				for i, h := range tt.handlers {
					if h.after > 0 {
						time.Sleep(h.after - elapsed)
						elapsed = h.after
						add(i)
					}
				}
				time.Sleep(10500*time.Millisecond - elapsed)
				synctest.Wait()
				for i, rec := range recs {
					assert.Equal(t, tt.want[i], resyncsOf(rec, "a"), "handler %d, period %v", i, tt.handlers[i].period)
				}
				f.stop()
			})
		})
	}
}

// TestInformer_ResyncNotLostWhileApplyLags has the informer busy applying
// a change across a due time of both handlers and the next due time of
// one: the first round waits, and the second must not take its place. The
// one that was due twice gets one resync for both.
func TestInformer_ResyncNotLostWhileApplyLags(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, lagIndex)
		f.src.Put(item{Name: "a", Val: 1})
		every1s, every2s := &recorder{}, &recorder{}
		for rec, period := range map[*recorder]time.Duration{every1s: time.Second, every2s: 2 * time.Second} {
			_, err := f.inf.AddEventHandler(rec, mirror.HandlerOptions{ResyncPeriod: period})
			require.NoError(t, err)
		}
		f.start()
		f.synced()

		time.Sleep(1500 * time.Millisecond)
		// Applying it lasts from 1.5 s to 3.2 s.
		f.src.Put(item{Name: "slow", Group: "lag", Val: 1700})
		time.Sleep(3 * time.Second)
		synctest.Wait()
		// 4.5 s: every1s resynced at 1 s, at 3.2 s for 2 s and 3 s, at
		// 4 s; every2s at 3.2 s for 2 s, at 4 s.
		assert.Equal(t, 3, resyncsOf(every1s, "a"))
		assert.Equal(t, 2, resyncsOf(every2s, "a"))
		f.stop()
	})
}

// TestInformer_ResyncKeepsPeriodWhileApplyLagsByVaryingDelays keeps the
// informer busy applying one change after another, each taking a
// different time, so that each round of a handler's resyncs is applied
// late, by a delay that varies from round to round as a real scheduler's
// does: a round applied sooner after its due time than the one before
// must not be skipped, and the delays must not add up.
func TestInformer_ResyncKeepsPeriodWhileApplyLagsByVaryingDelays(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, lagIndex)
		f.src.Put(item{Name: "a", Val: 1})
		rec := &recorder{}
		_, err := f.inf.AddEventHandler(rec, mirror.HandlerOptions{ResyncPeriod: time.Second})
		require.NoError(t, err)
		f.start()
		f.synced()

		// Back to back, changes that take these many ms to apply; none
		// ends on a whole second, when a round is due.
		lags := []int{870, 430, 910, 260, 650, 340, 780, 120}
		const end = 10500 * time.Millisecond
		for i, elapsed := 0, time.Duration(0); elapsed < end; i++ {
			lag := lags[i%len(lags)]
			f.src.Put(item{Name: fmt.Sprint("slow", i), Group: "lag", Val: lag})
			d := min(time.Duration(lag)*time.Millisecond, end-elapsed)
			time.Sleep(d)
			elapsed += d
		}
		synctest.Wait()
		assert.Equal(t, 10, resyncsOf(rec, "a"), "one resync per period")
		f.stop()
	})
}
