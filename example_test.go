package httpretry_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/httpretry/httpretry"
)

// failFirst starts a server that answers 503 to its first n requests and
// "hello" after that, and counts the requests it gets.
func failFirst(n int32) (*httptest.Server, *atomic.Int32) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hits.Add(1) <= n {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, "hello")
	}))
	return srv, &hits
}

// The zero value is ready to use as an http.Client's Transport: a server
// that fails twice and then answers is, to the caller, a server that answers.
func Example() {
	srv, hits := failFirst(2)
	defer srv.Close()

	client := &http.Client{Transport: &httpretry.Transport{}}
	resp, err := client.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Printf("%s %q after %d attempts\n", resp.Status, body, hits.Load())
	// Output: 200 OK "hello" after 3 attempts
}

// weatherClient stands for an SDK client: like most, it takes the
// *http.Client to send its requests with.
type weatherClient struct {
	http    *http.Client
	baseURL string
}

func newWeatherClient(hc *http.Client, baseURL string) *weatherClient {
	return &weatherClient{http: hc, baseURL: baseURL}
}

// Forecast is an SDK call; it knows nothing of retries.
func (c *weatherClient) Forecast(ctx context.Context, city string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.baseURL+"/forecast?city="+city, nil)
	if err != nil {
		return "", err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("forecast: %s", resp.Status)
	}
	body, err := io.ReadAll(resp.Body)
	return string(body), err
}

// An SDK that accepts an *http.Client retries through httpretry with its
// own code unchanged. The client's Timeout bounds the whole logical
// request, waits included.
func Example_sdk() {
	srv, _ := failFirst(2)
	defer srv.Close()

	hc := &http.Client{
		Transport: &httpretry.Transport{
			Policy: httpretry.Policy{BaseDelay: -1}, // retry at once, to keep the example fast
		},
		Timeout: 10 * time.Second,
	}
	weather := newWeatherClient(hc, srv.URL)
	forecast, err := weather.Forecast(context.Background(), "Oslo")
	fmt.Println(forecast, err)
	// Output: hello <nil>
}

// tracing stands for a tracing or logging transport. Used as Base, it sees
// every attempt, and Attempt tells it which one it is.
type tracing struct{ base http.RoundTripper }

func (t tracing) RoundTrip(req *http.Request) (*http.Response, error) {
	n := httpretry.Attempt(req.Context())
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		fmt.Printf("attempt %d: %s %s: %v\n", n, req.Method, req.URL.Path, err)
		return nil, err
	}
	fmt.Printf("attempt %d: %s %s: %d (resend_count %d)\n", n, req.Method, req.URL.Path, resp.StatusCode, n-1)
	return resp, nil
}

// A transport stacked under httpretry as its Base records one entry per
// attempt. (Stacked the other way, wrapping httpretry, it would record one
// per logical request.)
func ExampleAttempt() {
	srv, _ := failFirst(2)
	defer srv.Close()

	client := &http.Client{Transport: &httpretry.Transport{
		Base:   tracing{base: http.DefaultTransport},
		Policy: httpretry.Policy{BaseDelay: -1},
	}}
	resp, err := client.Get(srv.URL + "/items")
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	fmt.Println("caller got", resp.Status)
	// Output:
	// attempt 1: GET /items: 503 (resend_count 0)
	// attempt 2: GET /items: 503 (resend_count 1)
	// attempt 3: GET /items: 200 (resend_count 2)
	// caller got 200 OK
}

// OnRetry sees each failed attempt before its wait, for logs and metrics.
func ExampleTransport_onRetry() {
	srv, _ := failFirst(2)
	defer srv.Close()

	client := &http.Client{Transport: &httpretry.Transport{
		Policy: httpretry.Policy{BaseDelay: -1},
		OnRetry: func(e httpretry.RetryEvent) {
			fmt.Printf("attempt %d of %s failed (%s), retried after %v\n", e.Attempt, e.Request.URL.Path, e.Reason, e.Wait)
		},
	}}
	resp, err := client.Get(srv.URL + "/report")
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	fmt.Println(resp.Status)
	// Output:
	// attempt 1 of /report failed (status 503), retried after 0s
	// attempt 2 of /report failed (status 503), retried after 0s
	// 200 OK
}

// A Classifier extends the default decision: here a 500 is retried for GET
// only, and everything else is left to DefaultClassifier.
func ExampleClassifier() {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hits.Add(1) == 1 || r.Method == http.MethodDelete {
			http.Error(w, "oops", http.StatusInternalServerError)
			return
		}
		fmt.Fprint(w, "ok")
	}))
	defer srv.Close()

	client := &http.Client{Transport: &httpretry.Transport{
		Policy: httpretry.Policy{BaseDelay: -1},
		Classifier: func(req *http.Request, resp *http.Response, err error) (bool, string) {
			if resp != nil && resp.StatusCode == http.StatusInternalServerError && req.Method == http.MethodGet {
				return true, "status 500 on GET"
			}
			return httpretry.DefaultClassifier(req, resp, err)
		},
	}}
	for _, method := range []string{http.MethodGet, http.MethodDelete} {
		before := hits.Load()
		req, _ := http.NewRequest(method, srv.URL, nil)
		resp, err := client.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
		fmt.Printf("%s: %s, attempts: %d\n", method, resp.Status, hits.Load()-before)
	}
	// Output:
	// GET: 200 OK, attempts: 2
	// DELETE: 500 Internal Server Error, attempts: 1
}

// A Classifier can decide on a response's body with PeekBody, which leaves
// the body whole for the caller: here an API that reports a transient
// failure as a 400 with a JSON error code.
func ExamplePeekBody() {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		if hits.Add(1) == 1 {
			fmt.Fprint(w, `{"error":"temporarily_unavailable"}`)
			return
		}
		fmt.Fprint(w, `{"error":"invalid_city"}`)
	}))
	defer srv.Close()

	client := &http.Client{Transport: &httpretry.Transport{
		Policy: httpretry.Policy{BaseDelay: -1},
		Classifier: func(req *http.Request, resp *http.Response, err error) (bool, string) {
			if resp != nil && resp.StatusCode == http.StatusBadRequest {
				head, _ := httpretry.PeekBody(resp, 256)
				var e struct{ Error string }
				if json.Unmarshal(head, &e) == nil && e.Error == "temporarily_unavailable" {
					return true, "temporarily unavailable"
				}
			}
			return httpretry.DefaultClassifier(req, resp, err)
		},
	}}
	resp, err := client.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Printf("%s %s after %d attempts\n", resp.Status, body, hits.Load())
	// Output: 400 Bad Request {"error":"invalid_city"} after 2 attempts
}

// When the last attempt fails with a transport error, RoundTrip returns an
// *Error with the attempt count; errors.Is still reaches the cause.
func ExampleError() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: every dial is refused

	client := &http.Client{Transport: &httpretry.Transport{
		Policy: httpretry.Policy{MaxRetries: 2, BaseDelay: -1},
	}}
	_, err = client.Get("http://" + addr + "/")
	var rerr *httpretry.Error
	if !errors.As(err, &rerr) {
		fmt.Println("not an *httpretry.Error:", err)
		return
	}
	fmt.Println(rerr.Attempts, "attempts,", rerr.Reason)
	fmt.Println("connection refused:", errors.Is(err, syscall.ECONNREFUSED))
	msg, _, _ := strings.Cut(rerr.Error(), ": dial")
	fmt.Println(msg)
	// Output:
	// 3 attempts, retries exhausted
	// connection refused: true
	// httpretry: giving up after 3 attempts: retries exhausted
}

// Delay shows the waits a Policy gives: here its largest, with u just
// under 1, for a request's five retries.
func ExamplePolicy_Delay() {
	p := httpretry.Policy{BaseDelay: 100 * time.Millisecond, MaxDelay: time.Second}
	for n := 1; n <= 5; n++ {
		fmt.Println(n, p.Delay(n, 0, 0.999).Round(time.Millisecond))
	}
	// Output:
	// 1 100ms
	// 2 200ms
	// 3 400ms
	// 4 799ms
	// 5 999ms
}

// WithoutRetries turns retries off for one call, here through an
// http.Client; an SDK that passes its caller's context down works the same.
func ExampleWithoutRetries() {
	srv, hits := failFirst(1)
	defer srv.Close()
	client := &http.Client{Transport: &httpretry.Transport{}}

	req, _ := http.NewRequestWithContext(httpretry.WithoutRetries(context.Background()), "GET", srv.URL, nil)
	resp, err := client.Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	fmt.Println(resp.Status, "after", hits.Load(), "attempt")
	// Output: 503 Service Unavailable after 1 attempt
}

// A RetryEvent logs as a group with log/slog, its StopReason as a phrase.
// (The base here answers 503 itself, so that the output is stable.)
func ExampleRetryEvent_LogValue() {
	logger := slog.New(slog.NewJSONHandler(os.Stdout, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{} // for a stable output
		}
		return a
	}}))
	tr := &httpretry.Transport{
		Policy:   httpretry.Policy{MaxRetries: 1, BaseDelay: -1},
		OnRetry:  func(e httpretry.RetryEvent) { logger.Info("retry", "event", e) },
		OnGiveUp: func(e httpretry.RetryEvent) { logger.Info("give up", "event", e) },
		Base:     unavailable{},
	}
	resp, err := (&http.Client{Transport: tr}).Get("http://api.example/items?token=secret")
	if err == nil {
		resp.Body.Close()
	}
	// Output:
	// {"level":"INFO","msg":"retry","event":{"method":"GET","url":"http://api.example/items","attempt":1,"status":503,"reason":"status 503","wait":0}}
	// {"level":"INFO","msg":"give up","event":{"method":"GET","url":"http://api.example/items","attempt":2,"status":503,"reason":"status 503","wait":0,"stop":"retries exhausted"}}
}

// unavailable is a base transport that answers every request with 503.
type unavailable struct{}

func (unavailable) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		r.Body.Close()
	}
	return &http.Response{StatusCode: 503, Status: "503 Service Unavailable", Body: http.NoBody, Header: http.Header{}, Request: r}, nil
}

// signEachAttempt is a Base that signs each attempt afresh, as a request
// signed once would replay a nonce, a timestamp or an expired token. It
// signs a clone: the request it is given may be the caller's own.
type signEachAttempt struct {
	base  http.RoundTripper
	nonce atomic.Int64
}

func (s *signEachAttempt) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-Nonce", fmt.Sprint(s.nonce.Add(1))) // or a fresh token, a signature
	return s.base.RoundTrip(r)
}

// A request whose signature or token must be fresh for each attempt is
// signed in Base, which the Transport calls once per attempt; the
// caller's request stays as it was.
func ExampleTransport_signEachAttempt() {
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, r.Header.Get("X-Nonce"))
		if len(seen) == 1 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, "hello")
	}))
	defer srv.Close()

	tr := &httpretry.Transport{
		Base:   &signEachAttempt{base: http.DefaultTransport},
		Policy: httpretry.Policy{BaseDelay: time.Millisecond},
	}
	req, _ := http.NewRequest("GET", srv.URL, nil)
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	fmt.Printf("%s; nonces %v; the caller's request has %q\n", resp.Status, seen, req.Header.Get("X-Nonce"))
	// Output: 200 OK; nonces [1 2]; the caller's request has ""
}

// rateLimitReset is a Base that turns a 429's X-RateLimit-Reset (the Unix
// second the limit resets, by the server's clock) into the Retry-After
// the Transport honours, as a date counted from the response's Date.
type rateLimitReset struct{ base http.RoundTripper }

func (t rateLimitReset) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(r)
	if err != nil || resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "" {
		return resp, err
	}
	if reset, perr := strconv.ParseInt(resp.Header.Get("X-RateLimit-Reset"), 10, 64); perr == nil {
		resp.Header.Set("Retry-After", time.Unix(reset, 0).UTC().Format(http.TimeFormat)) // a date: counted from the response's Date
	}
	return resp, nil
}

// A server that names its rate limit's reset in a header of its own, not
// Retry-After: a Base turns it into a Retry-After, which the Transport
// waits for as for any other.
func ExampleTransport_rateLimitReset() {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hits.Add(1) == 1 {
			// The second under way, so that the example runs at once: a
			// later one is waited for (up to MaxRetryAfter).
			w.Header().Set("X-RateLimit-Reset", fmt.Sprint(time.Now().Unix()))
			http.Error(w, "slow down", http.StatusTooManyRequests)
			return
		}
		fmt.Fprint(w, "hello")
	}))
	defer srv.Close()

	var told string
	tr := &httpretry.Transport{
		Base:    rateLimitReset{base: http.DefaultTransport},
		Policy:  httpretry.Policy{BaseDelay: time.Millisecond},
		OnRetry: func(e httpretry.RetryEvent) { told = e.Response.Header.Get("Retry-After") },
	}
	resp, err := (&http.Client{Transport: tr}).Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	fmt.Println(resp.Status, "after", hits.Load(), "attempts; told Retry-After:", told != "")
	// Output: 200 OK after 2 attempts; told Retry-After: true
}
