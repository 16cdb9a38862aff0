package mirror

import (
	"math/rand/v2"
	"time"
)

// backoff computes the pauses between retries: the base pause starts at
// initial and doubles on every failure up to max, and each pause adds a
// random share of up to jitter times the base, so that many clients that
// lost the same source do not come back at the same instant.
//
// A source that has been healthy for reset since the end of the last pause
// is assumed to have recovered, and the next failure starts again from
// initial. Measuring from the end of the pause, not from the failure, counts
// only the time spent working, so a long pause cannot pass for health.
//
// The zero value never pauses; a backoff is used by one goroutine.
type backoff struct {
	initial, max, reset time.Duration
	jitter              float64 // no jitter when not positive

	base  time.Duration // base of the last pause; 0 before the first
	until time.Time     // when the last pause ends
}

// next returns the pause for a failure that happened at now.
func (b *backoff) next(now time.Time) time.Duration {
	switch {
	case b.base == 0 || now.Sub(b.until) >= b.reset:
		b.base = min(b.initial, b.max)
	case b.base > b.max/2: // doubling would pass max (or overflow)
		b.base = b.max
	default:
		b.base *= 2
	}
	d := b.base
	if b.jitter > 0 {
		d += time.Duration(b.jitter * rand.Float64() * float64(d))
	}
	b.until = now.Add(d)
	return d
}
