package httpretry

// Tests of claims the README and the docs make that no other test checks.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/jarcoal/httpmock"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

// README "When retries stop", after the table: "http.Client.Timeout is a
// deadline too: when it cuts off a retry, the client returns the response
// before it with a nil error, if that response could be kept".
func TestClientTimeoutCutRetryReturnsResponseBefore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := 0
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			n++
			if n == 1 {
				resp := response(503, "first 503 body")
				resp.Request = r
				return resp, nil
			}
			<-r.Context().Done() // the retry hangs until the client's timeout
			return nil, r.Context().Err()
		})
		var gaveUp []RetryEvent
		tr := &Transport{Base: base, Policy: Policy{BaseDelay: 100 * time.Millisecond, Jitter: JitterNone},
			OnGiveUp: func(e RetryEvent) { gaveUp = append(gaveUp, e) }}
		c := &http.Client{Transport: tr, Timeout: time.Second}
		resp, err := c.Get("http://h.test/")
		if err != nil {
			t.Fatalf("err = %v, want nil", err)
		}
		b, rerr := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Logf("status %d body %q readErr %v attempts %d gaveUp %+v", resp.StatusCode, b, rerr, n, gaveUp)
		if resp.StatusCode != 503 || string(b) != "first 503 body" || rerr != nil {
			t.Fatalf("got %d %q %v", resp.StatusCode, b, rerr)
		}
		if len(gaveUp) != 1 || gaveUp[0].Stop != StopDeadline || gaveUp[0].Attempt != 2 {
			t.Fatalf("OnGiveUp = %+v", gaveUp)
		}
	})
}

// README "When retries stop", after the table: "... otherwise the
// client's own timeout error, which keeps only the *Error's text": a 503
// body over 64 KiB is not kept (a review's find: the README promised the
// response whatever its size).
func TestClientTimeoutCutRetryAfterUnkeptResponseIsAnError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := 0
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			n++
			if n == 1 {
				resp := response(503, strings.Repeat("b", drainLimit+1))
				resp.Request = r
				return resp, nil
			}
			<-r.Context().Done()
			return nil, r.Context().Err()
		})
		tr := &Transport{Base: base, Policy: Policy{BaseDelay: 100 * time.Millisecond, Jitter: JitterNone}}
		c := &http.Client{Transport: tr, Timeout: time.Second}
		resp, err := c.Get("http://h.test/")
		if resp != nil {
			resp.Body.Close()
		}
		if resp != nil || !os.IsTimeout(err) || !strings.Contains(fmt.Sprint(err), "last response not kept") || n != 2 {
			t.Fatalf("resp %v, err %v after %d attempts; want no response and the client's timeout error naming the response not kept", resp, err, n)
		}
	})
}

// README Common questions: "When http.Client.Timeout fires, net/http may
// replace the transport's error with its own timeout error, so the
// *httpretry.Error is lost; os.IsTimeout(err) still holds. ... give the
// request a context deadline instead: its error is returned as it is,
// wrapped in a *url.Error."
func TestClientTimeoutLosesErrorContextDeadlineKeepsIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			<-r.Context().Done()
			return nil, r.Context().Err()
		})
		tr := &Transport{Base: base}
		c := &http.Client{Transport: tr, Timeout: time.Second}
		_, err := c.Get("http://h.test/")
		var he *Error
		t.Logf("Client.Timeout: err=%v errors.As=%v os.IsTimeout=%v", err, errors.As(err, &he), os.IsTimeout(err))
		if !os.IsTimeout(err) { // "may replace": net/http's timer and the context's race
			t.Errorf("Client.Timeout: errors.As=%v os.IsTimeout=%v", errors.As(err, &he), os.IsTimeout(err))
		}

		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://h.test/", nil)
		_, err = (&http.Client{Transport: tr}).Do(req)
		he = nil
		t.Logf("ctx deadline: err=%v errors.As=%v os.IsTimeout=%v", err, errors.As(err, &he), os.IsTimeout(err))
		if !errors.As(err, &he) || !os.IsTimeout(err) || he.Reason != StopDeadline || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("ctx deadline: %v", err)
		}
	})
}

// Transport.MaxRetryAfter: "Of several Retry-After headers, the first counts."
func TestFirstOfSeveralRetryAfterCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := newScripted(func(r *http.Request) (*http.Response, error) {
			resp := response(503, "x")
			resp.Header["Retry-After"] = []string{"2", "30"}
			return resp, nil
		}, status(200))
		var waits []time.Duration
		tr := &Transport{Base: base, Policy: Policy{BaseDelay: time.Millisecond, Jitter: JitterNone},
			Random:  func() float64 { return 0 },
			OnRetry: func(e RetryEvent) { waits = append(waits, e.Wait) }}
		start := time.Now()
		req, _ := http.NewRequest("GET", "http://h.test/", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		t.Logf("waits %v elapsed %v", waits, time.Since(start))
		if len(waits) != 1 || waits[0] != 2*time.Second {
			t.Fatalf("waits = %v, want [2s]", waits)
		}
	})
}

// Attempt: "when one Transport is the Base of another, the inner one's
// first attempt reports the outer one's number, and its retries their own."
func TestAttemptNumbersOfNestedTransports(t *testing.T) {
	var seen []int
	leaf := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		seen = append(seen, Attempt(r.Context()))
		return nil, &netErrConnRefused{}
	})
	inner := &Transport{Base: leaf, Policy: Policy{MaxRetries: 1, BaseDelay: -1}}
	outer := &Transport{Base: inner, Policy: Policy{MaxRetries: 2, BaseDelay: -1}}
	req, _ := http.NewRequest("GET", "http://h.test/", nil)
	_, err := outer.RoundTrip(req)
	t.Logf("attempt numbers seen by the leaf: %v; err %v", seen, err)
	want := []int{1, 2, 2, 2, 3, 2}
	if len(seen) != len(want) {
		t.Fatalf("seen %v, want %v", seen, want)
	}
	for i := range want {
		if seen[i] != want[i] {
			t.Fatalf("seen %v, want %v", seen, want)
		}
	}
}

type netErrConnRefused struct{}

func (*netErrConnRefused) Error() string   { return "connection refused" }
func (*netErrConnRefused) Unwrap() error   { return syscall.ECONNREFUSED }
func (*netErrConnRefused) Timeout() bool   { return false }
func (*netErrConnRefused) Temporary() bool { return false }

// README "How do I test code that uses it?": "The zero Transport sends
// through its own pooled transport, not http.DefaultTransport, so mocks
// that replace http.DefaultTransport (httpmock.Activate) do not see its
// requests: set Base to the mock's transport (or to
// http.DefaultTransport after activating it)."
func TestZeroTransportBypassesHTTPMock(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "real") }))
	defer srv.Close()
	httpmock.Activate()
	defer httpmock.DeactivateAndReset()
	httpmock.RegisterResponder("GET", srv.URL+"/", httpmock.NewStringResponder(200, "mock"))

	get := func(tr *Transport) string {
		req, _ := http.NewRequest("GET", srv.URL+"/", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	zero := get(&Transport{})
	viaDefault := get(&Transport{Base: http.DefaultTransport})
	t.Logf("zero Transport got %q; Base: http.DefaultTransport got %q", zero, viaDefault)
	if zero != "real" || viaDefault != "mock" {
		t.Fatalf("zero %q, via default %q", zero, viaDefault)
	}
	(&Transport{}).CloseIdleConnections()
}

// Transport.OnRetry / OnGiveUp: "It runs on the goroutine that called
// RoundTrip".
func TestCallbacksRunOnTheCallersGoroutine(t *testing.T) {
	gid := func() string {
		b := make([]byte, 64)
		b = b[:runtime.Stack(b, false)]
		return string(bytes.Fields(b)[1])
	}
	caller := gid()
	var onRetry, onGiveUp string
	tr := &Transport{Base: newScripted(status(503)), Policy: Policy{MaxRetries: 1, BaseDelay: -1},
		OnRetry:  func(RetryEvent) { onRetry = gid() },
		OnGiveUp: func(RetryEvent) { onGiveUp = gid() }}
	req, _ := http.NewRequest("GET", "http://h.test/", nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if onRetry != caller || onGiveUp != caller {
		t.Fatalf("caller %s, OnRetry %s, OnGiveUp %s", caller, onRetry, onGiveUp)
	}
}

// Rule 6: "the deprecated Request.Cancel reaches Base with each attempt,
// but does not end a wait".
func TestRequestCancelReachesEachAttemptButNotTheWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cancel := make(chan struct{})
		var got []bool
		base := newScripted(func(r *http.Request) (*http.Response, error) {
			//lint:ignore SA1019 the deprecated field's documented handling is what is tested
			got = append(got, r.Cancel == cancel)
			if len(got) == 1 {
				close(cancel) // canceled after the first attempt
				return response(503, ""), nil
			}
			return response(200, ""), nil
		})
		tr := &Transport{Base: base, Policy: Policy{BaseDelay: time.Second, Jitter: JitterNone}}
		req, _ := http.NewRequest("GET", "http://h.test/", nil)
		//lint:ignore SA1019 the deprecated field's documented handling is what is tested
		req.Cancel = cancel
		start := time.Now()
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		t.Logf("Cancel carried: %v; elapsed %v; status %d", got, time.Since(start), resp.StatusCode)
		if len(got) != 2 || !got[0] || !got[1] || time.Since(start) != time.Second {
			t.Fatalf("got %v, elapsed %v", got, time.Since(start))
		}
	})
}

// README "When retries stop", row 2: "the next wait would end past the
// deadline or MaxElapsed, so it is not started | the same, at once, the
// response with its body unread; the deadline has not come, so
// errors.Is(err, context.DeadlineExceeded) is false | StopDeadline,
// StopMaxElapsed".
func TestWaitPastLimitsReturnsAtOnceUnread(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, useDeadline := range []bool{true, false} {
			// a response
			var body *trackedBody
			base := newScripted(func(r *http.Request) (*http.Response, error) {
				resp := response(503, "unread body")
				body = resp.Body.(*trackedBody)
				return resp, nil
			})
			var stops []StopReason
			tr := &Transport{Base: base, Policy: Policy{BaseDelay: 10 * time.Second, Jitter: JitterNone},
				OnGiveUp: func(e RetryEvent) { stops = append(stops, e.Stop) }}
			ctx := context.Background()
			if useDeadline {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
			} else {
				tr.MaxElapsed = 5 * time.Second
			}
			start := time.Now()
			req, _ := http.NewRequestWithContext(ctx, "GET", "http://h.test/", nil)
			resp, err := tr.RoundTrip(req)
			if err != nil || resp.StatusCode != 503 || body.read.Load() != 0 || body.closes.Load() != 0 || time.Since(start) != 0 {
				t.Errorf("deadline=%v: resp %v err %v read %d closes %d after %v", useDeadline, resp, err, body.read.Load(), body.closes.Load(), time.Since(start))
			}
			resp.Body.Close()
			// a transport error
			tr.Base = newScripted(fail(syscall.ECONNRESET))
			req, _ = http.NewRequestWithContext(ctx, "GET", "http://h.test/", nil)
			_, err = tr.RoundTrip(req)
			var he *Error
			if !errors.As(err, &he) || errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, syscall.ECONNRESET) {
				t.Errorf("deadline=%v: err %v", useDeadline, err)
			}
			t.Logf("deadline=%v: stops %v, error %v", useDeadline, stops, err)
			want := StopMaxElapsed
			if useDeadline {
				want = StopDeadline
			}
			if len(stops) != 2 || stops[0] != want || stops[1] != want || he.Reason != want {
				t.Errorf("stops %v reason %v", stops, he.Reason)
			}
		}
	})
}

// Budget.Burst: "negative means none: with the host gate off only lone
// requests retry".
func TestNegativeBurstOnlyLoneRequestsRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		stops := map[string]StopReason{}
		calls := map[string]int{}
		tr := &Transport{Storm: StormControl{NoHostGate: true, Budget: &Budget{Burst: -1}},
			Policy: Policy{MaxRetries: 2, BaseDelay: 10 * time.Second, Jitter: JitterNone},
			Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
				mu.Lock()
				calls[r.Header.Get("Id")]++
				mu.Unlock()
				return response(503, ""), nil
			}),
			OnGiveUp: func(e RetryEvent) { mu.Lock(); stops[e.Request.Header.Get("Id")] = e.Stop; mu.Unlock() }}
		do := func(id string) {
			req, _ := http.NewRequest("GET", "http://h.test/", nil)
			req.Header.Set("Id", id)
			resp, err := tr.RoundTrip(req)
			if err == nil {
				resp.Body.Close()
			}
		}
		do("alone")
		var wg sync.WaitGroup
		wg.Go(func() { do("A") })
		time.Sleep(time.Second) // virtual: A is retrying when B comes
		wg.Go(func() { do("B") })
		wg.Wait()
		t.Logf("attempts %v stops %v", calls, stops)
		if calls["alone"] != 3 || stops["alone"] != StopExhausted || stops["B"] != StopBudget || calls["B"] != 1 {
			t.Errorf("attempts %v stops %v", calls, stops)
		}
	})
}

// README Common questions: "the body is then yours to read, and a reset or
// a cut while you read it comes to you as a read error, never retried".
func TestBodyBrokenAfterTheHeadersIsNotRetried(t *testing.T) {
	n := 0
	tr := &Transport{Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		n++
		resp := response(200, "")
		resp.Body = io.NopCloser(io.MultiReader(strings.NewReader("partial"), failingReader{syscall.ECONNRESET}))
		return resp, nil
	})}
	resp, err := tr.RoundTrip(httptest.NewRequest("GET", "http://h/", nil))
	if err != nil {
		t.Fatal(err)
	}
	b, rerr := io.ReadAll(resp.Body)
	resp.Body.Close()
	if n != 1 || string(b) != "partial" || !errors.Is(rerr, syscall.ECONNRESET) {
		t.Errorf("%d attempts, read %q, %v; want one attempt, its bytes, then the reset", n, b, rerr)
	}
}
