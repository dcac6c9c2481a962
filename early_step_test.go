package httpretry

import (
	"net/http"
	"testing"
	"time"
)

// TestHeldLastRetryGoesNoEarlierThanPlainBackoffsWithSlowErrorBodies: every
// 503 body takes 70 ms to arrive, and the host is back at 2.7 s. Plain
// backoff drains each body before its wait; a held request's skipped steps
// counted the attempt's time but not its drain, so its steps ran ahead of
// plain backoff's and its last one went while the host was still down, where
// plain backoff's, later, found it back (77 of 79 lost rescues in 5,000
// drawn bursts of a review had slow bodies).
func TestHeldLastRetryGoesNoEarlierThanPlainBackoffsWithSlowErrorBodies(t *testing.T) {
	upAt := 2700 * time.Millisecond
	s := lAmong{
		policy: Policy{MaxRetries: 5, BaseDelay: 100 * time.Millisecond, MaxDelay: time.Second},
		lStart: time.Second, loopers: 8,
		lReq: lWithPolicy(Policy{MaxRetries: 8, BaseDelay: 50 * time.Millisecond, MaxDelay: 200 * time.Millisecond, Jitter: JitterNone}, 0),
		answer: func(_ bool, _ int, at time.Duration) (*http.Response, error) {
			time.Sleep(10 * time.Millisecond) // virtual: synctest's clock
			if at >= upAt {
				return response(200, ""), nil
			}
			return &http.Response{StatusCode: 503, Header: http.Header{}, ContentLength: -1,
				Body: &lateBody{after: 70 * time.Millisecond, closed: make(chan struct{})}}, nil
		},
	}
	on, off := s.run(t, StormControl{}), s.run(t, stormOff)
	if off.code != 200 {
		t.Fatalf("plain backoff failed (%d, sends %v): the scenario must let it succeed", off.code, off.sends)
	}
	if on.code != 200 {
		t.Errorf("held L failed (%d, sends %v) where plain backoff succeeded (sends %v)", on.code, on.sends, off.sends)
	}
}
