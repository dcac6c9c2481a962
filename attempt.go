package httpretry

import (
	"context"
	"io"
	"net/http"
)

// attemptKey is the context key of an attempt's number.
type attemptKey struct{}

// withAttempt marks ctx as the context of attempt n (n ≥ 2).
func withAttempt(ctx context.Context, n int) context.Context {
	return context.WithValue(ctx, attemptKey{}, n)
}

// Attempt returns the 1-based number of the attempt whose request carries
// ctx: 1 for the first attempt, 2 for the first retry, and so on. A tracing
// or logging transport used as Base reads it from the request's context; the
// OpenTelemetry attribute http.request.resend_count is Attempt(ctx)-1.
//
// The first attempt's context carries no mark, so that a request that
// succeeds at once costs no extra allocation; any unmarked context, including
// one that never went through a Transport, reports 1. So when one Transport
// is the Base of another, the inner one's first attempt reports the outer
// one's number, and its retries their own.
func Attempt(ctx context.Context) int {
	if n, ok := ctx.Value(attemptKey{}).(int); ok {
		return n
	}
	return 1
}

// attempt is one attempt's request and, with an AttemptTimeout, the means to
// end its context.
type attempt struct {
	req    *http.Request
	cancel context.CancelCauseFunc // nil without AttemptTimeout
}

// newAttempt builds attempt n's request. The first attempt sends the
// caller's request itself when it needs neither a new body nor a timeout of
// its own: the RoundTripper contract already forbids Base to modify it, and
// the success path then costs no copy.
func (t *Transport) newAttempt(req *http.Request, body *requestBody, n int) (attempt, error) {
	if n == 1 && t.AttemptTimeout <= 0 && body.sendsCallersRequest() {
		return attempt{req: req}, nil
	}
	ctx := req.Context()
	if n > 1 {
		ctx = withAttempt(ctx, n)
	}
	var a attempt
	if t.AttemptTimeout > 0 { // its timer starts as it goes (see send)
		ctx, a.cancel = context.WithCancelCause(ctx)
	}
	a.req = req.Clone(ctx)
	a.req.Trailer = req.Trailer // the caller's map, not a copy: a body may fill in its values as it is read
	if err := body.attemptBody(a.req, req, n, replayable(req, t.RetryAllMethods)); err != nil {
		a.release()
		return attempt{}, err
	}
	return a, nil
}

// timedOut reports whether the attempt's own timeout ended it.
func (a attempt) timedOut() bool {
	return a.cancel != nil && context.Cause(a.req.Context()) == ErrAttemptTimeout
}

// release ends the attempt's context; its response is no longer needed.
func (a attempt) release() {
	if a.cancel != nil {
		a.cancel(context.Canceled)
	}
}

// finish returns the attempt's outcome to the caller. An error becomes an
// *Error; a response keeps its context alive until its body is closed.
func (a attempt) finish(resp *http.Response, err error, n int, stop StopReason) (*http.Response, error) {
	if err != nil {
		a.release()
		return nil, &Error{Attempts: n, Reason: stop, Err: err}
	}
	if a.cancel != nil {
		if resp.Body == nil || resp.Body == http.NoBody { // nothing to read: the caller may compare it with NoBody
			a.release()
		} else {
			resp.Body = newCancelBody(resp.Body, a.cancel)
		}
	}
	return resp, nil
}

// cancelBody ends an attempt's context when the returned body is closed.
type cancelBody struct {
	io.ReadCloser
	cancel context.CancelCauseFunc
}

// Close closes the body, then ends the attempt's context.
func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel(context.Canceled)
	return err
}

// cancelBodyWriter keeps the io.Writer of a 101 Switching Protocols body.
type cancelBodyWriter struct {
	*cancelBody
	io.Writer
}

// newCancelBody wraps body, keeping it writable when it was.
func newCancelBody(body io.ReadCloser, cancel context.CancelCauseFunc) io.ReadCloser {
	cb := &cancelBody{ReadCloser: body, cancel: cancel}
	if w, ok := body.(io.Writer); ok {
		return cancelBodyWriter{cancelBody: cb, Writer: w}
	}
	return cb
}
