package httpretry

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of a Budget whose fields are left at zero, as in Finagle's
// RetryBudget and the AWS SDKs' retry quota: a retry for every two
// requests, and ten a second besides.
const (
	DefaultBudgetRatio   = 0.5 // tokens per request sent
	DefaultBudgetReserve = 10  // tokens per second
	DefaultBudgetBurst   = 100 // tokens held at most, and at first
)

// Budget bounds the wasted retries of all the requests that share it, as a
// token bucket: each retry charged spends a token, given back when its
// request ends in an answer (a response the classifier calls final; a
// final transport error gives nothing back, as the host never answered),
// so that only the retries of requests that fail in the end cost anything.
// Tokens come at Ratio per request sent and Reserve per second, up to
// Burst. A retry it is asked about takes its token when asked, so that
// retries asked about at once cannot count on the same one, and gets it
// back if it is never sent; one it is not asked about, sent while the
// bucket is empty, spends nothing. So the bucket never goes below empty,
// and a storm's retries leave no debt that refuses retries long after it.
//
// It acts only with the host gate off (StormControl.NoHostGate), in its
// place: it charges every retry and is asked about every one but that of
// the only request of its Transport retrying; a retry that finds less
// than one token is refused, and its request returns its last outcome at
// once, with StopBudget. With the host gate on, the gate bounds each
// host's retries, and a Budget its Storm names is neither asked nor
// charged: no fleet figure of the storm simulator moved with it or
// without it, and it could only refuse retries (docs/storm-control.md,
// rule 7).
//
// Its zero value uses the defaults. Set one *Budget on several Transports
// to bound them together; one with the host gate on neither spends from
// it nor earns it tokens. It must not be copied after first use, its
// fields must not change once it is in use, and it is safe for concurrent
// use. While the bucket is full a request sent costs one atomic load.
type Budget struct {
	// Ratio is the tokens added per request sent. Zero or NaN means
	// DefaultBudgetRatio; negative means none.
	Ratio float64
	// Reserve is the tokens added per second. Zero or NaN means
	// DefaultBudgetReserve; negative means none.
	Reserve float64
	// Burst is the most tokens held. Zero or NaN means DefaultBudgetBurst;
	// negative means none: only lone requests retry.
	Burst float64

	short    atomic.Bool  // below Burst: requests sent earn tokens
	requests atomic.Int64 // requests sent while short

	mu      sync.Mutex
	deficit float64   // tokens below Burst; take keeps it at most Burst
	last    time.Time // of the latest refill
	counted int64     // requests already turned into tokens
}

// countRequest counts a request sent, only while the bucket is short: the
// atomic add cost the success path 4 ns of 30 (BenchmarkRoundTripSuccess).
// A nil Budget (off) counts nothing.
func (b *Budget) countRequest() {
	if b != nil && b.short.Load() {
		b.requests.Add(1)
	}
}

// available returns the tokens held at now: a retry is refused below 1.
func (b *Budget) available(now time.Time) float64 { return b.add(0, now) }

// take spends a token at now if the bucket holds one, and reports whether
// it did.
func (b *Budget) take(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.addLocked(0, now) < 1 {
		return false
	}
	b.addLocked(-1, now)
	return true
}

// add adds n tokens at now, after those earned since the last call, and
// returns the tokens held: a request ended in an answer refunds its
// retries.
func (b *Budget) add(n float64, now time.Time) float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.addLocked(n, now)
}

// addLocked is add with b.mu held. A time before the latest one seen
// earns nothing, so that callers racing with slightly older clocks do not
// count twice.
func (b *Budget) addLocked(n float64, now time.Time) float64 {
	reqs := b.requests.Load()
	earned := resolve(b.Ratio, DefaultBudgetRatio)*float64(reqs-b.counted) +
		resolve(b.Reserve, DefaultBudgetReserve)*max(now.Sub(b.last), 0).Seconds()
	b.deficit = max(b.deficit-earned-n, 0)
	b.counted, b.last = reqs, laterOf(b.last, now)
	if short := b.deficit > 0; short != b.short.Load() {
		b.short.Store(short)
	}
	return resolve(b.Burst, DefaultBudgetBurst) - b.deficit
}

// resolve returns def for zero or NaN, zero for a negative v, and v
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
