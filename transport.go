package httpretry

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"
	"unsafe"

	"github.com/hashicorp/go-cleanhttp"
)

// DefaultMaxRetryAfter is the longest Retry-After honoured by default.
const DefaultMaxRetryAfter = time.Minute

// Transport is an http.RoundTripper that retries failed requests through
// Base. Its rules:
//
//  1. One call of RoundTrip is one logical request: 1 to 1+MaxRetries
//     attempts through Base.
//  2. The caller's *http.Request is never modified. Every retry sends its
//     own req.Clone with its own fresh body and a context that carries its
//     attempt number (see Attempt). A first attempt that needs no new body
//     and no AttemptTimeout sends the caller's request itself, as a plain
//     base transport would be given it: a Base that changes the request it
//     is given, which http.RoundTripper forbids, changes the caller's, and
//     the retries that clone it.
//  3. The caller's request body is closed exactly once, on every path that
//     returns: a panic in Base or a callback unwinds past it, as it does
//     through net/http's Client, and leaves the body to Base. A response
//     held when the Classifier, Random or OnGiveUp panics is closed.
//  4. An outcome is retried only when the Classifier calls it retryable and
//     the request may be replayed: its method is idempotent (GET, HEAD,
//     OPTIONS, TRACE, PUT, DELETE), it carries an Idempotency-Key or
//     X-Idempotency-Key header (under that canonical key, even empty, as
//     net/http's own replay check reads it), RetryAllMethods is set, or
//     the failure proves the request was never sent (a dial error,
//     connection refused, HTTP/2 REFUSED_STREAM, or a GOAWAY naming no
//     stream processed).
//     A request that may not be replayed reaches Base with no more to
//     replay it by than the caller's request has: its clone has a GetBody
//     only if the caller's request has one (see rule 5).
//  5. Bodies are rewound with Request.GetBody when it is set. Otherwise a body
//     of up to MaxBufferedBody bytes is read once into an immutable buffer,
//     and each attempt reads its own reader over it (the clone of a request
//     that may be replayed also gets a GetBody, so Base can replay it too);
//     the context's end interrupts that read by closing the body (StopCanceled
//     or StopDeadline). A larger body is sent once, complete and unchanged,
//     and that request is not retried (StopBodyTooLarge), unless it can be
//     read at its offsets, as a file can: each attempt then reads its own
//     view of it (see MaxBufferedBody). Values a body fills
//     in its request's Trailer as it is read reach the server; with GetBody,
//     filling them in races with a retry that starts while Base still sends
//     the previous attempt's body (a server that answers before reading it). A
//     CONNECT's body, a tunnel's write side, is sent as it is written, and its
//     request is not retried (StopNotReplayable).
//  6. Between attempts it waits per Policy, or the request's own (see
//     WithPolicy). A wait that would end at or after the context's deadline
//     (or MaxElapsed) is not started: the last response or error returns
//     at once; a retry, or a wait, that the deadline cuts off returns the
//     outcome of the attempt before it (a response whose body was over 64
//     KiB, or still arriving after 100 ms, is not kept for that: an *Error
//     that names its status and wraps the deadline's error comes instead;
//     one the server cut short is kept, its bytes then its read error;
//     and a transport error before it comes wrapped with the deadline's
//     error). Cancelling the context ends a wait at once with an *Error
//     wrapping the context's error; the deprecated Request.Cancel reaches
//     Base with each attempt, but does not end a wait (http.Client's
//     Timeout sets the context's deadline too). A wait not started for the
//     deadline returns the last error as it is, and a last response not
//     kept as an *Error that names its status alone: the deadline has not
//     come yet.
//  7. Retry-After on a retryable response is a floor for the wait, spread
//     upward by up to 10% so that clients told the same value do not return
//     together. A Retry-After above MaxRetryAfter, or whose wait, spread,
//     would end past the deadline, returns that response at once; one of
//     zero, or a date already past, asks for no wait, and the backoff
//     applies as without one. A date is counted from the response's Date
//     header when it has one (plus its Age, from a cache), so that the
//     clocks' skew never brings a retry early; both have whole seconds,
//     so the wait may end up to a second after the date, which spreads
//     clients told one date (and, near the deadline, may make a wait that
//     the date alone fits end past it). Seconds may have a fraction
//     ("2.5"), which RFC 9110 does not allow but some servers send; a
//     value of neither form is ignored, the backoff alone applying.
//  8. When retries end, the last response is returned as it came, body
//     unread, with a nil error: a 503 is a response, not an error. A last
//     transport error is returned as an *Error that records the attempt
//     count and the StopReason and unwraps to the cause.
//  9. Every response not returned is drained (up to 64 KiB, else closed
//     unread) and closed, so its connection can be reused.
//  10. Storm control, on by default (see StormControl), bounds what the
//     retries of many requests do to a server: a host gate that holds the
//     retries of requests failing together and returns them at the pace
//     the host answers, or, with the gate off, a retry budget. It never
//     delays or refuses a first attempt, a request alone on its host
//     waits exactly its own backoff, and a held request still sends its
//     last retry when its own backoff would (StormControl says how far
//     either way, and when). The budget, in the gate's place, may refuse
//     any retry, a lone request's too, and a refused retry returns the
//     last outcome at once (StopBudget).
//     A held request ends by the deadline or MaxElapsed as its own backoff
//     would (StopDeadline, StopMaxElapsed), and a hold that reaches the
//     deadline returns the last outcome then (StopHostGate). After a hold,
//     as after a wait the deadline cut, a response that could not be kept
//     comes as an *Error (rule 6).
//  11. A Transport is safe for concurrent use, its fields must not change
//     once it is in use, and its zero value is ready: a nil Base means one
//     package-level transport built with cleanhttp.DefaultPooledTransport.
//     A copy, even of a Transport used before, is a Transport of its own:
//     its storm control is built from its own Storm, at the latest by its
//     first failed attempt, and before that its requests count in no
//     other's, only in the Budget its Storm names (set Storm.Budget, with
//     Storm.NoHostGate, to share a budget). Copy it while none of its
//     requests is running: its first request, and a copy's first failed
//     attempt, set the pointer to that state, and a copy made at that
//     moment races with them (the race detector says so).
//
// Every field's zero value means its default.
type Transport struct {
	// Base sends each attempt. Nil means a shared pooled transport from
	// cleanhttp.DefaultPooledTransport, built on first use. Like
	// net/http's, it must end an attempt when the request's context ends,
	// and a response body's Close must end a Read under way: the deadline,
	// AttemptTimeout and the drain of a failed response rely on both.
	Base http.RoundTripper

	// Policy is how many retries and how long to wait between them.
	Policy Policy

	// RetryableStatuses are the response statuses the default classifier
	// retries, and of a proxy's refusals of CONNECT, those of 429, 502,
	// 503 and 504 it lists. Nil means 429, 502, 503 and 504; an empty
	// non-nil slice means none. Ignored when Classifier is set.
	RetryableStatuses []int

	// Classifier, when set, replaces the default decision of which outcomes
	// are retryable. See Classifier and DefaultClassifier.
	Classifier Classifier

	// RetryAllMethods retries requests of every method, POST and PATCH
	// without an idempotency key included. Use it only when the server
	// deduplicates requests itself.
	RetryAllMethods bool

	// MaxRetryAfter is the longest Retry-After the Transport waits for; a
	// longer one returns the response at once. A wait it allows is spread
	// up to a tenth longer, so that clients told the same time do not come
	// back at once. Zero means DefaultMaxRetryAfter; negative means
	// Retry-After is ignored and the computed backoff alone applies. Only
	// the deadline and MaxElapsed bound a wait it allows: raise it with one
	// of them set. Of several Retry-After headers, the first counts.
	MaxRetryAfter time.Duration

	// MaxBufferedBody is the largest request body without GetBody kept in
	// memory for replays. Such a body is read before the first attempt is
	// sent, up to this many bytes or until the request's context ends (the
	// body is then closed, which ends a read under way if its Close does,
	// as io.Pipe's does but a server's incoming request body's does not,
	// and RoundTrip returns an *Error with
	// StopCanceled, or StopDeadline): a longer body is then streamed once
	// and its request is not retried (StopBodyTooLarge), unless it can be
	// read at its offsets (it has ReadAt and a Seek that tells its offset,
	// as an *os.File of a regular file has, and ReadAt gives the bytes
	// Read would): each attempt then reads its own view of it, from where
	// it stood when RoundTrip was called, every one the bytes the first to
	// reach its end read (a body cut short since fails the attempt, with
	// StopRewind; one rewritten in place is sent as it then reads), and it
	// is closed once the call has ended and Base has closed, or dropped,
	// every view; a call never retried sends it as it is. A body kept is
	// sent with its length as Content-Length, not chunked, unless the
	// request has a Trailer, which only a chunked body carries, or the
	// body's Close failed (see StopInvalid) and the request declares no
	// length: it is then sent chunked, as net/http sends it. The body of a
	// request whose Policy allows no retries (see WithoutRetries) is not
	// read ahead at all. Zero means
	// DefaultMaxBufferedBody; negative means no body is buffered, so only
	// requests without a body, with GetBody or with a body read at its
	// offsets are retried: set it for bodies that must stream as they are
	// written, such as a pipe.
	MaxBufferedBody int64

	// AttemptTimeout bounds each attempt, from when it goes to Base (after
	// OnRetry), until its response headers arrive; the attempt then fails
	// with ErrAttemptTimeout and is retried. Reading
	// a returned body is bounded by the request's context only. Zero or
	// negative means no per-attempt timeout.
	AttemptTimeout time.Duration

	// MaxElapsed bounds a whole logical request, for callers that set no
	// context deadline: a wait that would end MaxElapsed or more after
	// RoundTrip was called is not started. Zero or negative means no bound.
	MaxElapsed time.Duration

	// OnRetry, when set, is called once before each retry is sent, after
	// its wait, with the time it waited (see RetryEvent.Wait). It runs on
	// the goroutine that called RoundTrip and must be safe for concurrent
	// use when the Transport is. The request waits for it: when the
	// caller's context ends meanwhile, the retry goes to Base with that
	// context, which net/http's Transport fails at once, and the request
	// ends as a retry the deadline cut off (the outcome before it, and
	// OnGiveUp with StopDeadline) or as a canceled one.
	OnRetry func(RetryEvent)

	// OnGiveUp, when set, is called once when a request ends on an outcome
	// the classifier called retryable, with the StopReason no further
	// attempt was made. Every attempt whose failure the classifier calls
	// retryable thus gets one event: OnRetry when it is retried, OnGiveUp
	// when it is not. A retry that the deadline cuts off gets OnGiveUp with
	// StopDeadline and the outcome returned, the attempt's before it; an
	// attempt the caller's cancel cuts off gets none, as any final outcome
	// (a cancel during a wait or a hold gives the attempt before it its
	// OnGiveUp, with StopCanceled). It runs on the goroutine that called
	// RoundTrip, just before it returns.
	OnGiveUp func(RetryEvent)

	// Random returns values in [0, 1) for the jitter. Nil means
	// math/rand/v2's Float64. It must be safe for concurrent use; a seeded
	// source makes waits reproducible. A value outside [0, 1) is clamped
	// into it and NaN counts as 0, so a source that returns only NaN or
	// values at or below 0 makes every full-jitter wait zero.
	Random func() float64

	// Storm is storm control (see StormControl); its zero value is on.
	Storm StormControl

	// stormPtr is the *stormState, built on first use (see storm). An
	// unsafe.Pointer read atomically, unlike atomic.Pointer, keeps a
	// Transport copyable, as table-driven code copies it (a copy builds its
	// own, see ownStorm); unlike atomic.Value, it costs one load and no
	// type assertion.
	stormPtr unsafe.Pointer
}

var _ http.RoundTripper = (*Transport)(nil)

// defaultBase is the shared transport behind every Transport without a Base.
var defaultBase = sync.OnceValue(func() http.RoundTripper {
	return cleanhttp.DefaultPooledTransport()
})

// base returns Base, or the shared default.
func (t *Transport) base() http.RoundTripper {
	if t.Base != nil {
		return t.Base
	}
	return defaultBase()
}

// CloseIdleConnections closes the idle connections of Base, when it has
// such a method. The Transport never calls it on its own. With a nil Base
// it closes those of the shared transport that every Transport without a
// Base uses, in the whole process.
func (t *Transport) CloseIdleConnections() {
	type closeIdler interface{ CloseIdleConnections() }
	if ci, ok := t.base().(closeIdler); ok {
		ci.CloseIdleConnections()
	}
}

// RoundTrip sends req, retrying it as the Transport's rules say.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	called := t.elapsedFrom() // before a body is read ahead, which MaxElapsed counts
	if err := checkRequest(req); err != nil {
		return nil, err
	}
	body, err := prepareBody(req, t.bodyLimit(), &t.Policy)
	if err != nil {
		return nil, err
	}
	r := t.newRetrier(req, called)
	defer r.done(&body)

	var ev RetryEvent    // the failed attempt being retried
	var last lastOutcome // its outcome, returned if its retry is not sent after all
	for n := 1; ; n++ {
		// Clone: attempt n's own request and body; only then is a retry
		// announced, so that OnRetry is never told of a retry not sent.
		a, err := t.newAttempt(req, &body, n)
		if err != nil {
			return r.rewindFailed(ev, last, n, err)
		}

		// Announce a retry, and send.
		r.sending(a, ev, n)
		resp, err := t.send(a, req)

		// Decide. A response that is not retried is returned whether or not
		// the caller has given up meanwhile, so the context is looked at
		// only before an error or a retry: the success path skips it. A
		// deadline reached counts before the context's timer fires, as
		// http.Client's Timeout cancels the attempt first.
		if err != nil && endedBy(req.Context()) != nil {
			return r.cut(a, resp, err, n, ev, last)
		}
		retry, reason := t.classify(req, resp, err)
		if !retry {
			r.answered(n, err)
			return r.end(a.finish(resp, err, n, finalStop(err)))
		}
		ev = RetryEvent{Request: req, Attempt: n, Response: resp, Err: err, Reason: reason}
		wait, stop := r.planClosing(&body, resp, err, n)
		if stop != StopNone {
			r.giveUp(ev, stop, true)
			return r.end(a.finish(resp, err, n, stop))
		}

		// Drain, keeping a small body: if the retry is not sent after all,
		// this response is still the one to return.
		last = r.drain(resp, err)
		a.release()

		// Wait: the retry's own backoff, then any hold.
		if ev.Wait, ev.Held, stop = r.wait(wait, n); stop != StopNone {
			return r.abandon(ev, last, n, stop)
		}
	}
}

// replayStop says why the request may not be sent again after err, or
// StopNone. The caller's body's Close error comes first (see StopInvalid),
// then a method that may not be replayed: a shorter body would not make
// it so.
func (t *Transport) replayStop(req *http.Request, body *requestBody, err error) StopReason {
	switch {
	case err != nil && errors.As(err, new(*bodyCloseError)):
		return StopInvalid // the caller's body's Close failed: it said its bytes were not whole
	case !replayable(req, t.RetryAllMethods) && (err == nil || !neverSent(err)):
		return StopNotReplayable
	case body.kind == bodyOnce:
		return StopBodyTooLarge // streamed once, and gone
	case body.kind == bodyTunnel:
		return StopNotReplayable // a tunnel's stream, however it failed
	case body.readFailed(err):
		return StopRewind // the body GetBody gave failed, not the connection
	}
	return StopNone
}

// finalStop is the reason of an outcome the classifier did not retry:
// StopInvalid when the caller's body's Close failed the attempt (see
// StopInvalid), StopNotRetryable otherwise.
func finalStop(err error) StopReason {
	if err != nil && errors.As(err, new(*bodyCloseError)) {
		return StopInvalid
	}
	return StopNotRetryable
}

// classify applies the Classifier, or the default one.
func (t *Transport) classify(req *http.Request, resp *http.Response, err error) (bool, string) {
	switch {
	case t.Classifier != nil:
		return t.classifyCustom(req, resp, err)
	case err != nil && t.RetryableStatuses != nil && isProxyRefusal(err, defaultRetryableStatuses[:]):
		if isProxyRefusal(err, t.RetryableStatuses) { // a proxy's CONNECT status, retried as RetryableStatuses says
			return true, "proxy refused CONNECT"
		}
		return false, ""
	case err != nil:
		return classifyFailure(req, err)
	case t.RetryableStatuses != nil:
		return classifyStatus(resp.StatusCode, t.RetryableStatuses)
	}
	return classifyStatus(resp.StatusCode, defaultRetryableStatuses[:])
}

// classifyCustom applies the Classifier; when it panics, resp's body is
// closed on the way out, as no one else holds it.
func (t *Transport) classifyCustom(req *http.Request, resp *http.Response, err error) (retry bool, reason string) {
	done := false
	defer closeUnlessDone(resp, &done)
	retry, reason = t.Classifier(req, resp, err)
	done = true
	return retry, reason
}

// closeUnlessDone closes resp's body unless done: a callback that panicked
// holding the response would otherwise leave its connection open.
func closeUnlessDone(resp *http.Response, done *bool) {
	if !*done && resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
}

// send runs one attempt of req through Base and holds Base to the
// RoundTripper contract: exactly one of the response and the error is
// non-nil. A response to the attempt's clone names req as its Request,
// as net/http's Transport names the request it was given: the clone's
// context ends with the attempt, and carries its number. So does a copy
// of a response to a clone Base made of the attempt with its method and
// URL (one that changes them, or names a request of its own, keeps it).
func (t *Transport) send(a attempt, req *http.Request) (*http.Response, error) {
	var timer *time.Timer
	if cancel := a.cancel; cancel != nil { // the attempt's timeout starts as it goes: OnRetry's time is not the attempt's
		timer = time.AfterFunc(t.AttemptTimeout, func() { cancel(ErrAttemptTimeout) })
	}
	resp, err := t.base().RoundTrip(a.req)
	// Headers in, the timeout ends; fired: it had already fired, its cancel
	// perhaps still on its way, so the context cannot be trusted to show it.
	fired := timer != nil && !timer.Stop()
	switch {
	case err != nil && resp != nil:
		discard(a.req.Context(), resp) // as http.Client does, the error wins
		resp = nil
	case err == nil && resp == nil:
		err = errNilResponse
	case resp != nil && resp.Request == a.req && a.req != req:
		resp.Request = req // the caller's, as net/http names the request it was given
	case resp != nil && resp.Request != req && cloneOf(resp.Request, a.req):
		resp = copyNaming(resp, req) // Base sent a clone of its own (otelhttp does), whose context is the attempt's
	}
	if fired || a.timedOut() {
		if resp != nil {
			// The timeout fired as the headers came: the body is cut off.
			discard(a.req.Context(), resp)
			return nil, ErrAttemptTimeout
		}
		if !errors.Is(err, ErrAttemptTimeout) { // net/http may return the cause itself
			err = fmt.Errorf("%w: %w", ErrAttemptTimeout, err)
		}
	}
	return resp, err
}

// announce tells OnRetry of the retry a is about to send; when OnRetry
// panics, a's context is released on the way out, as no timer will, and
// its body closed, as no Base will (a retry's body is never the caller's:
// GetBody's, or the buffer's).
func (t *Transport) announce(a attempt, ev RetryEvent) {
	announced := false
	defer func() {
		if !announced {
			a.release()
			if a.req.Body != nil {
				a.req.Body.Close()
			}
		}
	}()
	t.OnRetry(ev)
	announced = true
}

// giveUp reports a retryable outcome that ends its request; when
// OnGiveUp panics, the response it was shown, which the caller will not
// get, is closed on the way out if its body is still open (open: not
// drained for a retry, which closed it, and closing it twice is not
// io.Closer's contract).
func (t *Transport) giveUp(e RetryEvent, stop StopReason, open bool) {
	if t.OnGiveUp != nil {
		e.Stop = stop
		done := !open
		defer closeUnlessDone(e.Response, &done)
		t.OnGiveUp(e)
		done = true
	}
}

// checkRequest rejects what no transport can send, closing the body.
func checkRequest(req *http.Request) error {
	switch {
	case req == nil:
		return &Error{Reason: StopInvalid, Err: errors.New("nil Request")}
	case req.URL == nil:
		closeRequestBody(req)
		return &Error{Reason: StopInvalid, Err: errors.New("nil Request.URL")}
	case req.Context().Err() != nil:
		closeRequestBody(req)
		return &Error{Reason: stopFor(req.Context().Err()), Err: withCause(req.Context(), req.Context().Err())}
	}
	return nil
}

// closeRequestBody closes the caller's body on a path that sends nothing.
func closeRequestBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// sleep waits d or until ctx is done, whichever comes first.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// spreadUp returns d plus up to 10% of d, saturating instead of overflowing.
func spreadUp(d time.Duration, u float64) time.Duration {
	extra := scale(d/10, clampUnit(u))
	if d > maxDuration-extra {
		return maxDuration
	}
	return d + extra
}

// maxDuration is the largest time.Duration.
const maxDuration = time.Duration(1<<63 - 1)

// random returns the next jitter value.
func (t *Transport) random() float64 {
	if t.Random != nil {
		return t.Random()
	}
	return rand.Float64()
}

// bodyLimit resolves MaxBufferedBody.
func (t *Transport) bodyLimit() int64 {
	if t.MaxBufferedBody == 0 {
		return DefaultMaxBufferedBody
	}
	return t.MaxBufferedBody
}

// maxRetryAfter resolves MaxRetryAfter (for values ≥ 0).
func (t *Transport) maxRetryAfter() time.Duration {
	if t.MaxRetryAfter == 0 {
		return DefaultMaxRetryAfter
	}
	return t.MaxRetryAfter
}
