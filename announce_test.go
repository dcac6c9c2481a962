package httpretry

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// countingParent is a caller's context of its own kind that counts the
// contexts derived from it that registered with it (context.WithCancelCause
// calls AfterFunc on a parent that has one) and those that let go of it
// (when they are canceled).
type countingParent struct {
	context.Context
	done                 chan struct{} // never closed: not the embedded one's, so that derived contexts register
	registered, released atomic.Int32
}

func (p *countingParent) Done() <-chan struct{} { return p.done }

func (p *countingParent) AfterFunc(f func()) func() bool {
	p.registered.Add(1)
	stop := context.AfterFunc(p.Context, f)
	return func() bool { p.released.Add(1); return stop() }
}

// TestPanickingOnRetryReleasesTheRetrysContext: with an AttemptTimeout,
// a retry's context is built before OnRetry runs and, since the timeout
// starts as the attempt goes, only the attempt's end cancels it. When
// OnRetry panicked, nothing did: the context stayed registered with the
// caller's, and a goroutine watched a caller's context of its own kind,
// until the caller's ended (a review's find).
func TestPanickingOnRetryReleasesTheRetrysContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &countingParent{Context: context.Background(), done: make(chan struct{})}
		tr := &Transport{AttemptTimeout: 50 * time.Millisecond, Random: half,
			Policy:  Policy{MaxRetries: 3, BaseDelay: 10 * time.Millisecond},
			OnRetry: func(RetryEvent) { panic("log sink down") },
			Base:    roundTripFunc(func(*http.Request) (*http.Response, error) { return response(503, ""), nil })}
		func() {
			defer func() { _ = recover() }()
			resp, err := tr.RoundTrip(httptest.NewRequestWithContext(p, "GET", "http://h/", nil))
			if err == nil {
				resp.Body.Close()
			}
			t.Error("OnRetry's panic did not reach the caller")
		}()
		if p.registered.Load() == 0 || p.registered.Load() != p.released.Load() {
			t.Errorf("attempt contexts registered with the caller's %d, released %d", p.registered.Load(), p.released.Load())
		}
	})
}

// closeRecorder is a response body that records whether it was closed.
type closeRecorder struct {
	io.Reader
	closed atomic.Bool
}

func (c *closeRecorder) Close() error { c.closed.Store(true); return nil }

// TestPanickingCallbackClosesTheResponseItHeld: a Classifier, OnGiveUp or
// Random that panics while the request holds a response nobody else will
// get left its body, and its connection, open (reviews' finds). The
// caller recovers the callback's own panic: a Random that panicked once
// reached it as a slice bounds error of the library's (a newcomer
// trial's find).
func TestPanickingCallbackClosesTheResponseItHeld(t *testing.T) {
	for _, tc := range []struct {
		name, panics string // the callback's panic value
		set          func(*Transport)
	}{
		{"Classifier", "classifier bug", func(tr *Transport) {
			tr.Classifier = func(*http.Request, *http.Response, error) (bool, string) { panic("classifier bug") }
		}},
		{"OnGiveUp", "log sink down", func(tr *Transport) { tr.OnGiveUp = func(RetryEvent) { panic("log sink down") } }},
		{"Random", "random source bug", func(tr *Transport) { // drawn for the backoff of a retry
			tr.Policy.MaxRetries = 1
			tr.Random = func() float64 { panic("random source bug") }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var recovered any
			body := &closeRecorder{Reader: strings.NewReader("busy")}
			tr := &Transport{Policy: Policy{MaxRetries: NoRetries},
				Base: roundTripFunc(func(*http.Request) (*http.Response, error) {
					resp := response(503, "")
					resp.Body = body
					return resp, nil
				})}
			tc.set(tr)
			func() {
				defer func() { recovered = recover() }()
				resp, err := tr.RoundTrip(httptest.NewRequest("GET", "http://h/", nil))
				if err == nil {
					resp.Body.Close()
				}
			}()
			if recovered != tc.panics {
				t.Errorf("the caller recovered %v, not the callback's panic", recovered)
			}
			if !body.closed.Load() {
				t.Error("the response the callback held was left open")
			}
		})
	}
}

// TestPanickingOnRetryClosesTheRetrysBody: a retry's body comes from
// GetBody before OnRetry runs; when OnRetry panicked, the body was never
// sent nor closed, and a GetBody that opens a file leaked it (a review's
// find).
func TestPanickingOnRetryClosesTheRetrysBody(t *testing.T) {
	var bodies []*closeRecorder
	req, _ := http.NewRequest("PUT", "http://h/", strings.NewReader("data"))
	req.GetBody = func() (io.ReadCloser, error) {
		b := &closeRecorder{Reader: strings.NewReader("data")}
		bodies = append(bodies, b)
		return b, nil
	}
	tr := &Transport{Policy: Policy{MaxRetries: 3, BaseDelay: -1},
		OnRetry: func(RetryEvent) { panic("log sink down") },
		Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			r.Body.Close()
			return response(503, ""), nil
		})}
	func() {
		defer func() { _ = recover() }()
		if resp, err := tr.RoundTrip(req); err == nil {
			resp.Body.Close()
		}
		t.Error("OnRetry's panic did not reach the caller")
	}()
	if len(bodies) != 1 {
		t.Fatalf("GetBody called %d times, want 1: the retry's body comes before OnRetry", len(bodies))
	}
	if !bodies[0].closed.Load() {
		t.Error("the retry's body was left open")
	}
}

// TestPanickingOnGiveUpClosesADrainedBodyOnce: a 503 is drained and
// closed for its retry; the caller cancels during the wait, and OnGiveUp,
// shown that response (its body already closed, RetryEvent says), panics.
// The body was closed a second time on the way out, which io.Closer leaves
// undefined (a review's find).
func TestPanickingOnGiveUpClosesADrainedBodyOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var body *trackedBody
		tr := &Transport{Policy: Policy{BaseDelay: time.Second, Jitter: JitterNone},
			OnGiveUp: func(RetryEvent) { panic("log sink down") },
			Base: roundTripFunc(func(*http.Request) (*http.Response, error) {
				resp := response(503, "busy")
				body = resp.Body.(*trackedBody)
				return resp, nil
			})}
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(500*time.Millisecond, cancel)
		func() {
			defer func() { _ = recover() }()
			tr.RoundTrip(httptest.NewRequest("GET", "http://h/", nil).WithContext(ctx))
		}()
		if n := body.closes.Load(); n != 1 {
			t.Errorf("the drained 503's body was closed %d times", n)
		}
	})
}

// TestNoBodyResponseStaysNoBodyWithAnAttemptTimeout: with an
// AttemptTimeout, a response's body is wrapped to keep the attempt's
// context alive until it is closed; an http.NoBody came back wrapped, no
// longer equal to http.NoBody, for nothing to read (a review's find).
func TestNoBodyResponseStaysNoBodyWithAnAttemptTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &countingParent{Context: context.Background(), done: make(chan struct{})}
		tr := &Transport{AttemptTimeout: time.Hour, Base: roundTripFunc(func(*http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: 204, Header: http.Header{}, Body: http.NoBody}, nil
		})}
		resp, err := tr.RoundTrip(httptest.NewRequestWithContext(p, "GET", "http://h/", nil))
		if err != nil {
			t.Fatal(err)
		}
		if resp.Body != http.NoBody || p.registered.Load() != p.released.Load() {
			t.Errorf("body %T (want http.NoBody), attempt contexts registered %d, released %d", resp.Body, p.registered.Load(), p.released.Load())
		}
	})
}

// TestOnRetryThatBlocksPastTheDeadlineEndsTheRequestThen: the request
// waits for its OnRetry, which the library cannot cut short; when the
// deadline passes meanwhile, the retry goes with the ended context, which
// a Base such as net/http's fails at once, and the request ends then with
// the outcome before it and StopDeadline (a newcomer trial's case, now in
// the OnRetry doc).
func TestOnRetryThatBlocksPastTheDeadlineEndsTheRequestThen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		answered, stop := 0, StopNone
		tr := &Transport{Random: half, Policy: Policy{MaxRetries: 3, BaseDelay: 10 * time.Millisecond},
			OnRetry:  func(RetryEvent) { time.Sleep(500 * time.Millisecond) },
			OnGiveUp: func(e RetryEvent) { stop = e.Stop },
			Base: roundTripFunc(func(req *http.Request) (*http.Response, error) {
				if err := req.Context().Err(); err != nil { // as net/http's Transport does
					return nil, err
				}
				answered++
				return response(503, "busy"), nil
			})}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		resp, err := tr.RoundTrip(httptest.NewRequestWithContext(ctx, "GET", "http://h/", nil))
		if err != nil {
			t.Fatalf("got %v, want the first attempt's 503", err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if took := time.Since(start); resp.StatusCode != 503 || string(b) != "busy" || answered != 1 || stop != StopDeadline || took != 505*time.Millisecond {
			t.Errorf("got %d %q, %d answered, after %v, stop %v; want 503 \"busy\", 1 answered, once OnRetry returned (505 ms), StopDeadline", resp.StatusCode, b, answered, took, stop)
		}
	})
}
