//go:build !unix

package mirrorprom_test

import "time"

// processCPU is not measured here: cpu-ns metrics read 0.
func processCPU() time.Duration { return 0 }
