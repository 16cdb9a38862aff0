//go:build race

package workqueue

// raceEnabled: the race detector slows everything down several times, so
// the largest tests run smaller.
const raceEnabled = true
