package httpretry

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// staggeredCalls runs n goroutines, one call each, started gap apart,
// through one Transport with storm control c and the default Policy,
// against a host that answers 503 until down and 200 after, each
// request with a random stream of its own (PCG(seed, i)); it returns when
// each call ended and whether it got its 200.
func staggeredCalls(t *testing.T, c StormControl, n int, gap, down time.Duration, seed uint64) (ends []time.Duration, ok int) {
	return callsThrough(t, c, n, gap, seed, func(i int) string { return "http://h/" + strconv.Itoa(i) },
		func(start time.Time) roundTripFunc {
			return func(r *http.Request) (*http.Response, error) {
				time.Sleep(2 * time.Millisecond) // virtual: synctest's clock
				if time.Since(start) < down {
					return response(503, "down"), nil
				}
				return response(200, "ok"), nil
			}
		})
}

// callsThrough runs, in a synctest bubble, n goroutines, one call each to
// url(i), started gap apart, through one Transport with storm control c,
// the default Policy and the Base that base returns for the bubble's
// start, each request with a random stream of its own (PCG(seed, i)); it
// returns when each call ended, counted from its own start, and how many
// got a 200.
func callsThrough(t *testing.T, c StormControl, n int, gap time.Duration, seed uint64, url func(int) string, base func(start time.Time) roundTripFunc) (ends []time.Duration, ok int) {
	ends = make([]time.Duration, n)
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		streams := newRequestStreams(seed)
		tr := &Transport{Storm: c, Random: streams.random, Base: base(t0)}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				streams.join(uint64(i))
				time.Sleep(time.Duration(i) * gap) // virtual
				resp, err := tr.RoundTrip(httptest.NewRequest("GET", url(i), nil))
				mu.Lock()
				defer mu.Unlock()
				ends[i] = time.Since(t0) - time.Duration(i)*gap
				if err == nil {
					ok += btoi(resp.StatusCode == 200)
					resp.Body.Close()
				}
			})
		}
		wg.Wait()
	})
	return ends, ok
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestStaggeredCallsLearnTheHostIsBack: a newcomer's program, 8 goroutines
// started 200 ms apart, one call each, the host down for 1.5 s. Every call
// was held, and the last fresh request came at 1.4 s; the line took fresh
// requests for flowing until 7 of their gaps had passed without one, and
// sent no retry from 0.98 s to 2.8 s: the calls ended 1.85 s after they
// began on average, against 1.36 s with plain backoff (100 drawn runs).
// Fresh requests as regular as these count as stopped once a beat is
// missed (see flowEnd): 0.99 s over these five runs, 1.01 s over 100.
func TestStaggeredCallsLearnTheHostIsBack(t *testing.T) {
	t.Parallel() // virtual time only
	var sumOn, sumOff time.Duration
	for seed := uint64(1); seed <= 5; seed++ {
		on, okOn := staggeredCalls(t, StormControl{}, 8, 200*time.Millisecond, 1500*time.Millisecond, seed)
		off, okOff := staggeredCalls(t, stormOff, 8, 200*time.Millisecond, 1500*time.Millisecond, seed)
		if okOn < okOff {
			t.Errorf("seed %d: %d calls succeeded with storm control, %d without", seed, okOn, okOff)
		}
		for i := range on {
			sumOn, sumOff = sumOn+on[i], sumOff+off[i]
		}
	}
	t.Logf("calls took %v on average with storm control, %v without", sumOn/40, sumOff/40)
	if sumOn > sumOff {
		t.Errorf("calls took %v on average with storm control, %v without", sumOn/40, sumOff/40)
	}
}
