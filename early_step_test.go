package httpretry

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
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
	s := amongSlowBodies(2700*time.Millisecond, nil)
	on, off := s.run(t, StormControl{}), s.run(t, stormOff)
	if off.code != 200 {
		t.Fatalf("plain backoff failed (%d, sends %v): the scenario must let it succeed", off.code, off.sends)
	}
	if on.code != 200 {
		t.Errorf("held L failed (%d, sends %v) where plain backoff succeeded (sends %v)", on.code, on.sends, off.sends)
	}
}

// TestHeldStepToldARetryAfterKeepsPlainBackoffsTimeline: 20 requests start
// 50 ms apart into an outage whose every 503 says Retry-After: 2, and the
// host is back at 6.5 s. A retry the line let go between steps, told a
// Retry-After that outlasts its next step, counted as that step sent early,
// though it followed the step skipped before it closely: every later step
// came up to a whole wait early, and the last went before the host's
// return, where plain backoff's found it back (931 of 3,000 requests
// succeeded in a review, against plain backoff's 1,060).
func TestHeldStepToldARetryAfterKeepsPlainBackoffsTimeline(t *testing.T) {
	const n = 20
	upAt := 6500 * time.Millisecond
	run := func(c StormControl) (codes [n]int, sends [n][]time.Duration) {
		synctest.Test(t, func(t *testing.T) {
			t0 := time.Now()
			var mu sync.Mutex
			tr := &Transport{Storm: c, Random: goroutineRandom(1),
				Policy: Policy{MaxRetries: 3, BaseDelay: 16 * time.Millisecond, MaxDelay: 2 * time.Second, Jitter: JitterNone},
				Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
					at := time.Since(t0)
					i, _ := strconv.Atoi(r.Header.Get("X-I"))
					mu.Lock()
					sends[i] = append(sends[i], at)
					mu.Unlock()
					time.Sleep(10 * time.Millisecond) // virtual: synctest's clock
					if at >= upAt {
						return response(200, ""), nil
					}
					resp := response(503, "")
					resp.Header.Set("Retry-After", "2")
					return resp, nil
				})}
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					time.Sleep(time.Duration(i) * 50 * time.Millisecond) // virtual: synctest's clock
					req := httptest.NewRequest("GET", "http://h/", nil)
					req.Header.Set("X-I", strconv.Itoa(i))
					if resp, err := tr.RoundTrip(req); err == nil {
						codes[i] = resp.StatusCode
						resp.Body.Close()
					}
				})
			}
			wg.Wait()
		})
		return codes, sends
	}
	onCodes, onSends := run(StormControl{})
	offCodes, offSends := run(stormOff)
	rescued := 0
	for i := range n {
		if offCodes[i] == 200 {
			rescued++
		}
		if offCodes[i] == 200 && onCodes[i] != 200 {
			t.Errorf("request %d: held, %d after attempts at %v; plain backoff 200 after %v", i, onCodes[i], onSends[i], offSends[i])
		}
	}
	if rescued == 0 {
		t.Fatalf("plain backoff rescued none: the scenario must let it succeed")
	}
}

// TestHeldRequestWhoseFailuresHadNoBodyDrainsAsTheOthers: L's attempts
// before 1.7 s are reset, and every 503 after, L's and the others', takes
// 70 ms to drain; L is held from then on and never drains a body of its
// own. Its skipped steps counted no drain, as its own drains had none to
// average, so its last step went before plain backoff's, which drains
// each 503 (a review's drawn bursts of resets then slow bodies: 137 of
// 1,327 rescues lost; 64 now that a request without a drain of its own
// counts the others').
func TestHeldRequestWhoseFailuresHadNoBodyDrainsAsTheOthers(t *testing.T) {
	t.Parallel() // virtual time only: runs beside the other simulations
	rescued, lost := 0, 0
	for upAt := 1800 * time.Millisecond; upAt <= 3600*time.Millisecond; upAt += 25 * time.Millisecond {
		s := amongSlowBodies(upAt, func(at time.Duration) error {
			if at < 1700*time.Millisecond {
				return syscall.ECONNRESET
			}
			return nil
		})
		on, off := s.run(t, StormControl{}), s.run(t, stormOff)
		if off.code == 200 {
			rescued++
			if on.code != 200 {
				lost++
				t.Logf("host back at %v: held L failed (%d, sends %v); plain backoff succeeded (sends %v)", upAt, on.code, on.sends, off.sends)
			}
		}
	}
	if rescued == 0 || lost > 0 {
		t.Errorf("held L lost %d of the %d rescues of plain backoff", lost, rescued)
	}
}

// amongSlowBodies is L among 8 requests calling the host in a loop, L's
// waits 50, 100, 200 ms and on, every attempt 10 ms, the host back at
// upAt and every 503's body 70 ms to arrive; L's attempt fails with
// lErr's error instead when it returns one.
func amongSlowBodies(upAt time.Duration, lErr func(at time.Duration) error) lAmong {
	return lAmong{
		policy: Policy{MaxRetries: 5, BaseDelay: 100 * time.Millisecond, MaxDelay: time.Second},
		lStart: time.Second, loopers: 8,
		lReq: lWithPolicy(Policy{MaxRetries: 8, BaseDelay: 50 * time.Millisecond, MaxDelay: 200 * time.Millisecond, Jitter: JitterNone}, 0),
		answer: func(isL bool, _ int, at time.Duration) (*http.Response, error) {
			time.Sleep(10 * time.Millisecond) // virtual: synctest's clock
			if at >= upAt {
				return response(200, ""), nil
			}
			if isL && lErr != nil {
				if err := lErr(at); err != nil {
					return nil, err
				}
			}
			return &http.Response{StatusCode: 503, Header: http.Header{}, ContentLength: -1,
				Body: &lateBody{after: 70 * time.Millisecond, closed: make(chan struct{})}}, nil
		},
	}
}
