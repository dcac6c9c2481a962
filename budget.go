package httpretry

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of a Budget whose fields are left at zero.
const (
	// DefaultBudgetRatio is the tokens each request adds: half a retry,
	// so retries that end in failure add at most half to a busy
	// Transport's load (Finagle's RetryBudget allows a fifth; retries
	// that end in success cost nothing here, so the ratio only limits
	// waste).
	DefaultBudgetRatio = 0.5
	// DefaultBudgetReserve is the tokens added per second whatever the
	// traffic, so that a Transport sending few requests still retries
	// them (Finagle's minimum of 10 per second).
	DefaultBudgetReserve = 10
	// DefaultBudgetBurst is the most tokens the bucket holds, and what it
	// starts with: 100 retries, as the AWS SDKs' retry quota allows.
	DefaultBudgetBurst = 100
)

// Budget bounds the wasted retries of all the requests that share it, as a
// token bucket: each retry sent spends a token, and gets it back when its
// request ends in an answer (any outcome the classifier calls final), so
// only retries of requests that fail in the end cost anything. Tokens come
// at Ratio per request sent and Reserve per second, up to Burst. A retry
// that finds less than one token is refused: its request returns its last
// outcome at once, with StopBudget.
//
// A budget never refuses a first attempt, nor the retry of a request that
// is the only one of its Transport retrying (a lone request cannot make a
// storm: MaxRetries bounds it), nor a retry that the host gate held and
// released. Its zero value is ready and uses the defaults. Set one *Budget
// on several Transports to bound them together. A Budget must not be
// copied after first use, its fields must not change once it is in use,
// and it is safe for concurrent use.
//
// Counting a request is one atomic add, all that a request that succeeds at
// once pays.
type Budget struct {
	// Ratio is the tokens added per request sent. Zero means
	// DefaultBudgetRatio; negative means none.
	Ratio float64
	// Reserve is the tokens added per second. Zero means
	// DefaultBudgetReserve; negative means none.
	Reserve float64
	// Burst is the most tokens held, and the number held at first. Zero
	// means DefaultBudgetBurst; negative means none, so that only lone
	// requests and released retries are retried.
	Burst float64

	requests atomic.Int64 // requests ever counted

	mu      sync.Mutex
	started bool
	tokens  float64
	last    time.Time // of the latest refill
	counted int64     // requests already turned into tokens
}

// countRequest records a request sent.
func (b *Budget) countRequest() { b.requests.Add(1) }

// allows reports whether a retry may be sent at now.
func (b *Budget) allows(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(now)
	return b.tokens >= 1
}

// spend charges one retry sent at now. It may leave the bucket in debt: a
// retry cleared before its wait is sent even if others spent the token
// meanwhile.
func (b *Budget) spend(now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(now)
	b.tokens--
}

// refund gives back n tokens at now: their request ended in an answer.
func (b *Budget) refund(n int, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(now)
	b.tokens = min(b.tokens+float64(n), b.burst())
}

// available returns the tokens held at now.
func (b *Budget) available(now time.Time) float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(now)
	return b.tokens
}

// refill adds the tokens earned since the last refill. A time before the
// latest one seen adds nothing, so callers racing with slightly older
// clocks do not move it back. b.mu is held.
func (b *Budget) refill(now time.Time) {
	n := b.requests.Load()
	if !b.started {
		b.started, b.tokens, b.last, b.counted = true, b.burst(), now, n
		return
	}
	earned := resolve(b.Ratio, DefaultBudgetRatio)*float64(n-b.counted) +
		resolve(b.Reserve, DefaultBudgetReserve)*max(now.Sub(b.last), 0).Seconds()
	b.tokens = min(b.tokens+earned, b.burst())
	b.counted, b.last = n, laterOf(b.last, now)
}

// burst resolves Burst.
func (b *Budget) burst() float64 { return resolve(b.Burst, DefaultBudgetBurst) }

// resolve returns def for zero (or NaN), zero for a negative v, and v
// otherwise, an infinite v made finite so that it never meets a zero count.
func resolve(v, def float64) float64 {
	switch {
	case v == 0 || math.IsNaN(v):
		return def
	case v < 0:
		return 0
	}
	return min(v, math.MaxFloat32)
}
