package httpretry

import (
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// shortSteps is the Policy of a newcomer's hunt: many short steps.
var shortSteps = Policy{MaxRetries: 20, BaseDelay: 50 * time.Millisecond, MaxDelay: 200 * time.Millisecond}

// calledAtRandom sends n one-shot calls through one Transport, each at a
// random moment of a 1.5 s outage of fast 503s, and returns how long
// each call that was answered took, sorted.
func calledAtRandom(t *testing.T, c StormControl, n int, seed uint64) (calls []time.Duration) {
	const outage = 1500 * time.Millisecond
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		streams := newRequestStreams(seed)
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if time.Since(t0) < outage {
				return response(503, "down"), nil
			}
			return response(200, "ok"), nil
		})
		tr := &Transport{Storm: c, Policy: shortSteps, Random: streams.random, Base: base}
		starts := rand.New(rand.NewPCG(seed, 5))
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i := range n {
			at := time.Duration(starts.Int64N(int64(outage)))
			wg.Go(func() {
				streams.join(uint64(i))
				time.Sleep(at) // virtual
				begun := time.Now()
				resp, err := tr.RoundTrip(httptest.NewRequest("GET", "http://h/", nil))
				if err == nil && resp.StatusCode == 200 {
					resp.Body.Close()
					mu.Lock()
					calls = append(calls, time.Since(begun))
					mu.Unlock()
				}
			})
		}
		wg.Wait()
	})
	slices.Sort(calls)
	return calls
}

// TestCallsAtRandomMomentsOfAnOutageLearnTheHostIsBackLate: a newcomer's
// hunt (2026-12-08). Ten one-shot calls at random moments of a 1.5 s
// outage, 50-200 ms steps: held, they wait for fresh requests to count as
// stopped, which random arrivals, far from a ticker's, make take up to
// flowGaps of their gaps, and they learned the host was back 0.05-0.54 s
// after it was (plain backoff 0.06-0.11 s; loopback, six seeds): every
// call rescued both ways, the median call up to 1.5x of plain backoff's.
// A measured cost, listed in the README; the test holds it there: all
// rescued, and the median of the medians within 1.5x.
func TestCallsAtRandomMomentsOfAnOutageLearnTheHostIsBackLate(t *testing.T) {
	t.Parallel() // virtual time only
	var on, off []time.Duration
	for seed := uint64(1); seed <= 6; seed++ {
		a, b := calledAtRandom(t, StormControl{}, 10, seed), calledAtRandom(t, stormOff, 10, seed)
		if len(a) != len(b) {
			t.Errorf("seed %d: %d calls rescued, plain backoff %d", seed, len(a), len(b))
			continue
		}
		on, off = append(on, a[len(a)/2]), append(off, b[len(b)/2])
	}
	slices.Sort(on)
	slices.Sort(off)
	t.Logf("median calls %v, plain backoff %v", on, off)
	if mid := len(on) / 2; len(on) > 0 && on[mid] > off[mid]*3/2 {
		t.Errorf("median of the median calls %v, plain backoff %v: over 1.5x", on[mid], off[mid])
	}
}
