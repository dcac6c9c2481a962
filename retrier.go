package httpretry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// retrier is one logical request's state between its attempts: what
// decides, and waits out, each retry.
type retrier struct {
	t     *Transport
	req   *http.Request
	st    *stormState
	m     *member       // storm control's view of the request, from its first retryable failure
	start time.Time     // when RoundTrip was called, from which MaxElapsed counts; zero without it
	sent  time.Time     // when the latest attempt went, when known: how long its failure took times a held request's skipped steps
	prev  time.Duration // the previous own wait, for decorrelated jitter
	ok    bool          // the request ends in the host's answer
	pol   *Policy       // the request's Policy (see WithPolicy), from its first retryable failure
	floor time.Duration // the latest Retry-After's wait: the rest of its own backoff waits at least as long
}

// elapsedFrom returns when RoundTrip was called, from which MaxElapsed
// counts; zero, and no clock read, without MaxElapsed.
func (t *Transport) elapsedFrom() time.Time {
	if t.MaxElapsed > 0 {
		return time.Now()
	}
	return time.Time{}
}

// newRetrier returns the retrier of req, which RoundTrip was called with
// at called (zero without MaxElapsed).
func (t *Transport) newRetrier(req *http.Request, called time.Time) retrier {
	// A copy's requests tell the original's storm control nothing (see
	// storm), but count in a Budget the copy shares with it, the gate off.
	st := t.storm()
	if st.owner == t {
		st.budget.countRequest()
	} else if t.Storm.budgeted() {
		t.Storm.Budget.countRequest()
	}
	// The first attempt's time, after its body was read: with MaxElapsed,
	// or while a host has requests retrying, as skipped steps and proof of
	// an outage count how long attempts take.
	if t.MaxElapsed > 0 || st.hosts != nil && st.hosts.active.Load() > 0 {
		return retrier{t: t, req: req, st: st, start: called, sent: time.Now()}
	}
	return retrier{t: t, req: req, st: st}
}

// plan returns the own wait before retry n (its backoff, Retry-After
// included) or why there is none. The outcome is known to be retryable;
// storm control hears of it first, since even a failure that is not
// retried tells that the host is failing. body is not kept in r, so that
// it stays on RoundTrip's stack.
func (r *retrier) plan(body *requestBody, resp *http.Response, err error, n int) (time.Duration, StopReason) {
	t, now := r.t, time.Now()
	floor, hasFloor, dated := r.retryAfter(resp, now)
	if r.m == nil { // its first failure: a copy of a Transport in use has its own storm control from here (see ownStorm)
		r.st = t.ownStorm()
	}
	overCap := hasFloor && floor > t.maxRetryAfter()
	r.m = r.st.failed(r.req.URL.Host, r.m, failure{first: n == 1, at: now, sent: r.sent, floor: floor, dated: dated, overCap: overCap, path: r.req.URL.Path})
	if r.pol == nil { // looked up only now: a request that succeeds at once pays nothing for it
		r.m.policy = policyFor(r.req.Context(), t.Policy)
		r.pol = &r.m.policy
	}
	if stop := t.replayStop(r.req, body, err); stop != StopNone {
		return 0, stop
	}
	r.m.n = n
	if wait, stop, set := r.heldWait(now, floor, hasFloor); set && !overCap {
		return wait, stop
	}
	k := r.step()
	if k > r.pol.retries() && r.m.skipped > r.m.extra { // its own backoff's last step went and failed, some skipped and not stood for by a retry between steps
		return 0, StopHostGate
	}
	if k > r.pol.retries() {
		return 0, StopExhausted
	}
	if overCap {
		return 0, StopRetryAfter
	}
	// A held request's step that went late waits that much less of its own
	// backoff, and one that went early that much more, as plain backoff
	// waits from the step (see toldWait for a Retry-After).
	drawn := r.pol.Delay(k, r.prev, r.random())
	wait, late := max(drawn-r.m.late, 0), r.m.late
	r.m.late = 0
	if stop := r.pastLimitsWith(now.Add(wait), r.m.drift+drawn-late-wait); stop != StopNone { // with the drift this wait adds, as cutShort fits it
		return 0, stop
	}
	plain := drawn
	if hasFloor {
		wait, plain = r.toldWait(wait, drawn, late, spreadUp(floor, r.random()), dated)
	}
	r.m.drift += plain - late - wait // its next step is that much before plain backoff's
	if stop := r.cutShort(now, wait); stop != StopNone {
		return 0, stop
	}
	r.prev, r.floor = plain, floor // decorrelated jitter grows from plain backoff's wait
	return wait, StopNone
}

// toldWait returns the wait before the next retry of a request told to
// wait spread, whose own wait is wait (drawn, less how late its step
// went), and plain backoff's. The Retry-After is waited whole from now;
// after a step that went early, from the step, where plain backoff's
// attempt went and was told it, but no later than plain backoff's next
// step (drift included). Waited from an early send, a retry between steps
// that stood for its next step (see heldWait) put every later step early,
// the last before plain backoff's: 931 of 3,000 requests rescued against
// 1,060 in a review's outage. What the wait still brings forward of plain
// backoff's next step counts in drift. A Retry-After that names a date
// names the same moment to plain backoff's attempt, wherever its step:
// the request waits it from now, and plain backoff as long from its step
// as is left of it then.
func (r *retrier) toldWait(wait, drawn, late, spread time.Duration, dated bool) (time.Duration, time.Duration) {
	if dated {
		return max(wait, spread), max(drawn, spread+late)
	}
	plain := max(drawn, spread)
	fromStep := min(spread-min(late, 0), plain-late+r.m.drift)
	return max(wait, spread, fromStep), plain
}

// planClosing is plan, closing resp's body on the way out when Random,
// which plan calls, panics: no one else holds the response then.
func (r *retrier) planClosing(body *requestBody, resp *http.Response, err error, n int) (wait time.Duration, stop StopReason) {
	done := false
	defer closeUnlessDone(resp, &done)
	wait, stop = r.plan(body, resp, err, n)
	done = true
	return wait, stop
}

// retryAfter returns the wait resp's Retry-After asks for at now (zero
// when none), and whether it asks for one that is heeded (see
// MaxRetryAfter). A zero wait is none: spreading it would draw a random
// value that a held request's next step, drawn or peeked before, did not
// (TestRetryAfterDoesNotHoldPastPlainBackoff's "zero"). dated reports
// that it names a moment (an HTTP date), not a delay.
func (r *retrier) retryAfter(resp *http.Response, now time.Time) (d time.Duration, ok, dated bool) {
	if resp == nil || r.t.MaxRetryAfter < 0 {
		return 0, false, false
	}
	d, ok = parseRetryAfter(resp.Header, now)
	return d, ok && d > 0, ok && d > 0 && namesADate(resp.Header)
}

// cutShort says why a wait of d from now is not started: it would end past
// the deadline or MaxElapsed, or the budget has no retry left.
func (r *retrier) cutShort(now time.Time, d time.Duration) StopReason {
	if stop := r.pastLimits(now.Add(d)); stop != StopNone {
		return stop
	}
	if !r.st.takes(r.m, now) {
		return StopBudget
	}
	return StopNone
}

// pastLimits says which limit a wait ending at end would reach: the
// deadline or MaxElapsed, or StopNone.
func (r *retrier) pastLimits(end time.Time) StopReason { return r.pastLimitsWith(end, r.m.drift) }

// pastLimitsWith is pastLimits with drift as the request's drift.
func (r *retrier) pastLimitsWith(end time.Time, drift time.Duration) StopReason {
	end = end.Add(max(drift, 0)) // as plain backoff's, whose steps come later: never a wait past the limit
	if dl, ok := r.req.Context().Deadline(); ok && !end.Before(dl) {
		return StopDeadline
	}
	if r.t.MaxElapsed > 0 && !end.Before(r.start.Add(r.t.MaxElapsed)) {
		return StopMaxElapsed
	}
	return StopNone
}

// wait waits before retry n: its own backoff, then any hold of storm
// control. It returns the time waited in all and the part held, or why
// the retry will not be sent.
func (r *retrier) wait(own time.Duration, n int) (waited, held time.Duration, stop StopReason) {
	ctx, start := r.req.Context(), time.Now()
	if err := ctx.Err(); err != nil && stopFor(err) == StopCanceled {
		return 0, 0, StopCanceled // canceled during the drain: the caller's doing, whatever the limits say
	}
	if !r.m.until.IsZero() { // a held request's step, whose time is set, after the drain as before it
		own, r.m.until = max(r.m.until.Sub(start), r.floor), time.Time{}
	}
	// The drain since plan may have taken up to drainTimeout: a wait that
	// would now end past the deadline or MaxElapsed is still not started.
	if stop := r.pastLimits(start.Add(own)); stop != StopNone {
		return 0, 0, stop
	}
	if r.m.inLine { // held before: in line until its step, which the host's answers may bring forward
		if went, stop := r.waitInLine(ctx, start.Add(own)); went || stop != StopNone {
			return time.Since(start), 0, stop
		}
	} else if err := sleep(ctx, own); err != nil {
		// A wait that was to end before the deadline can still meet it,
		// the drain and the timers taking their time: the deadline, not
		// the caller, ended it, and the last outcome is the answer.
		if errors.Is(err, context.DeadlineExceeded) {
			return time.Since(start), 0, StopDeadline
		}
		return time.Since(start), 0, StopCanceled
	}
	due := time.Now()
	wasHeld, stop := r.hold(ctx, due)
	if wasHeld {
		held = time.Since(due)
	}
	return own + held, held, stop
}

// sending announces retry n (OnRetry) and records that it goes now: how
// long its failure takes, and how long its announcement took, time a held
// request's skipped steps, as plain backoff's retry at such a step would
// have been announced and sent. The budget is charged for it only now,
// once its body has been produced again (a retry never sent gets its
// token back: see stormState.end).
func (r *retrier) sending(a attempt, ev RetryEvent, n int) {
	if n == 1 {
		return
	}
	if r.t.OnRetry != nil {
		start := time.Now()
		r.t.announce(a, ev)
		r.st.announced.Store(int64(time.Since(start)))
	}
	r.sent = time.Now()
	r.st.sent(r.m, r.sent)
}

// answered records attempt n's outcome, which the classifier called final:
// only a response counts as the host answering.
func (r *retrier) answered(n int, err error) {
	if err == nil {
		r.ok = true
		if r.m != nil || r.st.owner == r.t { // see newRetrier
			r.st.hosts.answered(r.req.URL.Host, r.req.URL.Path, r.m, n == 1, r.sent)
		}
	}
}

// end ends the request with its outcome.
func (r *retrier) end(resp *http.Response, err error) (*http.Response, error) {
	r.leave()
	return resp, err
}

// leave ends the request's membership of its host, once: before OnGiveUp,
// so that a callback taking its time holds no other request.
func (r *retrier) leave() {
	r.st.end(r.m, r.ok)
	r.m = nil
}

// done, deferred by RoundTrip, ends the membership of a request that Base
// or a callback unwound with a panic, so that no state outlives it (after
// any return, end has already left), and tells a body read at its offsets
// that the call ended. One test, inlined, on the success path: as two
// calls it cost 2 ns of 29.
func (r *retrier) done(body *requestBody) {
	if r.m != nil || body.kind == bodyReadAt {
		r.finish(body)
	}
}

// finish is done's work, when there is some.
func (r *retrier) finish(body *requestBody) {
	if r.m != nil {
		r.leave()
	}
	body.end()
}

// giveUp reports a retryable outcome that ends the request, after it left
// its host.
func (r *retrier) giveUp(ev RetryEvent, stop StopReason, open bool) {
	r.leave()
	r.t.giveUp(ev, stop, open)
}

// drain drains and closes the response of a failed attempt that will be
// retried, keeping a small body (see lastOutcome).
func (r *retrier) drain(resp *http.Response, err error) lastOutcome {
	last := lastOutcome{resp: resp, err: err, kept: err != nil}
	if resp != nil {
		start := time.Now()
		last.body, last.cut, last.kept = drainKeeping(r.req.Context(), resp, r.req.Method == http.MethodHead)
		r.st.drained(r.m, time.Since(start)) // timed even when the attempt was not: a held request's deadline is fitted with it (see lastStep)
	}
	return last
}

// cut ends the request whose attempt n failed once the caller's context had
// ended (or its deadline had come): the error is taken for the context's
// doing. When the deadline cut a retry, the attempt before it had an
// outcome of its own: that one is returned, from memory (see
// lastOutcome.outcome), rather than the context's error, and reported to
// OnGiveUp as the retry's, ev being the event of the attempt before it.
func (r *retrier) cut(a attempt, resp *http.Response, err error, n int, ev RetryEvent, last lastOutcome) (*http.Response, error) {
	ended := endedBy(r.req.Context())
	if n == 1 || !errors.Is(ended, context.DeadlineExceeded) {
		if !errors.Is(err, ended) { // canceled through Request.Cancel, as http.Client's Timeout does
			err = fmt.Errorf("%w: %w", err, ended)
		}
		return r.end(a.finish(resp, withCause(r.req.Context(), err), n, stopFor(ended)))
	}
	a.release()
	ev.Attempt, ev.Wait, ev.Held = n, 0, 0
	return r.abandon(ev, last, n, StopDeadline)
}

// rewindFailed ends the request whose body could not be produced again for
// attempt n: the retry is not sent, and the last outcome is returned as for
// any retry not sent, the rewind's error joined to a last error.
func (r *retrier) rewindFailed(ev RetryEvent, last lastOutcome, n int, err error) (*http.Response, error) {
	err = fmt.Errorf("rewinding request body: %w", err)
	if last.err == nil && !last.kept { // returned as an *Error naming its status, which carries the rewind's error too
		last.err = last.notKept()
	}
	if last.err != nil {
		last.err = errors.Join(last.err, err)
	}
	return r.abandon(ev, last, n-1, StopRewind)
}

// abandon ends the request whose retry will not be sent after all (its
// wait was canceled, its hold ran out, or the deadline cut it), reporting
// it to OnGiveUp.
func (r *retrier) abandon(ev RetryEvent, last lastOutcome, n int, stop StopReason) (*http.Response, error) {
	resp, err := last.outcome(n, stop, r.req.Context())
	if resp != nil {
		ev.Response = resp
	}
	r.giveUp(ev, stop, false) // the response it shows was drained: its body closed, or the copy in memory
	return r.end(resp, err)
}

// lastOutcome is a failed attempt's outcome, kept while its retry waits so
// that it can be returned if the retry is never sent. kept reports that it
// can: it is an error, or a response whose whole body is in body.
type lastOutcome struct {
	resp *http.Response
	err  error
	body []byte
	cut  error // the read error that ended body, when its own body was cut short
	kept bool
}

// outcome returns the kept outcome of attempt n, which stop ended: the
// response with its body in memory, or an *Error, which wraps the
// context's error too when the context ended the request. A canceled
// wait returns the context's error.
func (l lastOutcome) outcome(n int, stop StopReason, ctx context.Context) (*http.Response, error) {
	if stop == StopCanceled {
		return nil, &Error{Attempts: n, Reason: stop, Err: withCause(ctx, ctx.Err())}
	}
	err := l.err
	if err == nil && l.kept {
		l.resp.Body = http.NoBody // a HEAD's, or an empty body
		switch {
		case l.cut != nil: // as it came: its bytes, then the error that cut it short
			l.resp.Body = io.NopCloser(io.MultiReader(bytes.NewReader(l.body), failingReader{l.cut}))
		case len(l.body) > 0:
			l.resp.Body = io.NopCloser(bytes.NewReader(l.body))
		}
		return l.resp, nil
	}
	if err == nil {
		err = l.notKept()
	}
	if ended := endedBy(ctx); ended != nil {
		err = withCause(ctx, fmt.Errorf("%w: %w", err, ended))
	}
	return nil, &Error{Attempts: n, Reason: stop, Err: err}
}

// notKept is the error returned in place of a response not kept.
func (l lastOutcome) notKept() error {
	return fmt.Errorf("%w: status %d", errLastNotKept, l.resp.StatusCode)
}

// endedBy returns the error of a context that has ended, or nil. A
// deadline reached counts as ended before the context's own timer says so:
// a hold that ends at the deadline races that timer. That timer, due, is
// waited for a moment, so that the context's cause (WithDeadlineCause) is
// there to wrap, whichever of the two ran first.
func endedBy(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if deadlineCame(ctx) {
		if ctx.Done() == nil { // a context that can never end: no timer, no cause to wait for
			return context.DeadlineExceeded
		}
		timer := time.NewTimer(timerDueWait)
		defer timer.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
		}
		return context.DeadlineExceeded
	}
	return nil
}

// deadlineCame reports whether ctx's deadline, if any, has come, whether
// or not its timer has fired yet.
func deadlineCame(ctx context.Context) bool {
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

// timerDueWait is how long endedBy waits for a context's deadline timer
// that is due; a context that is not done by then is taken as ended
// without its cause.
const timerDueWait = 10 * time.Millisecond

// withCause returns err, an error of ctx's end, wrapping also the cause
// ctx was ended with (context.Cause: WithCancelCause, WithTimeoutCause)
// when err does not already: net/http returns that cause, and a caller
// who gave one looks for it, wherever its cancel landed.
func withCause(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); cause != nil && !errors.Is(err, cause) {
		return fmt.Errorf("%w: %w", err, cause)
	}
	return err
}

// stopFor is the reason a request stops when its context ended with err:
// the deadline, or a cancel.
func stopFor(err error) StopReason {
	if errors.Is(err, context.DeadlineExceeded) {
		return StopDeadline
	}
	return StopCanceled
}

// errLastNotKept is the cause given for a last response that could not be
// returned: its body was too long, or too slow, to keep in memory.
var errLastNotKept = fmt.Errorf("last response not kept (body over %d KiB or slower than %v)", drainLimit>>10, drainTimeout)

// failingReader fails every Read with err.
type failingReader struct{ err error }

// Read returns err.
func (f failingReader) Read([]byte) (int, error) { return 0, f.err }
