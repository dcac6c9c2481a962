package httpretry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

func TestPerCallPolicy(t *testing.T) {
	for _, tc := range []struct {
		name     string
		ctx      func(context.Context) context.Context
		attempts int
		stop     StopReason
	}{
		{"the Transport's Policy", func(ctx context.Context) context.Context { return ctx }, 4, StopExhausted},
		{"no retries for this call", WithoutRetries, 1, StopExhausted},
		{"another Policy for this call", func(ctx context.Context) context.Context {
			return WithPolicy(ctx, Policy{MaxRetries: 1, BaseDelay: time.Millisecond})
		}, 2, StopExhausted},
		{"out-of-range values as in a Transport", func(ctx context.Context) context.Context {
			return WithPolicy(ctx, Policy{MaxRetries: -7, BaseDelay: -time.Second})
		}, 1, StopExhausted},
		{"the innermost wins", func(ctx context.Context) context.Context {
			return WithPolicy(WithoutRetries(ctx), Policy{MaxRetries: 2, BaseDelay: -1})
		}, 3, StopExhausted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				base := newScripted(status(503))
				var stop StopReason
				tr := &Transport{Base: base, Policy: Policy{MaxRetries: 3, BaseDelay: time.Second}, OnGiveUp: func(e RetryEvent) { stop = e.Stop }}
				req := httptest.NewRequest("GET", "http://x/", nil)
				resp, err := tr.RoundTrip(req.WithContext(tc.ctx(req.Context())))
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if base.calls() != tc.attempts || stop != tc.stop {
					t.Errorf("%d attempts, stop %v; want %d, %v", base.calls(), stop, tc.attempts, tc.stop)
				}
			})
		})
	}
}

// TestPerCallPolicyThroughAClient: the context reaches the Transport
// through http.Client, which is how SDKs pass it down.
func TestPerCallPolicyThroughAClient(t *testing.T) {
	base := newScripted(fail(syscall.ECONNRESET))
	client := &http.Client{Transport: &Transport{Base: base, Policy: noWait}}
	req, _ := http.NewRequestWithContext(WithoutRetries(context.Background()), "GET", "http://x/", nil)
	_, err := client.Do(req)
	var e *Error
	if !errors.As(err, &e) || e.Attempts != 1 || base.calls() != 1 {
		t.Errorf("err %v, %d attempts; want one attempt", err, base.calls())
	}
}

func TestBodyTooLargeIsItsOwnStopReason(t *testing.T) {
	for _, tc := range []struct {
		method string
		want   StopReason
	}{
		{"PUT", StopBodyTooLarge},
		{"POST", StopNotReplayable}, // a shorter body would not make a POST replayable
	} {
		var stop StopReason
		tr := &Transport{Base: newScripted(status(503)), Policy: noWait, MaxBufferedBody: 10, OnGiveUp: func(e RetryEvent) { stop = e.Stop }}
		req, _ := http.NewRequest(tc.method, "http://x/", newPlainBody(bytes.Repeat([]byte("x"), 100)))
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if stop != tc.want {
			t.Errorf("%s with a body over the limit: stop %v, want %v", tc.method, stop, tc.want)
		}
	}
	if !strings.Contains(StopBodyTooLarge.String(), "GetBody") || !strings.Contains(StopBodyTooLarge.String(), "MaxBufferedBody") {
		t.Errorf("%q does not say how to fix it", StopBodyTooLarge)
	}
}

// TestBodyOfACallWithoutRetriesStreams: a call that is never retried has
// no use for a copy of its body, so the body is not read before the
// request is sent: a body that waits for the request to reach the server
// (a duplex stream) goes through, and a retryable outcome is reported as
// StopExhausted. Before, it was read up front, and this one waited until
// its deadline.
func TestBodyOfACallWithoutRetriesStreams(t *testing.T) {
	for _, tc := range []struct {
		name string
		ctx  func(context.Context) context.Context
		tr   Policy
	}{
		{"WithoutRetries", WithoutRetries, Policy{}},
		{"the Transport's Policy", func(ctx context.Context) context.Context { return ctx }, Policy{MaxRetries: NoRetries}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				pr, pw := io.Pipe()
				sent := make(chan struct{})
				go func() {
					<-sent // the body comes only once the request went
					pw.Write([]byte("streamed"))
					pw.Close()
				}()
				var got []byte
				var stop StopReason
				tr := &Transport{Policy: tc.tr, OnGiveUp: func(e RetryEvent) { stop = e.Stop },
					Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
						close(sent)
						got, _ = io.ReadAll(r.Body)
						return response(503, ""), nil
					})}
				ctx, cancel := context.WithTimeout(tc.ctx(context.Background()), time.Second)
				defer cancel()
				req := httptest.NewRequest("PUT", "http://x/", pr).WithContext(ctx) // replayable, but for its body
				resp, err := tr.RoundTrip(req)
				if err != nil {
					t.Fatalf("RoundTrip: %v", err)
				}
				resp.Body.Close()
				if string(got) != "streamed" || resp.StatusCode != 503 || stop != StopExhausted {
					t.Errorf("server got %q, status %d, stop %v; want the streamed body, the 503, StopExhausted", got, resp.StatusCode, stop)
				}
			})
		})
	}
}

func TestStopReasonMarshalsAsItsPhrase(t *testing.T) {
	b, err := json.Marshal(map[string]any{"stop": StopExhausted})
	if err != nil || string(b) != `{"stop":"retries exhausted"}` {
		t.Errorf("json: %s %v", b, err)
	}
}

func TestRetryEventLogsAsAGroup(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}}))
	resp := response(503, "")
	req := httptest.NewRequest("GET", "http://user:secret@api.example/items?token=secret", nil)
	logger.Info("retry", "event", RetryEvent{Request: req, Attempt: 2, Response: resp, Reason: "status 503", Wait: 1500 * time.Millisecond, Held: 500 * time.Millisecond})
	logger.Info("gave up", "event", RetryEvent{Attempt: 3, Err: syscall.ECONNRESET, Reason: "connection reset", Stop: StopDeadline})
	want := `{"level":"INFO","msg":"retry","event":{"method":"GET","url":"http://api.example/items","attempt":2,"status":503,"reason":"status 503","wait":1500000000,"held":500000000}}
{"level":"INFO","msg":"gave up","event":{"attempt":3,"error":"connection reset by peer","reason":"connection reset","wait":0,"stop":"stopped by the deadline"}}
`
	if buf.String() != want {
		t.Errorf("got\n%s\nwant\n%s", buf.String(), want)
	}
}

// TestRetryEventLogsNoQueryOfAnOpaqueURL: a URL built with Opaque, to send
// a request-URI as it is, carries its query there, and net/http sends it;
// LogValue leaves it out as it does RawQuery, and a user written there as
// it does URL.User (reviews' finds).
func TestRetryEventLogsNoQueryOfAnOpaqueURL(t *testing.T) {
	req := &http.Request{Method: "GET", Header: http.Header{},
		URL: &url.URL{Scheme: "https", Host: "api.example", Opaque: "//user:secret@api.example/v1/items?access_token=secret#frag", ForceQuery: true}}
	if !strings.Contains(req.URL.RequestURI(), "access_token=secret") {
		t.Fatalf("request-URI %q: the query is not sent, the test shows nothing", req.URL.RequestURI())
	}
	var buf bytes.Buffer
	slog.New(slog.NewTextHandler(&buf, nil)).Info("retry", "event", RetryEvent{Request: req, Attempt: 1, Reason: "status 503"})
	if got := buf.String(); strings.Contains(got, "secret") || !strings.Contains(got, `url=https://api.example/v1/items `) {
		t.Errorf("logged %s; want the URL without its query", got)
	}
	buf.Reset()
	req.URL.Opaque = "//api.example/%zz?access_token=secret" // not a URL: only the scheme and host are logged
	slog.New(slog.NewTextHandler(&buf, nil)).Info("retry", "event", RetryEvent{Request: req, Attempt: 1, Reason: "status 503"})
	if got := buf.String(); strings.Contains(got, "secret") || !strings.Contains(got, `url=https://api.example `) {
		t.Errorf("logged %s; want the scheme and host only", got)
	}
}
