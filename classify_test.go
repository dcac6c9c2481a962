package httpretry

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
)

// timeoutErr is a net.Error that timed out, like a dial or header timeout.
type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

// goAwayShaped mirrors the shape of the HTTP/2 GoAwayError types.
type goAwayShaped struct {
	LastStreamID uint32
	ErrCode      uint32
	DebugData    string
}

func (goAwayShaped) Error() string { return "server sent GOAWAY" }

// streamShaped mirrors the shape of x/net's http2.StreamError, which has no
// As method of its own.
type streamShaped struct {
	StreamID uint32
	Code     uint32
	Cause    error
}

func (streamShaped) Error() string { return "stream error" }

// misShaped has the stream error's field names with a non-integer Code.
type misShaped struct {
	StreamID uint32
	Code     string
	Cause    error
}

func (misShaped) Error() string { return "not a stream error" }

func dialErr(errno syscall.Errno) error {
	return &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", errno)}
}

func readErr(errno syscall.Errno) error {
	return &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", errno)}
}

// goAwayWords says what net/http's untyped GOAWAY error says, from a type
// of its own.
type goAwayWords struct{}

func (goAwayWords) Error() string { return goAwayUnprocessed + "PROTOCOL_ERROR" }

func TestClassifyError(t *testing.T) {
	tests := []struct {
		name      string
		err       error
		retry     bool
		neverSent bool
	}{
		{"connection refused", dialErr(syscall.ECONNREFUSED), true, true},
		{"connection reset on read", readErr(syscall.ECONNRESET), true, false},
		{"ETIMEDOUT", readErr(syscall.ETIMEDOUT), true, false},
		{"broken pipe while writing the body", &net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.EPIPE)}, true, false},
		{"connection closed under the writer", &net.OpError{Op: "write", Net: "tcp", Err: net.ErrClosed}, true, false},
		{"dial timeout", &net.OpError{Op: "dial", Err: timeoutErr{}}, true, true},
		{"EOF", io.EOF, true, false},
		{"wrapped unexpected EOF", fmt.Errorf("reading: %w", io.ErrUnexpectedEOF), true, false},
		{"net timeout", timeoutErr{}, true, false},
		{"our attempt timeout", fmt.Errorf("%w: %w", ErrAttemptTimeout, context.Canceled), true, false},
		{"GOAWAY by shape", fmt.Errorf("h2: %w", goAwayShaped{LastStreamID: 1}), true, false},
		{"GOAWAY for a new connection's first stream", fmt.Errorf("http2: Transport received GOAWAY from server ErrCode:%v", "ENHANCE_YOUR_CALM"), true, true},
		{"the same words inside another error", errors.New("proxy: http2: Transport received GOAWAY from server ErrCode:NO_ERROR"), false, false},
		{"the same words in an error of another type", goAwayWords{}, false, false},
		{"a new HTTP/1 connection closed before a response", &url.Error{Op: "Get", URL: "http://h/", Err: errors.New("http: server closed idle connection")}, true, false},
		{"a new HTTP/2 connection closed before its first stream", errors.New("http2: client conn could not be established"), true, true},
		{"those words in an error of another type", fmt.Errorf("proxy: %w", errors.New("dial: http2: client conn could not be established")), false, false},
		{"REFUSED_STREAM by shape", streamShaped{Code: 7}, true, true},
		{"other stream error", streamShaped{Code: 2}, false, false},
		{"stream-like with odd field types", misShaped{Code: "7"}, false, false},
		{"joined errors reach the cause", errors.Join(errors.New("x"), readErr(syscall.ECONNRESET)), true, false},
		// A failover Base's tries, joined: never sent only if none was (a
		// review's find: a refused try beside a reset one made a keyless
		// POST that the second backend had read be sent again).
		{"refused joined to a reset", errors.Join(dialErr(syscall.ECONNREFUSED), readErr(syscall.ECONNRESET)), true, false},
		{"refused and reset, two %w", &url.Error{Op: "Post", URL: "http://h/", Err: fmt.Errorf("%w; then %w", dialErr(syscall.ECONNREFUSED), readErr(syscall.ECONNRESET))}, true, false},
		{"refused twice, joined", errors.Join(dialErr(syscall.ECONNREFUSED), dialErr(syscall.ECONNREFUSED)), true, true},
		{"no route to host", dialErr(syscall.EHOSTUNREACH), true, true},
		// A join that names no error proves nothing (every one of none did),
		// and the Transport's own ErrAttemptTimeout around a dial's error
		// says nothing either way (a review's finds).
		{"a join of no error", &joinedNone{errs: []error{}}, false, false},
		{"a join of nils", &joinedNone{errs: []error{nil}}, false, false},
		{"our attempt timeout around a refused dial", fmt.Errorf("%w: %w", ErrAttemptTimeout, dialErr(syscall.ECONNREFUSED)), true, true},
		{"a dial that joins the causes of its addresses", &net.OpError{Op: "dial", Net: "tcp", Err: errors.Join(errors.New("a: timeout"), syscall.ECONNRESET)}, true, true},
		{"network unreachable", dialErr(syscall.ENETUNREACH), true, true},
		{"caller canceled", context.Canceled, false, false},
		{"caller deadline", fmt.Errorf("x: %w", context.DeadlineExceeded), false, false},
		{"canceled beats a reset in the same chain", errors.Join(context.Canceled, readErr(syscall.ECONNRESET)), false, false},
		{"x509 unknown authority", &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}, false, false},
		{"x509 hostname", x509.HostnameError{Certificate: &x509.Certificate{}, Host: "h"}, false, false},
		{"tls alert", tls.AlertError(40), false, false},
		{"tls record header", tls.RecordHeaderError{Msg: "not tls"}, false, false},
		{"bad url", &url.Error{Op: "parse", URL: "::", Err: errors.New("missing protocol scheme")}, false, false},
		{"unknown error", errors.New("unsupported protocol scheme"), false, false},
		{"dns not found", &net.DNSError{Err: "no such host", Name: "x.invalid", IsNotFound: true}, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			retry, reason := classifyError(tt.err)
			assert.Equal(t, tt.retry, retry)
			if retry {
				assert.NotEmpty(t, reason)
			}
			assert.Equal(t, tt.neverSent, neverSent(tt.err))
		})
	}
}

// TestDeadlineOfTheAttemptIsRetried: a Base that bounds each attempt with
// a context of its own returns context.DeadlineExceeded when it fires. It
// was taken for the caller's deadline and never retried; it is a timeout
// of the attempt, retried as one, while the caller's own deadline, its
// cancel, and a nil request are not.
func TestDeadlineOfTheAttemptIsRetried(t *testing.T) {
	deadline := fmt.Errorf("base: %w", context.DeadlineExceeded)
	live := httptest.NewRequest("GET", "http://h/", nil)
	ended, cancel := context.WithDeadline(context.Background(), time.Unix(1, 0))
	defer cancel()
	for _, tc := range []struct {
		name  string
		req   *http.Request
		err   error
		retry bool
	}{
		{"the attempt's own deadline", live, deadline, true},
		{"the caller's deadline", live.WithContext(ended), deadline, false},
		{"a cancel in the chain", live, errors.Join(deadline, context.Canceled), false},
		{"no request", nil, deadline, false},
	} {
		if retry, reason := DefaultClassifier(tc.req, nil, tc.err); retry != tc.retry || retry != (reason != "") {
			t.Errorf("%s: retry %v (%q), want %v", tc.name, retry, reason, tc.retry)
		}
	}
	synctest.Test(t, func(t *testing.T) {
		attempts := 0
		tr := &Transport{Policy: Policy{BaseDelay: time.Millisecond}, Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if attempts++; attempts > 1 {
				return response(200, "ok"), nil
			}
			ctx, cancel := context.WithTimeout(r.Context(), 100*time.Millisecond)
			defer cancel()
			<-ctx.Done() // virtual: the first attempt hangs until the Base's own deadline
			return nil, ctx.Err()
		})}
		resp, err := tr.RoundTrip(httptest.NewRequest("GET", "http://h/", nil))
		if err != nil || resp.StatusCode != 200 || attempts != 2 {
			t.Fatalf("after %d attempts: %v, %v; want the 200 of the retry", attempts, resp, err)
		}
		resp.Body.Close()
	})
}

func TestTypedStreamErrorMirror(t *testing.T) {
	// net/http's bundled StreamError converts itself into the mirror type
	// through its As method; the mirror itself must match directly too.
	se := h2StreamError{StreamID: 3, Code: h2RefusedStream}
	assert.True(t, isRefusedStream(fmt.Errorf("wrapped: %w", se)))
	assert.Contains(t, se.Error(), "7")
}

func TestClassifyStatus(t *testing.T) {
	for status, want := range map[int]bool{
		200: false, 301: false, 400: false, 401: false, 403: false, 404: false,
		408: false, 500: false, 501: false, 429: true, 502: true, 503: true, 504: true,
	} {
		retry, reason := DefaultClassifier(nil, &http.Response{StatusCode: status}, nil)
		assert.Equal(t, want, retry, "status %d", status)
		if want {
			assert.Equal(t, fmt.Sprintf("status %d", status), reason)
		}
	}
	retry, reason := classifyStatus(418, []int{418})
	assert.True(t, retry)
	assert.Equal(t, "status 418", reason)
	retry, _ = classifyStatus(503, []int{})
	assert.False(t, retry, "an empty list retries nothing")
}

func TestReplayable(t *testing.T) {
	tests := []struct {
		method string
		header string
		all    bool
		want   bool
	}{
		{"", "", false, true},
		{"GET", "", false, true},
		{"HEAD", "", false, true},
		{"OPTIONS", "", false, true},
		{"TRACE", "", false, true},
		{"PUT", "", false, true},
		{"DELETE", "", false, true},
		{"POST", "", false, false},
		{"PATCH", "", false, false},
		{"CONNECT", "", false, false},
		{"get", "", false, false}, // methods are case-sensitive
		{"POST", "Idempotency-Key", false, true},
		{"PATCH", "X-Idempotency-Key", false, true},
		{"POST", "", true, true},
	}
	for _, tt := range tests {
		req := &http.Request{Method: tt.method, Header: http.Header{}}
		if tt.header != "" {
			req.Header[tt.header] = []string{""} // present, even empty, counts
		}
		assert.Equal(t, tt.want, replayable(req, tt.all), "%s %q all=%v", tt.method, tt.header, tt.all)
	}
}

func TestStopReasonString(t *testing.T) {
	assert.Equal(t, "retries exhausted", StopExhausted.String())
	assert.Equal(t, "StopReason(99)", StopReason(99).String())
	assert.Equal(t, "StopReason(-1)", StopReason(-1).String())
	for r := StopNone; int(r) < len(stopNames); r++ {
		assert.NotEmpty(t, r.String(), "reason %d has a name", r)
	}
}

// notTimeout wraps an error and says it is not a timeout.
type notTimeout struct{ error }

func (notTimeout) Timeout() bool   { return false }
func (e notTimeout) Unwrap() error { return e.error }

// TestErrorIsATimeoutWhenItsCauseIs: http.Client wraps the Transport's
// error in a *url.Error, whose Timeout asks only its direct cause, so
// os.IsTimeout sees a deadline, Client.Timeout or AttemptTimeout only when
// *Error answers for its cause, as a plain http.Transport's errors do.
func TestErrorIsATimeoutWhenItsCauseIs(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cause error
		want  bool
	}{
		{"a deadline", context.DeadlineExceeded, true},
		{"a deadline, wrapped", fmt.Errorf("%w: status 503: %w", errLastNotKept, context.DeadlineExceeded), true},
		{"an attempt timeout", fmt.Errorf("%w: %w", ErrAttemptTimeout, errors.New("net/http: request canceled")), true},
		{"a dial timeout", &net.OpError{Op: "dial", Err: timeoutErr{}}, true},
		{"a cancellation", context.Canceled, false},
		{"a reset", syscall.ECONNRESET, false},
		{"a reset, then the deadline", fmt.Errorf("%w: %w", syscall.ECONNRESET, context.DeadlineExceeded), true},
		{"a reset, then a cancellation", fmt.Errorf("%w: %w", syscall.ECONNRESET, context.Canceled), false},
		{"a wrapper that says no, around a deadline", notTimeout{context.DeadlineExceeded}, false},
		{"a wrapper around nothing", notTimeout{}, false},
		{"a wrapper that says nothing, around nothing", fmt.Errorf("cause: %w", error(nil)), false},
	} {
		err := &url.Error{Op: "Get", URL: "http://x/", Err: &Error{Attempts: 1, Reason: StopCanceled, Err: tc.cause}}
		if got := os.IsTimeout(err); got != tc.want {
			t.Errorf("%s: os.IsTimeout %v, want %v", tc.name, got, tc.want)
		}
	}
	var ne net.Error
	deadlineCut := &Error{Reason: StopDeadline, Err: fmt.Errorf("%w: %w", syscall.ECONNRESET, context.DeadlineExceeded)}
	if !errors.As(fmt.Errorf("get: %w", deadlineCut), &ne) || !ne.Timeout() || deadlineCut.Temporary() {
		t.Error("errors.As to net.Error does not reach *Error's Timeout, or it says temporary")
	}
	if !os.IsTimeout(ErrAttemptTimeout) || !errors.Is(fmt.Errorf("x: %w", ErrAttemptTimeout), ErrAttemptTimeout) {
		t.Error("ErrAttemptTimeout is not a timeout, or errors.Is does not find it")
	}
}

// joinedNone is a Base's own multi-error that kept no error of its tries.
type joinedNone struct{ errs []error }

func (e *joinedNone) Error() string   { return "backend 1: reset after the body" }
func (e *joinedNone) Unwrap() []error { return e.errs }
