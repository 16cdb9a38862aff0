//go:build !unix

package bench

import "time"

// processCPU is not measured here: cpu-ns metrics read 0.
func processCPU() time.Duration { return 0 }
