package storm

import "time"

// Bucket is a token bucket with time passed in: Rate tokens per second up
// to Depth, one taken per request admitted. The zero time is the start of
// the run.
type Bucket struct {
	rate, depth float64
	tokens      float64
	last        time.Duration
}

// NewBucket returns a full bucket.
func NewBucket(rate, depth float64) *Bucket {
	return &Bucket{rate: rate, depth: depth, tokens: depth}
}

// Take reports whether a token was there at now, and takes it. Times
// before the last call count as the last call's time.
func (b *Bucket) Take(now time.Duration) bool {
	if now > b.last {
		b.tokens = min(b.depth, b.tokens+b.rate*(now-b.last).Seconds())
		b.last = now
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}
