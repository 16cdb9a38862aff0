//go:build !unix

package nats_test

import "time"

// processCPU is not measured here: cpu metrics read 0.
func processCPU() time.Duration { return 0 }
