package mirror

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestListener_NoCallBeginsAfterStopButOneThatHad races stop against a
// listener delivering a stream, stopped at a different point each round:
// once stop has returned, the handler is entered again only if the state
// word showed a call in progress, and then once at most.
func TestListener_NoCallBeginsAfterStopButOneThatHad(t *testing.T) {
	rounds := 300
	if testing.Short() {
		rounds = 50
	}
	for round := range rounds {
		var entered atomic.Int64
		h := HandlerFuncs[string]{AddFunc: func(string, bool) { entered.Add(1) }}
		p := &processor[string, string]{report: func(error) {}}
		l := newListener[string](h, nil, 0, 0, func(error) {}, func() bool { return true })
		require.NoError(t, p.add(l, func() { l.follow(&p.feed) }))
		for range 2 * listenerBatch {
			p.distribute(notification[string, string]{kind: notifyAdd, key: "k", obj: "v"}, false)
		}
		p.publish()
		go l.run(context.Background())
		for range round % 17 {
			runtime.Gosched()
		}

		p.remove(l)
		inCall := l.state.Load()&stateCall != 0
		before := entered.Load()
		<-l.done
		after := entered.Load()
		if inCall {
			require.LessOrEqual(t, after, before+1, "round %d: only the call in progress", round)
		} else {
			require.Equal(t, before, after, "round %d: no call after stop", round)
		}
	}
}
