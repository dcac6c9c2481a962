package httpretry

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jarcoal/httpmock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestZeroValueTransportAsClientTransport(t *testing.T) {
	var hits int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits++
		io.WriteString(w, "hello")
	}))
	defer srv.Close()

	client := &http.Client{Transport: &Transport{}}
	resp, err := client.Get(srv.URL)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	assert.Equal(t, "hello", string(body))
	assert.Equal(t, 1, hits)
	assert.Same(t, defaultBase(), (&Transport{}).base(), "nil Base is the one shared default")
}

func TestRetriesRetryableStatusesWithHTTPMock(t *testing.T) {
	mock := httpmock.NewMockTransport()
	mock.RegisterResponder("GET", "http://api.test/items", httpmock.ResponderFromMultipleResponses([]*http.Response{
		httpmock.NewStringResponse(503, "busy"),
		httpmock.NewStringResponse(502, "bad gateway"),
		httpmock.NewStringResponse(200, "items"),
	}))
	var events []RetryEvent
	tr := &Transport{Base: mock, Policy: noWait, OnRetry: func(e RetryEvent) { events = append(events, e) }}

	resp, err := (&http.Client{Transport: tr}).Get("http://api.test/items")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	assert.Equal(t, "items", string(body))
	assert.Equal(t, 3, mock.GetTotalCallCount())
	require.Len(t, events, 2)
	assert.Equal(t, 1, events[0].Attempt)
	assert.Equal(t, 503, events[0].Status())
	assert.Equal(t, "status 503", events[0].Reason)
	assert.Equal(t, 2, events[1].Attempt)
	assert.Equal(t, "status 502", events[1].Reason)
	assert.Equal(t, StopNone, events[1].Stop)
}

func TestNeverRetriesFinalStatuses(t *testing.T) {
	for _, code := range []int{200, 400, 401, 403, 404, 500, 501} {
		base := newScripted(status(code), status(200))
		resp, err := (&Transport{Base: base, Policy: noWait}).RoundTrip(httptest.NewRequest("GET", "http://x/", nil))
		require.NoError(t, err)
		assert.Equal(t, code, resp.StatusCode)
		assert.Equal(t, 1, base.calls(), "status %d", code)
	}
}

func TestExhaustionReturnsLastResponseUntouched(t *testing.T) {
	base := newScripted(status(503))
	var gaveUp []RetryEvent
	tr := &Transport{Base: base, Policy: Policy{MaxRetries: 3, BaseDelay: -1}, OnGiveUp: func(e RetryEvent) { gaveUp = append(gaveUp, e) }}

	resp, err := tr.RoundTrip(httptest.NewRequest("GET", "http://x/", nil))
	require.NoError(t, err, "a 503 is a response, not an error")
	assert.Equal(t, 4, base.calls())
	assert.Equal(t, 503, resp.StatusCode)
	body, _ := io.ReadAll(resp.Body)
	assert.Equal(t, "body of Service Unavailable", string(body), "the returned body is unread")
	assert.Equal(t, int32(0), closes(resp), "the returned body is left to the caller")
	require.Len(t, gaveUp, 1)
	assert.Equal(t, StopExhausted, gaveUp[0].Stop)
	assert.Equal(t, 4, gaveUp[0].Attempt)
	assert.Same(t, resp, gaveUp[0].Response)
}

func TestDiscardedResponsesAreDrainedAndClosed(t *testing.T) {
	var discarded []*http.Response
	base := newScripted(
		func(r *http.Request) (*http.Response, error) {
			resp, _ := status(503)(r)
			discarded = append(discarded, resp)
			return resp, nil
		},
		func(r *http.Request) (*http.Response, error) {
			resp, _ := status(503)(r)
			discarded = append(discarded, resp)
			return resp, nil
		},
		status(200),
	)
	_, err := (&Transport{Base: base, Policy: noWait}).RoundTrip(httptest.NewRequest("GET", "http://x/", nil))
	require.NoError(t, err)
	require.Len(t, discarded, 2)
	for _, resp := range discarded {
		tb := resp.Body.(*trackedBody)
		assert.Equal(t, int32(1), tb.closes.Load())
		assert.Equal(t, int64(len("body of Service Unavailable")), tb.read.Load(), "drained to EOF")
	}
}

func TestTransportErrorIsWrappedWithAttemptCount(t *testing.T) {
	reset := readErr(syscall.ECONNRESET)
	base := newScripted(fail(reset))
	var gaveUp RetryEvent
	tr := &Transport{Base: base, Policy: Policy{MaxRetries: 5, BaseDelay: -1}, OnGiveUp: func(e RetryEvent) { gaveUp = e }}

	resp, err := tr.RoundTrip(httptest.NewRequest("GET", "http://x/", nil))
	assert.Nil(t, resp)
	require.Error(t, err)
	assert.Equal(t, 6, base.calls())
	assert.True(t, errors.Is(err, syscall.ECONNRESET), "errors.Is reaches the cause")
	var rerr *Error
	require.True(t, errors.As(err, &rerr))
	assert.Equal(t, 6, rerr.Attempts)
	assert.Equal(t, StopExhausted, rerr.Reason)
	assert.True(t, strings.HasPrefix(err.Error(), "httpretry: giving up after 6 attempts: retries exhausted: "), err.Error())
	assert.Equal(t, StopExhausted, gaveUp.Stop)
	assert.Equal(t, "connection reset", gaveUp.Reason)
}

func TestNonRetryableErrorIsWrappedOnce(t *testing.T) {
	base := newScripted(fail(errors.New("unsupported protocol scheme")))
	_, err := (&Transport{Base: base, Policy: noWait}).RoundTrip(httptest.NewRequest("GET", "http://x/", nil))
	var rerr *Error
	require.True(t, errors.As(err, &rerr))
	assert.Equal(t, 1, rerr.Attempts)
	assert.Equal(t, StopNotRetryable, rerr.Reason)
	assert.Equal(t, "httpretry: giving up after 1 attempt: not retryable: unsupported protocol scheme", err.Error())
}

func TestNothingSentSaysSo(t *testing.T) {
	_, err := (&Transport{Base: newScripted()}).RoundTrip(&http.Request{Method: "GET", Header: http.Header{}})
	assert.EqualError(t, err, "httpretry: nothing sent: invalid request: nil Request.URL")
}

func TestPostIsNotRetriedBlindly(t *testing.T) {
	tests := []struct {
		name   string
		method string
		header string
		all    bool
		err    error
		calls  int
		stop   StopReason
	}{
		{"POST 503", "POST", "", false, nil, 1, StopNotReplayable},
		{"PATCH 503", "PATCH", "", false, nil, 1, StopNotReplayable},
		{"POST reset after sending", "POST", "", false, readErr(syscall.ECONNRESET), 1, StopNotReplayable},
		{"POST with Idempotency-Key", "POST", "Idempotency-Key", false, nil, 3, StopExhausted},
		{"POST with X-Idempotency-Key", "POST", "X-Idempotency-Key", false, nil, 3, StopExhausted},
		{"POST with RetryAllMethods", "POST", "", true, nil, 3, StopExhausted},
		{"POST refused: never sent", "POST", "", false, dialErr(syscall.ECONNREFUSED), 3, StopExhausted},
		{"PUT 503", "PUT", "", false, nil, 3, StopExhausted},
		{"DELETE 503", "DELETE", "", false, nil, 3, StopExhausted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			step := status(503)
			if tt.err != nil {
				step = fail(tt.err)
			}
			base := newScripted(step)
			var stop StopReason
			tr := &Transport{Base: base, Policy: Policy{MaxRetries: 2, BaseDelay: -1}, RetryAllMethods: tt.all,
				OnGiveUp: func(e RetryEvent) { stop = e.Stop }}
			req := httptest.NewRequest(tt.method, "http://x/", strings.NewReader("payload"))
			if tt.header != "" {
				req.Header.Set(tt.header, "k-1")
			}
			resp, err := tr.RoundTrip(req)
			if resp != nil {
				resp.Body.Close()
			}
			assert.Equal(t, tt.calls, base.calls())
			assert.Equal(t, tt.stop, stop)
			if tt.err != nil {
				var rerr *Error
				require.True(t, errors.As(err, &rerr))
				assert.Equal(t, tt.stop, rerr.Reason)
			}
			for i, b := range base.bodies {
				assert.Equal(t, "payload", b, "attempt %d body", i+1)
			}
		})
	}
}

func TestCallerRequestIsNeverModified(t *testing.T) {
	// A base that breaks the RoundTripper contract by writing to the request
	// it is given: the caller's request must still come back as it was.
	var received []map[string]any
	rude := newScripted(func(r *http.Request) (*http.Response, error) {
		received = append(received, snapshot(r))
		r.Header.Set("X-Rude", "1")
		r.URL.Path = "/rewritten"
		return status(503)(r)
	})
	req, _ := http.NewRequest("PUT", "http://x/orig?q=1", io.NopCloser(strings.NewReader("abc")))
	req.Header.Set("X-Mine", "yes")
	body := req.Body
	before := snapshot(req)

	resp, err := (&Transport{Base: rude, Policy: Policy{MaxRetries: 2, BaseDelay: -1}}).RoundTrip(req)
	require.NoError(t, err)
	resp.Body.Close()

	assert.Equal(t, before, snapshot(req))
	assert.True(t, body == req.Body, "Body field untouched")
	assert.Nil(t, req.GetBody, "GetBody field untouched")
	assert.Equal(t, []int{1, 2, 3}, rude.attempt)
	for i := 1; i < len(rude.reqs); i++ {
		assert.NotSame(t, req, rude.reqs[i], "retry %d sends its own clone", i)
		assert.Empty(t, received[i]["header"].(http.Header).Get("X-Rude"), "a retry does not inherit an earlier attempt's writes")
		assert.Equal(t, "http://x/orig?q=1", received[i]["url"])
		assert.Equal(t, "abc", rude.bodies[i])
	}
}

// snapshot copies the request fields a transport could be tempted to write.
func snapshot(r *http.Request) map[string]any {
	return map[string]any{
		"method": r.Method, "url": r.URL.String(), "header": r.Header.Clone(),
		"contentLength": r.ContentLength, "host": r.Host, "close": r.Close,
		"transferEncoding": append([]string(nil), r.TransferEncoding...), "ctx": r.Context(),
	}
}

func TestAttemptNumberInContext(t *testing.T) {
	base := newScripted(status(503), status(503), status(200))
	_, err := (&Transport{Base: base, Policy: noWait}).RoundTrip(httptest.NewRequest("GET", "http://x/", nil))
	require.NoError(t, err)
	assert.Equal(t, []int{1, 2, 3}, base.attempt)
	assert.Equal(t, 1, Attempt(context.Background()), "an unmarked context is a first attempt")
}

func TestClassifierHookReplacesAndExtends(t *testing.T) {
	// Retry 500 for GET only; defer to the default for everything else.
	classifier := func(req *http.Request, resp *http.Response, err error) (bool, string) {
		if resp != nil && resp.StatusCode == 500 && req.Method == "GET" {
			return true, "500 on GET"
		}
		return DefaultClassifier(req, resp, err)
	}
	base := newScripted(status(500), status(503), status(200))
	var reasons []string
	tr := &Transport{Base: base, Policy: noWait, Classifier: classifier, OnRetry: func(e RetryEvent) { reasons = append(reasons, e.Reason) }}
	resp, err := tr.RoundTrip(httptest.NewRequest("GET", "http://x/", nil))
	require.NoError(t, err)
	assert.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, []string{"500 on GET", "status 503"}, reasons)

	base = newScripted(status(500), status(200))
	tr.Base = base
	resp, err = tr.RoundTrip(httptest.NewRequest("PUT", "http://x/", nil))
	require.NoError(t, err)
	assert.Equal(t, 500, resp.StatusCode, "the classifier said no for PUT")
}

func TestRetryableStatusesOverrideTheDefault(t *testing.T) {
	base := newScripted(status(503), status(200))
	resp, err := (&Transport{Base: base, Policy: noWait, RetryableStatuses: []int{}}).RoundTrip(httptest.NewRequest("GET", "http://x/", nil))
	require.NoError(t, err)
	assert.Equal(t, 503, resp.StatusCode, "an empty list retries nothing")

	base = newScripted(status(409), status(200))
	resp, err = (&Transport{Base: base, Policy: noWait, RetryableStatuses: []int{409}}).RoundTrip(httptest.NewRequest("GET", "http://x/", nil))
	require.NoError(t, err)
	assert.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, 2, base.calls())
}

func TestNoRetries(t *testing.T) {
	base := newScripted(status(503))
	resp, err := (&Transport{Base: base, Policy: Policy{MaxRetries: NoRetries}}).RoundTrip(httptest.NewRequest("GET", "http://x/", nil))
	require.NoError(t, err)
	assert.Equal(t, 503, resp.StatusCode)
	assert.Equal(t, 1, base.calls())
}

func TestDefaultRetryCountIsFive(t *testing.T) {
	base := newScripted(status(503))
	_, err := (&Transport{Base: base, Policy: noWait}).RoundTrip(httptest.NewRequest("GET", "http://x/", nil))
	require.NoError(t, err)
	assert.Equal(t, 1+DefaultMaxRetries, base.calls())
}

func TestBaseBreakingTheContract(t *testing.T) {
	t.Run("nil response and nil error", func(t *testing.T) {
		base := newScripted(func(*http.Request) (*http.Response, error) { return nil, nil })
		resp, err := (&Transport{Base: base, Policy: noWait}).RoundTrip(httptest.NewRequest("GET", "http://x/", nil))
		assert.Nil(t, resp)
		assert.ErrorIs(t, err, errNilResponse)
		assert.Equal(t, 1, base.calls(), "not retried: a broken base is a bug, not a blip")
	})
	t.Run("response and error", func(t *testing.T) {
		stray := response(200, "stray")
		base := newScripted(func(*http.Request) (*http.Response, error) { return stray, io.ErrUnexpectedEOF }, status(200))
		resp, err := (&Transport{Base: base, Policy: noWait}).RoundTrip(httptest.NewRequest("GET", "http://x/", nil))
		require.NoError(t, err)
		assert.Equal(t, 200, resp.StatusCode)
		assert.Equal(t, 2, base.calls(), "the error wins and is retried")
		assert.Equal(t, int32(1), closes(stray), "the stray response is closed")
	})
}

func TestInvalidRequests(t *testing.T) {
	tr := &Transport{Base: newScripted(status(200))}
	_, err := tr.RoundTrip(nil)
	var rerr *Error
	require.True(t, errors.As(err, &rerr))
	assert.Equal(t, StopInvalid, rerr.Reason)
	assert.Contains(t, err.Error(), "nil Request")

	body := newPlainBody([]byte("x"))
	req := &http.Request{Method: "PUT", Header: http.Header{}, Body: body}
	_, err = tr.RoundTrip(req)
	assert.ErrorContains(t, err, "nil Request.URL")
	assert.Equal(t, int32(1), body.closes.Load())

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	body = newPlainBody([]byte("x"))
	req, _ = http.NewRequestWithContext(ctx, "PUT", "http://x/", body)
	_, err = tr.RoundTrip(req)
	assert.ErrorIs(t, err, context.Canceled)
	require.True(t, errors.As(err, &rerr))
	assert.Equal(t, 0, rerr.Attempts, "nothing was sent")
	assert.Equal(t, int32(1), body.closes.Load())
}

func TestCallerCancelDuringAttemptIsNotRetried(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	base := newScripted(func(r *http.Request) (*http.Response, error) {
		cancel()
		return nil, r.Context().Err()
	})
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://x/", nil)
	_, err := (&Transport{Base: base, Policy: noWait}).RoundTrip(req)
	assert.ErrorIs(t, err, context.Canceled)
	var rerr *Error
	require.True(t, errors.As(err, &rerr))
	assert.Equal(t, StopCanceled, rerr.Reason)
	assert.Equal(t, 1, base.calls())
}

func TestCloseIdleConnectionsIsForwarded(t *testing.T) {
	base := &idleCounter{}
	(&Transport{Base: base}).CloseIdleConnections()
	assert.Equal(t, 1, base.n)
	(&Transport{Base: roundTripFunc(nil)}).CloseIdleConnections() // no such method: nothing to do, no panic
}

type idleCounter struct{ n int }

func (c *idleCounter) RoundTrip(*http.Request) (*http.Response, error) { return nil, nil }
func (c *idleCounter) CloseIdleConnections()                           { c.n++ }

func TestConcurrentUse(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{}
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		body, _ := io.ReadAll(r.Body)
		r.Body.Close()
		mu.Lock()
		seen[string(body)]++
		n := seen[string(body)]
		mu.Unlock()
		if n < 3 {
			return response(503, "busy"), nil
		}
		return response(200, string(body)), nil
	})
	tr := &Transport{Base: base, Policy: noWait}
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Go(func() {
			payload := strings.Repeat(string(rune('a'+i%26)), i+1)
			req := httptest.NewRequest("PUT", "http://x/", io.NopCloser(strings.NewReader(payload)))
			resp, err := tr.RoundTrip(req)
			if assert.NoError(t, err) {
				got, _ := io.ReadAll(resp.Body)
				assert.Equal(t, payload, string(got))
			}
		})
	}
	wg.Wait()
	assert.Len(t, seen, 32)
	for k, n := range seen {
		assert.Equal(t, 3, n, "payload %q", k)
	}
}

func TestURLErrorFromClientStillUnwraps(t *testing.T) {
	base := newScripted(fail(dialErr(syscall.ECONNREFUSED)))
	client := &http.Client{Transport: &Transport{Base: base, Policy: Policy{MaxRetries: 1, BaseDelay: -1}}}
	_, err := client.Get("http://x/")
	var uerr *url.Error
	require.True(t, errors.As(err, &uerr))
	var rerr *Error
	require.True(t, errors.As(err, &rerr))
	assert.Equal(t, 2, rerr.Attempts)
	assert.ErrorIs(t, err, syscall.ECONNREFUSED)
}

// TestResponseNamesTheCallersRequest: net/http's Transport sets
// resp.Request to the request it was given. The Transport returned its
// attempt's clone whenever an attempt was one (a retry, a buffered body,
// AttemptTimeout), whose context is not the caller's: with AttemptTimeout
// it is canceled once the body is closed (a "next page" request made with
// resp.Request.Context() failed), and after a retry it carried the
// attempt's number into the caller's next request (a review's find). So
// it did when Base sent a clone of the attempt of its own, as otelhttp
// does, and named that clone (a later review's find).
func TestResponseNamesTheCallersRequest(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		if r.URL.Path == "/flaky" && n.Add(1)%2 == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	for _, tc := range []struct {
		name string
		tr   func(http.RoundTripper) http.RoundTripper
		path string
		body bool
	}{
		{"net/http", func(b http.RoundTripper) http.RoundTripper { return b }, "/", true},
		{"buffered body", func(b http.RoundTripper) http.RoundTripper { return &Transport{Base: b} }, "/", true},
		{"AttemptTimeout", func(b http.RoundTripper) http.RoundTripper {
			return &Transport{Base: b, AttemptTimeout: 5 * time.Second}
		}, "/", false},
		{"retried", func(b http.RoundTripper) http.RoundTripper {
			return &Transport{Base: b, Policy: Policy{BaseDelay: -1}}
		}, "/flaky", false},
		{"AttemptTimeout, Base clones", func(b http.RoundTripper) http.RoundTripper {
			return &Transport{Base: cloningBase{b}, AttemptTimeout: 5 * time.Second}
		}, "/", false},
		{"retried, Base clones", func(b http.RoundTripper) http.RoundTripper {
			return &Transport{Base: cloningBase{b}, Policy: Policy{BaseDelay: -1}}
		}, "/flaky", false},
		{"first attempt, Base clones", func(b http.RoundTripper) http.RoundTripper {
			return &Transport{Base: cloningBase{b}}
		}, "/", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := &http.Transport{}
			defer base.CloseIdleConnections()
			rt := tc.tr(base)
			var body io.Reader
			if tc.body {
				body = io.NopCloser(strings.NewReader("x"))
			}
			req, _ := http.NewRequest(http.MethodPut, srv.URL+tc.path, body)
			resp, err := rt.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.Request != req {
				t.Errorf("resp.Request is %p, not the caller's request %p", resp.Request, req)
			}
			// The caller's next request, made from the response's context.
			next, _ := http.NewRequestWithContext(resp.Request.Context(), http.MethodGet, srv.URL, nil)
			if a := Attempt(next.Context()); a != 1 {
				t.Errorf("next request's first attempt reports Attempt %d", a)
			}
			resp2, err := rt.RoundTrip(next)
			if err != nil {
				t.Fatalf("next request made with resp.Request.Context(): %v", err)
			}
			resp2.Body.Close()
		})
	}
}

// cloningBase sends a clone of each request with a context of its own, as
// a tracing transport (otelhttp) does to carry its span.
type cloningBase struct{ base http.RoundTripper }

type cloningBaseKey struct{}

func (c cloningBase) RoundTrip(r *http.Request) (*http.Response, error) {
	return c.base.RoundTrip(r.Clone(context.WithValue(r.Context(), cloningBaseKey{}, true)))
}

// TestResponseNamedByBaseOnPurposeIsKept: resp.Request is made the
// caller's only when it is the attempt's request or Base's clone of it. A
// request Base names on purpose (where it followed a redirect to) is kept,
// and a response Base shares between calls is not written (9920f27 wrote
// both: a data race, and a lost final URL; a review's find).
func TestResponseNamedByBaseOnPurposeIsKept(t *testing.T) {
	redirected := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		final := r.Clone(r.Context())
		final.URL.Path = "/moved-here"
		resp := response(200, "ok")
		resp.Request = final
		return resp, nil
	})
	req, _ := http.NewRequest(http.MethodGet, "http://h.example/old", nil)
	resp, err := (&Transport{Base: redirected}).RoundTrip(req)
	if err != nil || resp.Request.URL.Path != "/moved-here" {
		t.Errorf("resp.Request %v, err %v; want Base's /moved-here", resp.Request.URL, err)
	}

	// A cache's response, shared, names the request that first fetched it,
	// of the same method and URL as every later call's attempt: each call
	// gets a copy naming its own request, and the shared one is not
	// written (a later review's find: a data race).
	first, _ := http.NewRequest(http.MethodGet, "http://h.example/", nil)
	shared := &http.Response{StatusCode: 204, Header: http.Header{}, Body: http.NoBody, Request: first}
	tr := &Transport{Base: roundTripFunc(func(*http.Request) (*http.Response, error) { return shared, nil }), AttemptTimeout: time.Hour}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodGet, "http://h.example/", nil)
			if resp, err := tr.RoundTrip(req); err != nil || resp.Request != req {
				t.Errorf("resp %v, err %v; want a response naming the caller's request", resp, err)
			}
		})
	}
	wg.Wait()
	if shared.Request != first {
		t.Errorf("the shared response was written: Request %p, not the cache's %p", shared.Request, first)
	}
}
