package httpretry

import (
	"errors"
	"fmt"
	"slices"
)

// ErrAttemptTimeout is the cause of an attempt cut short by
// Transport.AttemptTimeout. Such an attempt is retried; when it was the last
// one, the returned error wraps ErrAttemptTimeout, and the base transport's
// error too when that is another (net/http's Transport returns the cause
// itself). It is a timeout: its Timeout method reports true, so
// that os.IsTimeout and net.Error callers see it as one. A Base that
// returns its context's error (ctx.Err()) when the timeout cuts it makes
// the returned error match context.Canceled too: to tell the caller's own
// cancel, look for Error.Reason == StopCanceled.
var ErrAttemptTimeout error = attemptTimeout{}

// attemptTimeout is ErrAttemptTimeout's type: comparable, so errors.Is
// finds it by value.
type attemptTimeout struct{}

func (attemptTimeout) Error() string { return "httpretry: attempt timed out" }

// Timeout reports true: an attempt timed out.
func (attemptTimeout) Timeout() bool { return true }

// Temporary reports true, as context.DeadlineExceeded's does: with
// Timeout, it makes ErrAttemptTimeout a net.Error, so that errors.As to a
// net.Error finds it.
func (attemptTimeout) Temporary() bool { return true }

// errNilResponse reports a base RoundTripper that broke its contract by
// returning neither a response nor an error.
var errNilResponse = errors.New("base RoundTripper returned a nil response and a nil error")

// StopReason says why no further attempt was made.
type StopReason int

const (
	// StopNone: retries did not stop; used in OnRetry events.
	StopNone StopReason = iota
	// StopNotRetryable: the classifier said the outcome is final.
	StopNotRetryable
	// StopNotReplayable: the method is not idempotent and carries no
	// idempotency key (set one, or RetryAllMethods if the server
	// deduplicates requests itself), or the request is a CONNECT whose
	// body, a tunnel's stream, is never replayed.
	StopNotReplayable
	// StopExhausted: all 1+MaxRetries attempts were made.
	StopExhausted
	// StopRetryAfter: the server's Retry-After exceeds MaxRetryAfter.
	StopRetryAfter
	// StopDeadline: the next wait would end at or after the context's deadline,
	// or the deadline cut off a wait or a retry: the outcome of the
	// attempt before it is returned. Only in the second case, the deadline
	// having come, does an *Error wrap context.DeadlineExceeded. The
	// deadline is also the reason when it passed before anything could be
	// returned: before the first attempt, while the body was read, or
	// during the first attempt (an *Error wrapping the deadline's error).
	// A held request stops with it too where its own backoff would; one
	// whose hold the deadline itself ends stops with StopHostGate.
	StopDeadline
	// StopMaxElapsed: the next wait would end at or after
	// Transport.MaxElapsed.
	StopMaxElapsed
	// StopCanceled: the request's context was canceled (its deadline
	// passing is StopDeadline, or StopHostGate when it ends a hold).
	StopCanceled
	// StopRewind: the request body could not be produced again
	// (Request.GetBody failed, or returned a nil body). The last outcome is
	// returned as for any retry not sent: the last response as it is (the
	// GetBody error is then not reported), or an *Error that joins the
	// GetBody error to the last attempt's error. It is also the reason when
	// a retry's body from GetBody failed as it was read with an error the
	// classifier retries (a stream cut short, io.ErrUnexpectedEOF; one it
	// does not retry ends the call as any such error does): that retry's
	// error, the body's, is returned in an *Error, and
	// GetBody is not asked again, as a body whose read ahead fails is not
	// sent (StopInvalid).
	StopRewind
	// StopInvalid: the request could not be sent at all (nil request or URL,
	// a body whose read ahead failed, a truncated stream's
	// io.ErrUnexpectedEOF included: nothing is sent). A body read ahead
	// and kept whose Close fails is sent, and every attempt's body's Close
	// returns that error, which Base fails the attempt with or not, as it
	// would the caller's body's (net/http's HTTP/1 transport does); an
	// attempt failed by it is not retried, and stops with StopInvalid. A
	// body that streams (over MaxBufferedBody, or with MaxBufferedBody
	// negative) is sent once; when Base fails the attempt with its Close
	// error (net/http's HTTP/1 transport does, its HTTP/2 transport does
	// not), the call stops as on any error of Base: StopNotRetryable, or,
	// when the classifier retries the error, the reason the retry is
	// refused (StopNotReplayable for a method that may not be replayed,
	// StopBodyTooLarge otherwise). A body read at its offsets is closed
	// only once the call has ended, and its Close error is dropped.
	StopInvalid
	// StopBudget: the retry budget (StormControl.Budget, set through
	// Transport.Storm) had no retry left. Only with StormControl.NoHostGate:
	// with the host gate on, the budget never ends a request.
	StopBudget
	// StopHostGate: storm control held the request's retries (see
	// StormControl) until the limit of its hold: the deadline came while
	// it was held, or its own backoff's steps ran out, some of them
	// skipped without a retry sent for them between steps, so that it
	// made fewer attempts, its last retry sent then failing too. A held request that
	// the deadline or MaxElapsed stops where its own backoff would ends
	// with StopDeadline or StopMaxElapsed.
	StopHostGate
	// StopBodyTooLarge: the request body had no GetBody, could not be read
	// at its offsets (see MaxBufferedBody) and was not buffered (it was
	// longer than MaxBufferedBody, or MaxBufferedBody is negative), so it
	// was sent once, streamed, and cannot be sent again (set
	// Request.GetBody, or raise MaxBufferedBody).
	StopBodyTooLarge
)

var stopNames = [...]string{
	StopNone:          "not stopped",
	StopNotRetryable:  "not retryable",
	StopNotReplayable: "not replayable",
	StopExhausted:     "retries exhausted",
	StopRetryAfter:    "Retry-After above the cap",
	StopDeadline:      "stopped by the deadline",
	StopMaxElapsed:    "stopped by MaxElapsed",
	StopCanceled:      "canceled",
	StopRewind:        "request body cannot be rewound",
	StopInvalid:       "invalid request",
	StopBudget:        "retry budget exhausted",
	StopHostGate:      "held by storm control while the host failed requests",
	StopBodyTooLarge:  "body not buffered for replay (set GetBody or raise MaxBufferedBody)",
}

// MarshalText returns String's phrase, so that encoding/json and log/slog's
// JSON handler print "retries exhausted", not a number.
func (r StopReason) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// String returns a short phrase such as "retries exhausted".
func (r StopReason) String() string {
	if r >= 0 && int(r) < len(stopNames) {
		return stopNames[r]
	}
	return fmt.Sprintf("StopReason(%d)", int(r))
}

// Error is the error RoundTrip returns when the last attempt ended in a
// transport error (a response, even a 503, is returned as a response), when
// nothing could be sent, and when a retry is not sent once the response
// before it was drained (its wait, counted from the drain's end, would end
// past the deadline or MaxElapsed; or the deadline stopped it, in a wait,
// a hold or the retry's own attempt) and that response could not be kept:
// its body was over 64 KiB or still arriving after 100 ms, so it was
// closed; Err then names its status. It is also what a request the caller
// cancels returns (StopCanceled), Err wrapping the context's error and
// the cause the context was ended with (context.Cause), as net/http
// returns it, and, when the cancel cut an attempt, that attempt's error
// too (errors.Is finds each).
//
// errors.Is and errors.As reach the cause through Unwrap, and Timeout
// reports a cause that timed out, so that os.IsTimeout works through
// http.Client as it does with a plain http.Transport.
type Error struct {
	// Attempts is the number of attempts sent through the base transport.
	Attempts int
	// Reason is why no further attempt was made.
	Reason StopReason
	// Err is the last attempt's error, or the context's error when a wait
	// was canceled. When the context ended the request (its deadline cut
	// off a wait, a retry or a hold) after a transport error, Err wraps
	// both, so that errors.Is finds each; after a response that could not
	// be kept, it names that response's status (and wraps the context's
	// error once the deadline has come); with StopRewind, it joins
	// GetBody's error to the last attempt's.
	Err error
}

// Error formats as "httpretry: giving up after 6 attempts: retries
// exhausted: <cause>", or, when nothing was sent, as "httpretry: nothing
// sent: invalid request: <cause>".
func (e *Error) Error() string {
	if e.Attempts == 0 {
		return fmt.Sprintf("httpretry: nothing sent: %s: %v", e.Reason, e.Err)
	}
	noun := "attempts"
	if e.Attempts == 1 {
		noun = "attempt"
	}
	return fmt.Sprintf("httpretry: giving up after %d %s: %s: %v", e.Attempts, noun, e.Reason, e.Err)
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Timeout reports whether the cause is a timeout: a deadline, Client.Timeout
// or AttemptTimeout. *url.Error, which http.Client wraps around it, asks
// only its direct cause, so without it os.IsTimeout would miss them. A
// request stopped before its deadline came, because its next wait would
// have passed it (StopDeadline), returns its last error as it is: Timeout
// then reports that error's own answer.
func (e *Error) Timeout() bool { return timedOut(e.Err) }

// Temporary reports false. It makes *Error a net.Error, so that
// errors.As(err, &netErr) stops at it and its Timeout speaks for the
// whole cause.
func (e *Error) Temporary() bool { return false }

// timedOut reports whether err is a timeout: on each branch of the errors
// it wraps, the first that says whether it is one decides, and a cause
// that joins a transport error and the deadline that ended the request is
// one.
func timedOut(err error) bool {
	for err != nil {
		if t, ok := err.(interface{ Timeout() bool }); ok {
			return t.Timeout()
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			return slices.ContainsFunc(u.Unwrap(), timedOut)
		default:
			return false
		}
	}
	return false
}
