package httpretry

import (
	"net/http"
	"sync"
	"testing"
	"time"
)

// toldBurst sends n requests 50 µs apart through one Transport to a host
// that answers 503 with Retry-After: 1 until down has passed, each
// attempt taking 1-4 ms, and returns their mean time to finish, counted
// from the first's start, how many succeeded, and the attempts sent.
func toldBurst(t *testing.T, c StormControl, n int, down time.Duration, seed uint64) (mean time.Duration, ok, attempts int) {
	const gap = 50 * time.Microsecond
	var mu sync.Mutex
	ends, ok := callsThrough(t, c, n, gap, seed, func(int) string { return "http://h/" },
		func(start time.Time) roundTripFunc {
			return func(r *http.Request) (*http.Response, error) {
				mu.Lock()
				attempts++
				mu.Unlock()
				time.Sleep(time.Millisecond + time.Since(start)%(3*time.Millisecond)) // virtual
				if time.Since(start) < down {
					resp := response(503, "down")
					resp.Header.Set("Retry-After", "1")
					return resp, nil
				}
				return response(200, "ok"), nil
			}
		})
	var total time.Duration
	for i, end := range ends {
		total += end + time.Duration(i)*gap
	}
	return total / time.Duration(n), ok, attempts
}

// TestBurstToldRetryAfterEndsAsSoonAsPlainBackoff: 100 requests through
// one Transport, every failure told Retry-After: 1 through an outage of 2
// or 3 s. A held step at the moment its Retry-After named skipped when the
// line's probes, 0.1-0.8 s apart and each told a later moment, had failed
// since its own news, and the requests waited for the next probe: 2.53 s
// and 4.08-4.12 s on average against plain backoff's 2.11 s and 3.17 s
// (seeds 1-3). A Retry-After is news until the moment it named (see
// member.newsUntil): 2.04-2.06 s and 3.05-3.09 s, every request answered,
// with 70% and half of plain backoff's attempts.
func TestBurstToldRetryAfterEndsAsSoonAsPlainBackoff(t *testing.T) {
	for _, down := range []time.Duration{2 * time.Second, 3 * time.Second} {
		for seed := uint64(1); seed <= 3; seed++ {
			on, okOn, sentOn := toldBurst(t, StormControl{}, 100, down, seed)
			off, okOff, sentOff := toldBurst(t, stormOff, 100, down, seed)
			if float64(on) > 1.02*float64(off) || okOn < okOff || sentOn > sentOff {
				t.Errorf("outage %v, seed %d: mean %v, %d answered, %d attempts; plain backoff %v, %d, %d",
					down, seed, on, okOn, sentOn, off, okOff, sentOff)
			}
		}
	}
}
