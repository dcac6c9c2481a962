package httpretry

import (
	"net/http"
	"slices"
	"testing"
	"time"
)

// slowAnswersBurst sends 100 requests 50 µs apart through one Transport
// to a host down for 1 s, whose 503s take 1 ms and whose answers take
// slow, and returns the median call's time.
func slowAnswersBurst(t *testing.T, c StormControl, slow time.Duration, seed uint64) time.Duration {
	ends, _ := callsThrough(t, c, 100, 50*time.Microsecond, seed, func(int) string { return "http://h/" },
		func(start time.Time) roundTripFunc {
			return func(*http.Request) (*http.Response, error) {
				time.Sleep(time.Millisecond) // virtual
				if time.Since(start) < time.Second {
					return response(503, "down"), nil
				}
				time.Sleep(slow)
				return response(200, "ok"), nil
			}
		})
	slices.Sort(ends)
	return ends[len(ends)/2]
}

// TestBurstAgainstSlowAnswersLearnsWhenTheHostCameBack: a burst of 100
// through one Transport, a 1 s outage of fast 503s, then answers that take
// 400 or 800 ms. Held requests skipped their steps while the answers were
// on their way, and a step went in grace only when an answer came within
// a failed attempt's time (1 ms) of it: median calls 1.09-1.27x of plain
// backoff's, 1.19x on average over seeds 1-4. An answer now tells when
// the host was answering from, the attempt's send, and puts in grace
// every step skipped since (see host.inGrace): 1.01-1.20x, 1.11x on
// average. The bound is on the average.
func TestBurstAgainstSlowAnswersLearnsWhenTheHostCameBack(t *testing.T) {
	t.Parallel() // virtual time only: runs beside the other simulations
	var sum float64
	var runs int
	for _, slow := range []time.Duration{400 * time.Millisecond, 800 * time.Millisecond} {
		for seed := uint64(1); seed <= 4; seed++ {
			on, off := slowAnswersBurst(t, StormControl{}, slow, seed), slowAnswersBurst(t, stormOff, slow, seed)
			t.Logf("answers in %v, seed %d: median call %v, plain backoff's %v", slow, seed, on, off)
			sum, runs = sum+on.Seconds()/off.Seconds(), runs+1
		}
	}
	if mean := sum / float64(runs); mean > 1.15 {
		t.Errorf("median calls %.3fx of plain backoff's on average, want at most 1.15x", mean)
	}
}
