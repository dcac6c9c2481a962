package httpretry

import (
	"log/slog"
	"net/http"
	"net/url"
	"time"
)

// RetryEvent describes one failed attempt, as given to Transport.OnRetry
// (the attempt is retried) and Transport.OnGiveUp (it is not).
type RetryEvent struct {
	// Request is the caller's request. Read it; never modify it.
	Request *http.Request
	// Attempt is the 1-based number of the attempt that failed. For a
	// retry the deadline cut off (OnGiveUp, StopDeadline), Attempt is the
	// number of that retry, and Response, Err and Reason are those of the
	// attempt before it, whose outcome RoundTrip returns.
	Attempt int
	// Response is the attempt's response, nil when Err is set. In OnRetry
	// its body is already drained and closed: read the status and headers
	// only. In OnGiveUp it is the response RoundTrip is about to return,
	// its body left to the caller, except when RoundTrip returns an error
	// instead (StopCanceled, or a response whose body could not be kept
	// for a retry not sent): then the body is already closed.
	Response *http.Response
	// Err is the attempt's transport error, nil when Response is set.
	Err error
	// Reason is the classifier's reason the outcome is retryable, such as
	// "status 503" or "connection reset".
	Reason string
	// Wait is the time waited after this attempt: in OnRetry, before the
	// retry about to be sent (its backoff, Retry-After included, as drawn,
	// and any hold, as measured; a timer's own slack, most often under a
	// millisecond, is not counted); in OnGiveUp, before the request gave
	// up (zero when it gave up at once; measured when a cancel or the
	// deadline cut a wait short). It starts once the attempt's response
	// has been drained, which may take up to 100 ms more.
	Wait time.Duration
	// Held is the part of Wait for which storm control's host gate held
	// the retry in line past the step its own backoff set for it (see
	// StormControl), the steps it skipped since included; zero for a
	// retry that went at its step. A held request's steps follow its
	// backoff from the steps it skipped, so its Wait may differ from its
	// nominal backoff with Held zero.
	Held time.Duration
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

// LogValue makes a RetryEvent log as a group: the request's method and URL
// (without its query, which may hold secrets), the attempt, its status or
// error, the reason, the wait (and the part held, when held) and the stop
// reason, so that logger.Info("retry", "event", e) prints what happened.
func (e RetryEvent) LogValue() slog.Value {
	attrs := make([]slog.Attr, 0, 8)
	if r := e.Request; r != nil && r.URL != nil {
		u := *r.URL
		if u.Opaque != "" { // a request-URI sent as it is, which carries its own query, and may a user
			if p, err := url.Parse(u.Scheme + ":" + u.Opaque); err == nil {
				if p.Host == "" && p.User == nil && p.OmitHost { // a path alone: the request went to URL.Host
					p.Host, p.OmitHost = u.Host, false
				}
				u = *p
			} else {
				u.Opaque = ""
			}
		}
		u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment, u.User = "", false, "", "", nil
		attrs = append(attrs, slog.String("method", r.Method), slog.String("url", u.String()))
	}
	attrs = append(attrs, slog.Int("attempt", e.Attempt))
	if e.Response != nil {
		attrs = append(attrs, slog.Int("status", e.Response.StatusCode))
	}
	if e.Err != nil {
		attrs = append(attrs, slog.String("error", e.Err.Error()))
	}
	attrs = append(attrs, slog.String("reason", e.Reason), slog.Duration("wait", e.Wait))
	if e.Held > 0 {
		attrs = append(attrs, slog.Duration("held", e.Held))
	}
	if e.Stop != StopNone {
		attrs = append(attrs, slog.Any("stop", e.Stop))
	}
	return slog.GroupValue(attrs...)
}
