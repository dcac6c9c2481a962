package httpretry

import (
	"math"
	"time"
)

// Defaults used when a Policy field is left at its zero value.
const (
	// DefaultMaxRetries is the retries after the first attempt.
	DefaultMaxRetries = 5
	// DefaultBaseDelay is the backoff before the first retry, which later
	// ones grow from (see Policy.Delay), before jitter: the default full
	// jitter draws the first wait from [0, 200 ms).
	DefaultBaseDelay = 200 * time.Millisecond
	// DefaultMaxDelay caps every backoff delay.
	DefaultMaxDelay = 10 * time.Second
)

// NoRetries is the Policy.MaxRetries that makes every request a single
// attempt. Any negative MaxRetries means the same.
const NoRetries = -1

// Jitter selects how a backoff delay is randomized.
type Jitter int

const (
	// JitterFull waits rand[0, d) where d = min(MaxDelay, BaseDelay·2^(n-1))
	// for retry n. It spreads clients best and is the default.
	JitterFull Jitter = iota
	// JitterEqual waits d/2 + rand[0, d/2): never less than half the
	// exponential delay.
	JitterEqual
	// JitterDecorrelated waits min(MaxDelay, rand[BaseDelay, 3·p)), p the
	// previous wait but at least BaseDelay (so the first retry waits up to
	// 3·BaseDelay) and at most MaxDelay, growing from it instead of from
	// the retry number. With the Transport, p is the wait its previous
	// retry took, a Retry-After's included: a Retry-After lengthens the
	// draws after it, those of a Retry-After over MaxDelay to MaxDelay.
	JitterDecorrelated
	// JitterNone waits exactly d: lockstep retries, for tests and for
	// callers that add their own spread.
	JitterNone
)

// Policy says how many attempts a request gets and how long to wait between
// them. The zero value is the default: 5 retries, exponential backoff from
// 200 ms capped at 10 s, full jitter.
//
// Out-of-range values have a fixed meaning and never panic: a negative
// MaxRetries means no retries; a negative BaseDelay means retries are not
// delayed (a Retry-After floor still applies); a MaxDelay of zero or less
// means the default cap; a BaseDelay above MaxDelay is clamped to MaxDelay;
// an unknown Jitter is treated as JitterFull.
type Policy struct {
	// MaxRetries is the number of attempts after the first one.
	// Zero means DefaultMaxRetries; NoRetries (or any negative) means none.
	MaxRetries int
	// BaseDelay is the exponential backoff's first step. Zero means
	// DefaultBaseDelay; negative means retries are not delayed.
	BaseDelay time.Duration
	// MaxDelay caps every computed wait, not a Retry-After (see
	// Transport.MaxRetryAfter). Zero or negative means DefaultMaxDelay.
	MaxDelay time.Duration
	// Jitter is the randomization; the zero value is JitterFull.
	Jitter Jitter
}

// retries returns the resolved number of retries after the first attempt.
func (p Policy) retries() int {
	switch {
	case p.MaxRetries < 0:
		return 0
	case p.MaxRetries == 0:
		return DefaultMaxRetries
	}
	return p.MaxRetries
}

// bounds returns the resolved base delay and cap, with base ≤ cap.
func (p Policy) bounds() (base, limit time.Duration) {
	base, limit = p.BaseDelay, p.MaxDelay
	if base == 0 {
		base = DefaultBaseDelay
	}
	if base < 0 {
		base = 0
	}
	if limit <= 0 {
		limit = DefaultMaxDelay
	}
	return min(base, limit), limit
}

// Delay returns the wait before retry n (n = 1 is the first retry), given the
// previous wait and a random value u in [0, 1). It is a pure function: the
// same arguments give the same result, and for every n, prev and u the result
// lies in [0, MaxDelay]. A u outside [0, 1) is clamped into it, and NaN
// counts as 0 (with full jitter, no wait at all); n below 1
// counts as 1. It is exported so that a caller can print or test the waits
// a Policy gives, and use the same backoff for work that is not HTTP; the
// Transport adds Retry-After and storm control to it.
func (p Policy) Delay(n int, prev time.Duration, u float64) time.Duration {
	base, limit := p.bounds()
	u = clampUnit(u)
	switch p.Jitter {
	case JitterNone:
		return exponential(n, base, limit)
	case JitterEqual:
		return equalJitter(exponential(n, base, limit), u)
	case JitterDecorrelated:
		return decorrelatedJitter(prev, base, limit, u)
	default:
		return fullJitter(exponential(n, base, limit), u)
	}
}

// exponential returns min(limit, base·2^(n-1)) without overflowing for any n.
func exponential(n int, base, limit time.Duration) time.Duration {
	if base <= 0 {
		return 0
	}
	shift := max(n, 1) - 1
	if shift >= 63 || base > limit>>shift { // base<<shift ≤ limit fits for shift ≤ 62
		return limit
	}
	return base << shift
}

// fullJitter returns rand[0, d).
func fullJitter(d time.Duration, u float64) time.Duration {
	return scale(d, u)
}

// equalJitter returns d/2 + rand[0, d/2).
func equalJitter(d time.Duration, u float64) time.Duration {
	half := d / 2
	return half + scale(d-half, u)
}

// scale returns d·u for u in [0, 1), never above d: float64 rounding near
// math.MaxInt64 could otherwise overshoot or overflow the conversion.
func scale(d time.Duration, u float64) time.Duration {
	f := float64(d) * u
	if f >= float64(d) {
		return d
	}
	return min(time.Duration(f), d)
}

// decorrelatedJitter returns min(limit, rand[base, 3·prev)), computed in
// floating point so that 3·prev cannot overflow.
func decorrelatedJitter(prev, base, limit time.Duration, u float64) time.Duration {
	if base <= 0 {
		return 0
	}
	prev = min(max(prev, base), limit)
	d := float64(base) + u*(3*float64(prev)-float64(base))
	if d >= float64(limit) {
		return limit
	}
	return min(max(time.Duration(d), base), limit) // float64 rounds a base of years below itself
}

// clampUnit maps u into [0, 1); NaN becomes 0.
func clampUnit(u float64) float64 {
	switch {
	case !(u > 0): // also catches NaN
		return 0
	case u >= 1:
		return math.Nextafter(1, 0)
	}
	return u
}

// times returns n·d for n, d ≥ 0, maxDuration when that overflows.
func times(n int, d time.Duration) time.Duration {
	if n > 0 && d > maxDuration/time.Duration(n) {
		return maxDuration
	}
	return time.Duration(n) * d
}
