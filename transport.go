package httpretry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
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
//     base transport would be given it.
//  3. The caller's request body is closed exactly once, on every path.
//  4. An outcome is retried only when the Classifier calls it retryable and
//     the request may be replayed: its method is idempotent (GET, HEAD,
//     OPTIONS, TRACE, PUT, DELETE), it carries an Idempotency-Key or
//     X-Idempotency-Key header, RetryAllMethods is set, or the failure
//     proves the request was never sent (a dial error, connection refused,
//     HTTP/2 REFUSED_STREAM).
//  5. Bodies are rewound with Request.GetBody when it is set. Otherwise a
//     body of up to MaxBufferedBody bytes is read once into an immutable
//     buffer and each attempt reads its own reader over it (its clone also
//     gets a GetBody, so Base can replay it too). A larger body is sent once,
//     complete and unchanged, and that request is not retried.
//  6. Between attempts it waits per Policy. A wait that would end after the
//     context's deadline (or after MaxElapsed) is not started: the last
//     response or error returns at once. Cancelling the context ends a wait
//     at once with an *Error wrapping the context's error.
//  7. Retry-After on a retryable response is a floor for the wait, spread
//     upward by up to 10% so that clients told the same value do not return
//     together. A Retry-After above MaxRetryAfter, or past the deadline,
//     returns that response at once.
//  8. When retries end, the last response is returned as it came, body
//     unread, with a nil error: a 503 is a response, not an error. A last
//     transport error is returned as an *Error that records the attempt
//     count and the StopReason and unwraps to the cause.
//  9. Every response not returned is drained (a few KiB at most, else
//     closed unread) and closed, so its connection can be reused.
//  10. Storm control, on by default: a retry budget bounds the retries of
//     all requests of the Transport (Budget), and a host gate makes the
//     retries of many requests to a failing host wait on one shared
//     schedule and return at a pace the host can take (HostGate). Neither
//     delays or refuses a first attempt; a refused retry returns the last
//     outcome at once (StopBudget, StopHostGate).
//  11. A Transport is safe for concurrent use, its fields must not change
//     once it is in use, and its zero value is ready: a nil Base means one
//     package-level transport built with cleanhttp.DefaultPooledTransport.
//
// Every field's zero value means its default.
type Transport struct {
	// Base sends each attempt. Nil means a shared pooled transport from
	// cleanhttp.DefaultPooledTransport, built on first use.
	Base http.RoundTripper

	// Policy is how many retries and how long to wait between them.
	Policy Policy

	// RetryableStatuses are the response statuses the default classifier
	// retries. Nil means 429, 502, 503 and 504; an empty non-nil slice means
	// none. Ignored when Classifier is set.
	RetryableStatuses []int

	// Classifier, when set, replaces the default decision of which outcomes
	// are retryable. See Classifier and DefaultClassifier.
	Classifier Classifier

	// RetryAllMethods retries requests of every method, POST and PATCH
	// without an idempotency key included. Use it only when the server
	// deduplicates requests itself.
	RetryAllMethods bool

	// MaxRetryAfter is the longest Retry-After the Transport waits for; a
	// longer one returns the response at once. Zero means
	// DefaultMaxRetryAfter; negative means Retry-After is ignored and the
	// computed backoff alone applies.
	MaxRetryAfter time.Duration

	// MaxBufferedBody is the largest request body without GetBody kept in
	// memory for replays. A longer body is streamed once and its request
	// is not retried. Zero means DefaultMaxBufferedBody; negative means no
	// body is buffered, so only requests without a body or with GetBody
	// are retried.
	MaxBufferedBody int64

	// AttemptTimeout bounds each attempt until its response headers arrive;
	// the attempt then fails with ErrAttemptTimeout and is retried. Reading
	// a returned body is bounded by the request's context only. Zero or
	// negative means no per-attempt timeout.
	AttemptTimeout time.Duration

	// MaxElapsed bounds a whole logical request, for callers that set no
	// context deadline: a wait that would end more than MaxElapsed after
	// RoundTrip was called is not started. Zero or negative means no bound.
	MaxElapsed time.Duration

	// OnRetry, when set, is called once before each wait, after the failed
	// attempt's response has been drained and closed. It runs on the
	// goroutine that called RoundTrip, so it delays that retry by its own
	// run time and must be safe for concurrent use when the Transport is.
	OnRetry func(RetryEvent)

	// OnGiveUp, when set, is called once when an outcome the classifier
	// called retryable is returned without a retry, with the StopReason. It
	// runs on the goroutine that called RoundTrip, just before it returns.
	OnGiveUp func(RetryEvent)

	// Random returns values in [0, 1) for the jitter. Nil means
	// math/rand/v2's Float64. It must be safe for concurrent use; a seeded
	// source makes waits reproducible.
	Random func() float64

	// Budget bounds the retries of all requests of this Transport to a
	// share of their number (see Budget); a refused retry returns the last
	// outcome at once with StopBudget. Nil means a budget of this
	// Transport's own with the default numbers; set one *Budget on several
	// Transports to bound them together.
	Budget *Budget

	// NoBudget turns the retry budget off: every retryable outcome is
	// retried up to Policy's limits.
	NoBudget bool

	// HostGate coordinates the retries of all requests to a failing host:
	// they wait on one shared schedule and return at a pace the host can
	// take (see HostGate). Its zero value is on with the default numbers;
	// HostGate{Off: true} turns it off.
	HostGate HostGate

	stormPtr unsafe.Pointer // *stormState, built on first use; see storm
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
// such a method. The Transport never calls it on its own.
func (t *Transport) CloseIdleConnections() {
	type closeIdler interface{ CloseIdleConnections() }
	if ci, ok := t.base().(closeIdler); ok {
		ci.CloseIdleConnections()
	}
}

// RoundTrip sends req, retrying it as the Transport's rules say.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := checkRequest(req); err != nil {
		return nil, err
	}
	ctx := req.Context()
	body, err := prepareBody(req, t.bodyLimit())
	if err != nil {
		return nil, &Error{Reason: StopInvalid, Err: err}
	}
	var start time.Time
	if t.MaxElapsed > 0 {
		start = time.Now()
	}
	var prev time.Duration   // the previous wait, for decorrelated jitter
	var waited time.Duration // in all, against the retry horizon; see schedule
	for n := 1; ; n++ {
		// Clone: attempt n's own request and body.
		a, err := t.newAttempt(req, &body, n)
		if err != nil {
			return nil, &Error{Attempts: n - 1, Reason: StopRewind, Err: err}
		}

		// Send.
		resp, err := t.send(a)
		st := t.storm()
		if n == 1 && st.budget != nil {
			st.budget.countRequest()
		}

		// Decide. A response that is not retried is returned whether or not
		// the caller has given up meanwhile, so the context is looked at
		// only before an error or a retry: the success path skips it.
		if err != nil && ctx.Err() != nil {
			return a.finish(resp, err, n, StopCanceled)
		}
		retry, reason := t.classify(req, resp, err)
		if !retry {
			if st.gates != nil && err == nil {
				st.gates.ok(req.URL.Host, n == 1) // the host answered
			}
			return a.finish(resp, err, n, StopNotRetryable)
		}
		if ctx.Err() != nil {
			return a.finish(resp, err, n, StopCanceled)
		}
		wait, held, stop := t.schedule(req, &body, resp, err, n, prev, start, waited)
		if stop != StopNone {
			t.giveUp(RetryEvent{Request: req, Attempt: n, Response: resp, Err: err, Reason: reason, Stop: stop})
			return a.finish(resp, err, n, stop)
		}

		// Drain. A held retry may be refused after its wait: it keeps a
		// small body, so the refusal can still return this response.
		var kept []byte
		keptOK := false
		if held.w != nil {
			kept, keptOK = drainKeeping(resp)
		} else {
			discard(resp)
		}
		a.release()
		if t.OnRetry != nil {
			t.OnRetry(RetryEvent{Request: req, Attempt: n, Response: resp, Err: err, Reason: reason, Wait: wait})
		}

		// Wait.
		if held.w != nil {
			heldAt := time.Now()
			if stop := t.waitHeld(ctx, held); stop != StopNone {
				if stop != StopCanceled && keptOK {
					resp.Body = io.NopCloser(bytes.NewReader(kept))
					t.giveUp(RetryEvent{Request: req, Attempt: n, Response: resp, Reason: reason, Stop: stop})
					return resp, nil
				}
				return nil, t.heldGiveUp(ctx, req, n, err, reason, stop)
			}
			wait = time.Since(heldAt)
		} else if err := sleep(ctx, wait); err != nil {
			return nil, &Error{Attempts: n, Reason: StopCanceled, Err: err}
		}
		prev = wait
		waited += wait
	}
}

// schedule returns the wait before retry n, or why there is none; a retry
// the host gate holds comes back as held, to be waited for with waitHeld.
// The outcome is already known to be retryable. waited is the time spent
// in earlier waits: a held retry waits at most the rest of the retry
// horizon (see retryHorizon).
func (t *Transport) schedule(req *http.Request, body *requestBody, resp *http.Response, err error, n int, prev time.Duration, start time.Time, waited time.Duration) (time.Duration, heldRetry, StopReason) {
	now := time.Now()
	var floor time.Duration // Retry-After, when hasFloor
	hasFloor := false
	if resp != nil && t.MaxRetryAfter >= 0 {
		floor, hasFloor = parseRetryAfter(resp.Header, now)
	}
	// Storm control sees every retryable failure, also of a request that
	// will not be retried: each tells that the host is failing.
	st := t.storm()
	var gate *hostGate
	if st.gates != nil {
		gate = st.gates.fail(req.URL.Host, now, n == 1, floor)
	}
	if !t.mayReplay(req, body, err) {
		return 0, heldRetry{}, StopNotReplayable
	}
	if n > t.Policy.retries() {
		return 0, heldRetry{}, StopExhausted
	}
	wait := t.Policy.Delay(n, prev, t.random())
	if hasFloor {
		if floor > t.maxRetryAfter() {
			return 0, heldRetry{}, StopRetryAfter
		}
		wait = max(wait, spreadUp(floor, t.random()))
	}
	deadline, hasDeadline := req.Context().Deadline()
	if hasDeadline && wait > deadline.Sub(now) {
		return 0, heldRetry{}, StopDeadline
	}
	if t.MaxElapsed > 0 && wait > start.Add(t.MaxElapsed).Sub(now) {
		return 0, heldRetry{}, StopMaxElapsed
	}
	// Storm control decides last, so that a retry refused for another
	// reason costs nothing: the host gate may hold the retry (never a first
	// attempt), the budget may refuse it.
	if gate != nil {
		// Only held waits can make the waits outgrow the horizon: the
		// Policy's own are at most MaxRetries at the cap.
		left := retryHorizon(t.Policy) - waited
		if wait > left {
			return 0, heldRetry{}, StopHostGate
		}
		limit := now.Add(left)
		if hasDeadline && deadline.Before(limit) {
			limit = deadline
		}
		if t.MaxElapsed > 0 && start.Add(t.MaxElapsed).Before(limit) {
			limit = start.Add(t.MaxElapsed)
		}
		base, top := t.Policy.bounds()
		w, refused := gate.join(now, now.Add(wait), limit, probeSpread(t.Policy.retries(), n, limit.Sub(now)), exponential(n, base, top))
		if refused {
			return 0, heldRetry{}, StopHostGate
		}
		if w != nil {
			// Charged to the budget when the gate releases it.
			return wait, heldRetry{gate: gate, w: w, sendAt: now.Add(wait), limit: limit, budget: st.budget}, StopNone
		}
	}
	if st.budget != nil && !st.budget.withdraw(now) {
		return 0, heldRetry{}, StopBudget
	}
	return wait, heldRetry{}, StopNone
}

// mayReplay reports whether the request may be sent again after err.
func (t *Transport) mayReplay(req *http.Request, body *requestBody, err error) bool {
	if !body.replayable() {
		return false // the body was streamed and is gone
	}
	return replayable(req, t.RetryAllMethods) || (err != nil && neverSent(err))
}

// classify applies the Classifier, or the default one.
func (t *Transport) classify(req *http.Request, resp *http.Response, err error) (bool, string) {
	switch {
	case t.Classifier != nil:
		return t.Classifier(req, resp, err)
	case err != nil:
		return classifyError(err)
	case t.RetryableStatuses != nil:
		return classifyStatus(resp.StatusCode, t.RetryableStatuses)
	}
	return classifyStatus(resp.StatusCode, defaultRetryableStatuses[:])
}

// send runs one attempt through Base and holds Base to the RoundTripper
// contract: exactly one of the response and the error is non-nil.
func (t *Transport) send(a attempt) (*http.Response, error) {
	resp, err := t.base().RoundTrip(a.req)
	fired := a.stopTimer()
	switch {
	case err != nil && resp != nil:
		discard(resp) // as http.Client does, the error wins
		resp = nil
	case err == nil && resp == nil:
		err = errNilResponse
	}
	if fired || a.timedOut() {
		if resp != nil {
			// The timeout fired as the headers came: the body is cut off.
			discard(resp)
			return nil, ErrAttemptTimeout
		}
		if !errors.Is(err, ErrAttemptTimeout) { // net/http may return the cause itself
			err = fmt.Errorf("%w: %w", ErrAttemptTimeout, err)
		}
	}
	return resp, err
}

// giveUp reports a retryable outcome that is returned without a retry.
func (t *Transport) giveUp(e RetryEvent) {
	if t.OnGiveUp != nil {
		t.OnGiveUp(e)
	}
}

// checkRequest rejects what no transport can send, closing the body.
func checkRequest(req *http.Request) error {
	switch {
	case req == nil:
		return &Error{Reason: StopInvalid, Err: errors.New("httpretry: nil Request")}
	case req.URL == nil:
		closeRequestBody(req)
		return &Error{Reason: StopInvalid, Err: errors.New("httpretry: nil Request.URL")}
	case req.Context().Err() != nil:
		closeRequestBody(req)
		return &Error{Reason: StopCanceled, Err: req.Context().Err()}
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
