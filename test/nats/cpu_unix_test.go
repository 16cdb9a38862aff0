//go:build unix

package nats_test

import (
	"syscall"
	"time"
)

// processCPU returns the CPU time (user and system) the process has used:
// the client's alone, as the benchmarks' server runs in a child process.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
