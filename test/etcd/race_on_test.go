//go:build race

package etcd

// raceEnabled is set when the race detector is on: tests that load the
// machine for their own sake scale down.
const raceEnabled = true
