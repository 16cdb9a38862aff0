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
// A pause counts from the start of the attempt that failed, not from its
// end: an attempt that spent a while waiting on the source (a watch that
// blocked until the connection came back, or a long list) has waited part
// of its pause already. So the attempts are spaced by the backoff, yet a
// long attempt is followed by a short pause or none, and a mirror is not
// caught in a pause owed to an old failure when its source comes back.
//
// The base starts again from initial after a success (see reset), or once
// the source has been healthy for reset since the end of the last pause.
// Measuring from the end of the pause, not from the failure, counts only
// the time spent working, so a long pause cannot pass for health.
//
// The zero value never pauses; a backoff is used by one goroutine.
type backoff struct {
	initial, max, reset time.Duration
	jitter              float64 // no jitter when not positive

	base  time.Duration // base of the last pause; 0 before the first
	until time.Time     // when the last pause ends
}

// next returns the pause for a failure that happened at now, of an attempt
// that had been running for spent.
func (b *backoff) next(now time.Time, spent time.Duration) time.Duration {
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
	d = max(d-spent, 0)
	b.until = now.Add(d)
	return d
}

// succeeded records that the source worked: the next failure pauses for
// initial again.
func (b *backoff) succeeded() { b.base = 0 }
