package httpretry

import (
	"fmt"
	"hash/fnv"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestRateLimitersRetryAfterHoldsNoOne: a host that answers, but refuses
// about half of all attempts with 429 or 503 and a Retry-After, as a rate
// limiter does, is not in an outage: its refusals do not hold retries in
// line. A new request every 50 ms for 10 s; which attempts are refused
// depends on the request and the attempt's number only, so the same
// attempts fail on and off. A Retry-After once held every retry told one
// while another request was retrying, and the line, its share halved by
// every refusal, let them go only at the end of their lives: with
// Retry-After: 0, 174 of 200 succeeded (off 198) and calls that took
// 110 ms took 3.1 s; with Retry-After: 1, 185. A retry is held for its
// Retry-After now only when the host told it while answering none of its
// last 16 attempts.
func TestRateLimitersRetryAfterHoldsNoOne(t *testing.T) {
	for _, retryAfter := range []string{"0", "1"} {
		for _, code := range []int{429, 503} {
			t.Run(fmt.Sprintf("%d Retry-After %s", code, retryAfter), func(t *testing.T) {
				on := rateLimited(t, StormControl{}, code, retryAfter)
				off := rateLimited(t, stormOff, code, retryAfter)
				if on.ok < off.ok || on.attempts > off.attempts {
					t.Errorf("on: %d of 200 succeeded after %d attempts; off: %d after %d", on.ok, on.attempts, off.ok, off.attempts)
				}
				if on.p90 > off.p90*5/4 {
					t.Errorf("90th percentile of the calls' times: on %v, off %v", on.p90, off.p90)
				}
			})
		}
	}
}

// rateLimitedResult is what 200 calls to a rate-limited host came to.
type rateLimitedResult struct {
	ok, attempts int
	p90          time.Duration
}

// rateLimited sends a GET every 50 ms for 10 s through one Transport to a
// host that refuses about half of all attempts with code and retryAfter.
func rateLimited(t *testing.T, storm StormControl, code int, retryAfter string) (res rateLimitedResult) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			mu.Lock()
			res.attempts++
			mu.Unlock()
			time.Sleep(5 * time.Millisecond) // virtual: synctest's clock
			if refused(r.Header.Get("X-Id"), Attempt(r.Context())) {
				resp := response(code, "slow down")
				resp.Header.Set("Retry-After", retryAfter)
				return resp, nil
			}
			return response(200, "ok"), nil
		})
		tr := &Transport{Base: base, Storm: storm, Random: func() float64 { return 0.5 }}
		var took []time.Duration
		var wg sync.WaitGroup
		for i := range 200 {
			wg.Go(func() {
				time.Sleep(time.Duration(i) * 50 * time.Millisecond) // virtual
				req := httptest.NewRequest("GET", "http://api/", nil)
				req.Header.Set("X-Id", strconv.Itoa(i))
				start := time.Now()
				resp, err := tr.RoundTrip(req)
				mu.Lock()
				defer mu.Unlock()
				took = append(took, time.Since(start))
				if err == nil {
					if resp.StatusCode == 200 {
						res.ok++
					}
					resp.Body.Close()
				}
			})
		}
		wg.Wait()
		slices.Sort(took)
		res.p90 = took[len(took)*9/10]
	})
	return res
}

// refused reports whether the rate limiter refuses attempt n of request
// id: about half of them, whatever the time.
func refused(id string, n int) bool {
	h := fnv.New32a()
	fmt.Fprintf(h, "%s/%d", id, n)
	return h.Sum32()%2 == 0
}
