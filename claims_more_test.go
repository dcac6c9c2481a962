package httpretry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// README "What does it cost when nothing fails?": no allocation, also for a
// request with GetBody, a keyed GET, and beside a host with requests retrying.
func TestSuccessPathAllocatesNothingForBodiesKeysAndBesideAFailingHost(t *testing.T) {
	base := &okBase{resp: http.Response{StatusCode: 200, Body: http.NoBody}}
	tr := &Transport{Base: base}
	mk := func(method string) *http.Request {
		req, _ := http.NewRequest(method, "http://x/", bytes.NewReader(make([]byte, 1024)))
		return req
	}
	keyed := httptest.NewRequest("GET", "http://x/", nil)
	keyed.Header.Set("Idempotency-Key", "k")
	for name, req := range map[string]*http.Request{"POST GetBody": mk("POST"), "PUT GetBody": mk("PUT"), "keyed GET": keyed} {
		if n := testing.AllocsPerRun(100, func() { tr.RoundTrip(req) }); n != 0 {
			t.Errorf("%s: %v allocations per request", name, n)
		}
	}
	synctest.Test(t, func(t *testing.T) {
		ok := &okBase{resp: http.Response{StatusCode: 200, Body: http.NoBody}}
		tr := &Transport{Policy: Policy{BaseDelay: 10 * time.Second, MaxDelay: 10 * time.Second, Jitter: JitterNone},
			Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
				if r.URL.Host == "down" {
					return response(503, ""), nil
				}
				return ok.RoundTrip(r)
			})}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			req, _ := http.NewRequestWithContext(ctx, "GET", "http://down/", nil)
			if resp, err := tr.RoundTrip(req); err == nil {
				resp.Body.Close()
			}
		}()
		synctest.Wait()
		req := httptest.NewRequest("GET", "http://up/", nil)
		if n := testing.AllocsPerRun(100, func() { tr.RoundTrip(req) }); n != 0 {
			t.Errorf("beside a failing host: %v allocations per request", n)
		}
		cancel()
		<-done
	})
}

// StormState: requests retrying, held, hosts, tokens, while requests retry.
func TestStormStateWhileRequestsRetry(t *testing.T) {
	for _, off := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			tr := &Transport{Policy: Policy{BaseDelay: time.Second, MaxDelay: time.Second, Jitter: JitterNone, MaxRetries: 50},
				Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
					time.Sleep(10 * time.Millisecond) // virtual
					return response(503, ""), nil
				})}
			if off {
				tr.Storm = StormControl{NoHostGate: true}
			}
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			for range 3 {
				wg.Go(func() {
					req, _ := http.NewRequestWithContext(ctx, "GET", "http://down/", nil)
					if resp, err := tr.RoundTrip(req); err == nil {
						resp.Body.Close()
					}
				})
			}
			time.Sleep(5 * time.Second) // virtual
			synctest.Wait()
			s := tr.StormState()
			t.Logf("gate off %v: %+v", off, s)
			wantHosts := 1
			if off {
				wantHosts = 0
			}
			if s.Retrying != 3 || s.Hosts != wantHosts || s.Held > s.Retrying || !(s.BudgetTokens >= 0) || !off && s.BudgetTokens != 0 {
				t.Errorf("gate off %v: %+v", off, s)
			}
			cancel()
			wg.Wait()
			if s := tr.StormState(); s.Retrying != 0 || s.Hosts != 0 || s.Held != 0 {
				t.Errorf("after: %+v", s)
			}
		})
	}
}

// README FAQ: Policy{BaseDelay: -1}: no backoff; a Retry-After is still
// waited unless MaxRetryAfter: -1. Retry-After up to 1 minute honoured,
// spread up to 10% longer; longer returns at once (StopRetryAfter).
func TestRetryAfterIsWaitedWithoutBackoff(t *testing.T) {
	for _, c := range []struct {
		ra       string
		mra      time.Duration
		min, max time.Duration
		attempts int
		stop     StopReason
	}{
		{"3", 0, 3 * time.Second, 3300 * time.Millisecond, 2, StopNone},
		{"3", -1, 0, 0, 2, StopNone},
		{"60", 0, 60 * time.Second, 66 * time.Second, 2, StopNone},
		{"61", 0, 0, 0, 1, StopRetryAfter},
	} {
		synctest.Test(t, func(t *testing.T) {
			var times []time.Time
			var stop StopReason
			tr := &Transport{Policy: Policy{BaseDelay: -1, MaxRetries: 1}, MaxRetryAfter: c.mra,
				OnGiveUp: func(e RetryEvent) { stop = e.Stop },
				Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
					times = append(times, time.Now())
					if len(times) == 1 {
						resp := response(503, "")
						resp.Header.Set("Retry-After", c.ra)
						return resp, nil
					}
					return response(200, ""), nil
				})}
			start := time.Now()
			resp, err := tr.RoundTrip(httptest.NewRequest("GET", "http://x/", nil))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if len(times) != c.attempts || stop != c.stop {
				t.Fatalf("RA %s mra %v: %d attempts, stop %v", c.ra, c.mra, len(times), stop)
			}
			if c.attempts == 2 {
				if w := times[1].Sub(times[0]); w < c.min || w > c.max {
					t.Errorf("RA %s mra %v: waited %v, want [%v, %v]", c.ra, c.mra, w, c.min, c.max)
				}
			} else if time.Since(start) != 0 {
				t.Errorf("not at once")
			}
		})
	}
}

// TestStreamedBodyCloseErrorStopsAsBasesError: a body that streams
// (MaxBufferedBody negative) and whose Close fails stops the call as any
// error of Base does when Base fails the attempt with it: net/http's
// HTTP/1 transport does, its HTTP/2 transport does not (the 200 comes
// back); a keyless POST whose error the classifier retries stops as not
// replayable (StopInvalid's doc, a review's find). net/http's HTTP/1
// transport may instead report the connection's read error, which then
// stops the call as any retryable error of a streamed body does
// (StopBodyTooLarge).
func TestStreamedBodyCloseErrorStopsAsBasesError(t *testing.T) {
	t.Run("POST, retried error", func(t *testing.T) {
		var stop StopReason
		tr := &Transport{Policy: noWait, MaxBufferedBody: -1, OnGiveUp: func(e RetryEvent) { stop = e.Stop },
			Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
				io.Copy(io.Discard, r.Body)
				err := r.Body.Close()
				return nil, fmt.Errorf("net/http: HTTP/1.x transport connection broken: %w", err)
			})}
		body := &closeFailingBody{Reader: strings.NewReader("payload"), err: io.ErrUnexpectedEOF}
		req, _ := http.NewRequest("POST", "http://x/", body)
		_, err := tr.RoundTrip(req)
		var e *Error
		if !errors.As(err, &e) || e.Reason != StopNotReplayable || stop != StopNotReplayable || !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("err %v, OnGiveUp %v; want StopNotReplayable wrapping the body's error", err, stop)
		}
	})
	for _, h2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("net/http, HTTP/2 %v", h2), func(t *testing.T) {
			srv := startServer(t, h2, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) }))
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a guard, never reached
			defer cancel()
			body := &closeFailingBody{Reader: strings.NewReader("payload")}
			req, _ := http.NewRequestWithContext(ctx, "PUT", srv.URL, body)
			resp, err := (&Transport{Base: srv.Client().Transport, Policy: noWait, MaxBufferedBody: -1}).RoundTrip(req)
			if err == nil {
				resp.Body.Close()
			}
			var e *Error
			switch {
			case h2 && err != nil:
				t.Errorf("HTTP/2: %v; want the answer, as net/http's HTTP/2 transport ignores the body's Close error", err)
			case h2:
			case !errors.As(err, &e):
				t.Errorf("HTTP/1: %v; want an *Error", err)
			case errors.Is(err, errCloseFailed) && e.Reason != StopNotRetryable:
				t.Errorf("HTTP/1: %v, %v; want StopNotRetryable wrapping the body's Close error", err, e.Reason)
			case !errors.Is(err, errCloseFailed) && e.Reason != StopBodyTooLarge:
				// net/http may report the connection's read error instead,
				// its write loop having closed the connection on the Close
				// error (one run in about fifteen under -race): a retryable
				// error, and a streamed body that was not kept to send again.
				t.Errorf("HTTP/1: %v, %v; want the body's Close error, or StopBodyTooLarge for net/http's own", err, e.Reason)
			}
		})
	}
}

// WithPolicy: zero fields mean the library's defaults, not the Transport's.
func TestWithPolicyZeroFieldsAreTheLibrarysDefaults(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := newScripted(status(503))
		tr := &Transport{Base: base, Policy: Policy{MaxRetries: 1}}
		req := httptest.NewRequest("GET", "http://x/", nil)
		req = req.WithContext(WithPolicy(req.Context(), Policy{BaseDelay: -1}))
		resp, _ := tr.RoundTrip(req)
		resp.Body.Close()
		if base.calls() != 1+DefaultMaxRetries {
			t.Errorf("%d attempts, want %d", base.calls(), 1+DefaultMaxRetries)
		}
	})
}

// WithoutRetries' doc: a body over MaxBufferedBody reports StopExhausted
// rather than StopBodyTooLarge unless its ContentLength already said it was
// too long, or MaxBufferedBody is negative; StopNotReplayable looked at first.
func TestWithoutRetriesStopReasons(t *testing.T) {
	for _, c := range []struct {
		method   string
		limit    int64
		declared int64
		want     StopReason
	}{
		{"PUT", 5, 0, StopExhausted},
		{"PUT", 5, 10, StopBodyTooLarge},
		{"PUT", -1, 0, StopBodyTooLarge},
		{"PUT", 0, 0, StopExhausted},
		{"POST", 5, 10, StopNotReplayable},
		{"POST", 0, 0, StopNotReplayable},
	} {
		t.Run(fmt.Sprintf("%s limit %d declared %d", c.method, c.limit, c.declared), func(t *testing.T) {
			var stop StopReason
			base := newScripted(status(503))
			tr := &Transport{Base: base, MaxBufferedBody: c.limit, OnGiveUp: func(e RetryEvent) { stop = e.Stop }}
			req, _ := http.NewRequest(c.method, "http://x/", newPlainBody([]byte("0123456789")))
			req.ContentLength = c.declared
			req = req.WithContext(WithoutRetries(req.Context()))
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if stop != c.want || base.calls() != 1 || base.bodies[0] != "0123456789" {
				t.Errorf("stop %v, %d calls, body %q; want %v", stop, base.calls(), base.bodies, c.want)
			}
		})
	}
}
