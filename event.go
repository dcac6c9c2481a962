package httpretry

import (
	"net/http"
	"time"
)

// RetryEvent describes one failed attempt, as given to Transport.OnRetry and
// Transport.OnGiveUp.
type RetryEvent struct {
	// Request is the caller's request. Read it; never modify it.
	Request *http.Request
	// Attempt is the 1-based number of the attempt that failed.
	Attempt int
	// Response is the attempt's response, nil when Err is set. In OnRetry
	// its body is already drained and closed: read the status and headers
	// only. In OnGiveUp it is the response RoundTrip is about to return:
	// leave its body to the caller.
	Response *http.Response
	// Err is the attempt's transport error, nil when Response is set.
	Err error
	// Reason is the classifier's reason the outcome is retryable, such as
	// "status 503" or "connection reset".
	Reason string
	// Wait is the backoff OnRetry's caller is about to wait before the next
	// attempt, Retry-After included; zero in OnGiveUp. A retry that the host
	// gate holds (see HostGate) may wait longer, as long as the gate's
	// schedule for that host says: the hold is not known in advance.
	Wait time.Duration
	// Stop is why OnGiveUp's caller makes no further attempt; StopNone in
	// OnRetry.
	Stop StopReason
}

// Status returns the response's status code, or 0 when the attempt failed
// with an error.
func (e RetryEvent) Status() int {
	if e.Response == nil {
		return 0
	}
	return e.Response.StatusCode
}
