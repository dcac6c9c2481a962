package httpretry

import (
	"math"
	"net/http"
	"strings"
	"time"
)

// maxDelaySeconds is the largest delta-seconds value that fits a Duration.
const maxDelaySeconds = int64(math.MaxInt64 / time.Second)

// parseRetryAfter reads the Retry-After header of a response (RFC 9110
// §10.2.3) and returns how long the server asked the client to wait.
//
// ok is false when there is no usable value: the header is absent, empty,
// negative or not of either form (decimal seconds aside: see parseDelay).
// Those are ignored and the computed backoff applies. A delta-seconds
// value too large for a Duration saturates at the
// largest Duration rather than being dropped: the server asked for a very
// long pause, and the caller's cap turns that into "do not retry".
//
// An HTTP-date is measured against the response's own Date header when it
// parses (plus its Age, when a cache served it: a 503 kept 20 s and told
// to wait 1.5 s more would otherwise wait 21.5 s), and against now
// otherwise, so skew between the client's and the server's clocks does
// not shift the wait. Date has whole seconds, so the
// wait ends up to a second after the date, by the part of Date's second
// gone when the response was sent: that also spreads clients told one
// date over the second after it (measured against now when the clocks
// agreed within Date's second, the simulator's fleet told one date came
// back at 3.69x of capacity, against 1.53x, while the line paced told
// steps, before 2026-12-07; TestRetryAfterHerd). A date in
// the past means no wait.
func parseRetryAfter(h http.Header, now time.Time) (wait time.Duration, ok bool) {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if d, ok := parseDelay(v); ok {
		return d, true
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	if date, err := http.ParseTime(h.Get("Date")); err == nil {
		now = date.Add(age(h))
	}
	return max(at.Sub(now), 0), true
}

// namesADate reports whether h's Retry-After names a moment (an HTTP
// date) rather than a delay.
func namesADate(h http.Header) bool {
	_, delay := parseDelay(strings.TrimSpace(h.Get("Retry-After")))
	return !delay
}

// age returns the response's Age (RFC 9111 §5.1): how long a cache kept
// it since its Date. Zero when absent or not delta-seconds.
func age(h http.Header) time.Duration {
	secs, ok := parseDelaySeconds(strings.TrimSpace(h.Get("Age")))
	if !ok {
		return 0
	}
	return time.Duration(min(secs, maxDelaySeconds)) * time.Second
}

// parseDelay parses delta-seconds, and the decimal seconds some servers
// send ("2.128"): RFC 9110 has no fraction, but ignoring one would retry
// before the time the server named. A fraction is rounded up to the
// nanosecond; a value too large for a Duration saturates.
func parseDelay(v string) (time.Duration, bool) {
	whole, frac, dotted := strings.Cut(v, ".")
	secs, ok := parseDelaySeconds(whole)
	if !ok || whole == "" || dotted && (frac == "" || strings.Trim(frac, "0123456789") != "") {
		return 0, false
	}
	var ns int64
	for i := range 9 { // nanoseconds: the first nine digits, padded with zeros
		ns *= 10
		if i < len(frac) {
			ns += int64(frac[i] - '0')
		}
	}
	if len(frac) > 9 && strings.Trim(frac[9:], "0") != "" { // finer than a nanosecond: rounded up
		ns++
	}
	if secs > maxDelaySeconds || int64(math.MaxInt64)-secs*int64(time.Second) < ns {
		return math.MaxInt64, true
	}
	return time.Duration(secs)*time.Second + time.Duration(ns), true
}

// parseDelaySeconds parses 1*DIGIT. A value too large for int64 saturates.
func parseDelaySeconds(v string) (int64, bool) {
	var n int64
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		if n > (math.MaxInt64-int64(c-'0'))/10 {
			n = math.MaxInt64
			continue
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}
