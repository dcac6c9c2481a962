package storm

import (
	"strconv"
	"time"
)

// Reply is the server's answer to one attempt.
type Reply struct {
	// Verdict decides the status: 200, 503, or 429 for Throttled.
	Verdict Verdict
	// RetryAfter, when positive, is sent as Retry-After in whole seconds.
	RetryAfter time.Duration
}

// Header is the Retry-After header's value, "" for none. Seconds rather
// than an HTTP-date, because every peer that honours Retry-After reads
// seconds and one of them (failsafe) reads nothing else.
func (r Reply) Header() string {
	if r.RetryAfter <= 0 {
		return ""
	}
	return strconv.FormatInt(int64(r.RetryAfter/time.Second), 10)
}

// call is the server's memory of one logical request, known by the
// number the client sends in requestIDHeader.
type call struct {
	attempts int
	told     time.Duration // the date named by its latest Retry-After
	hasTold  bool
}

// early reports whether an attempt at now comes before the date the
// request was last told. A nil call (untracked) is never early.
func (c *call) early(now time.Duration) bool {
	return c != nil && c.hasTold && now < c.told
}

// answered notes an attempt at now and the Retry-After of its answer.
func (c *call) answered(now, retryAfter time.Duration) {
	if c == nil {
		return
	}
	c.attempts++
	if retryAfter > 0 {
		c.told, c.hasTold = now+retryAfter, true
	}
}

// retryAfter is the Retry-After an answer with verdict v at now carries,
// 0 for none: RetryAfter on RetryAfterLong's 429s; on RetryAfterHerd's
// outage 503s, RetryAfter when set, else the time left until the outage's
// end. It is whole seconds, rounded up, so the date named is never before
// the one meant.
func (s Scenario) retryAfter(now time.Duration, v Verdict) time.Duration {
	switch {
	case v == Throttled:
		return ceilSeconds(s.RetryAfter)
	case v == Down && s.Mode == RetryAfterHerd && s.RetryAfter > 0:
		return ceilSeconds(s.RetryAfter)
	case v == Down && s.Mode == RetryAfterHerd:
		return ceilSeconds(s.OutageEnd - now)
	}
	return 0
}

// ceilSeconds rounds d up to whole seconds, at least one.
func ceilSeconds(d time.Duration) time.Duration {
	return max(time.Second, (d+time.Second-1)/time.Second*time.Second)
}

// requestIDHeader carries the logical request's number on every attempt,
// so that the server can tell a retry from a fresh request. Every system
// under comparison copies the caller's headers onto each attempt.
const requestIDHeader = "X-Storm-Request"
