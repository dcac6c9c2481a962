package httpretry

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

// TestHeldStepGoesWhenTheAttemptsDrainMayReachTheLimit: L's first attempt
// fails with a reset, which drains nothing, and each later one with a 503
// whose body drains in 33 ms; it waits exactly 3 s between attempts and
// its limit is 6.05 s away. Plain backoff retries at 3.015 s, drains the
// 503 by 3.063 s, finds its next wait past the limit and returns the 503.
// Held among others failing, with fresh requests coming (so no probe of
// the line's goes), L took its step at 3.015 s for one with a step after
// it, as its own drains were none, skipped it, and ended at the limit, 3 s
// later, once with a third attempt (a review's find, of a simpler model
// first; main's line had sent L as a probe when fresh requests stopped).
func TestHeldStepGoesWhenTheAttemptsDrainMayReachTheLimit(t *testing.T) {
	for _, deadline := range []bool{false, true} {
		on, onSends := heldBesideADrain(t, StormControl{}, deadline)
		off, offSends := heldBesideADrain(t, stormOff, deadline)
		if on > off+5*time.Millisecond || len(onSends) > len(offSends) {
			t.Errorf("deadline %v: storm control on: L ended at %v after sends at %v; off at %v after %v", deadline, on, onSends, off, offSends)
		}
	}
}

// heldBesideADrain runs L, as above, beside two requests failing every
// 100 ms and fresh ones every 50 ms, and returns when L ended and when its
// attempts went, from the start.
func heldBesideADrain(t *testing.T, storm StormControl, deadline bool) (end time.Duration, sends []time.Duration) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var mu sync.Mutex
		tr := &Transport{
			Policy: Policy{MaxRetries: 5, BaseDelay: 3 * time.Second, MaxDelay: 3 * time.Second, Jitter: JitterNone},
			Storm:  storm,
			Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
				mu.Lock()
				isL, first := r.Header.Get("X-L") != "", len(sends) == 0
				if isL {
					sends = append(sends, time.Since(start))
				}
				mu.Unlock()
				time.Sleep(15 * time.Millisecond) // virtual
				if !isL || first {
					return nil, syscall.ECONNRESET
				}
				return &http.Response{StatusCode: 503, Header: http.Header{}, Request: r,
					Body: &lateBody{after: 33 * time.Millisecond, closed: make(chan struct{})}}, nil
			}),
		}
		if !deadline {
			tr.MaxElapsed = 6050 * time.Millisecond
		}
		send := func(p Policy) {
			resp, err := tr.RoundTrip(httptest.NewRequest("GET", "http://h/", nil).WithContext(WithPolicy(context.Background(), p)))
			if err == nil {
				resp.Body.Close()
			}
		}
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() {
				send(Policy{MaxRetries: 80, BaseDelay: 100 * time.Millisecond, MaxDelay: 100 * time.Millisecond, Jitter: JitterNone})
			})
		}
		wg.Go(func() {
			for range 160 {
				wg.Go(func() {
					send(Policy{MaxRetries: 1, BaseDelay: 10 * time.Millisecond, MaxDelay: 10 * time.Millisecond, Jitter: JitterNone})
				})
				time.Sleep(50 * time.Millisecond) // virtual
			}
		})
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
			if deadline {
				ctx, cancel = context.WithTimeout(context.Background(), 6050*time.Millisecond)
			}
			defer cancel()
			req := httptest.NewRequest("GET", "http://h/", nil).WithContext(ctx)
			req.Header.Set("X-L", "1")
			resp, err := tr.RoundTrip(req)
			end = time.Since(start)
			if err == nil {
				resp.Body.Close()
			}
		})
		wg.Wait()
	})
	return end, sends
}
