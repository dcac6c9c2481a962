package httpretry

import (
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
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

// slowFailuresBurst sends 100 requests 50 µs apart through one Transport
// with p to a host down for 1 s, whose 503s take from 1 ms to 2 s, drawn
// for each attempt, and whose answers take 1 ms, and returns when each
// request ended, from its start, and whether it was answered.
func slowFailuresBurst(t *testing.T, c StormControl, p Policy, seed uint64) (ends []time.Duration, ok []bool) {
	const n, gap = 100, 50 * time.Microsecond
	ends, ok = make([]time.Duration, n), make([]bool, n)
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		streams := newRequestStreams(seed)
		tr := &Transport{Policy: p, Storm: c, Random: streams.random, Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			i, _ := strconv.Atoi(r.URL.Query().Get("i"))
			if time.Since(t0) < time.Second {
				rng := rand.New(rand.NewPCG(seed, uint64(i)<<8|uint64(Attempt(r.Context()))))
				time.Sleep(time.Millisecond + time.Duration(rng.Float64()*float64(2*time.Second))) // virtual
				return response(503, "down"), nil
			}
			time.Sleep(time.Millisecond) // virtual
			return response(200, "ok"), nil
		})}
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				streams.join(uint64(i))
				time.Sleep(time.Duration(i) * gap) // virtual
				resp, err := tr.RoundTrip(httptest.NewRequest("GET", "http://h/?i="+strconv.Itoa(i), nil))
				ends[i] = time.Since(t0) - time.Duration(i)*gap
				if err == nil {
					ok[i] = resp.StatusCode == 200
					resp.Body.Close()
				}
			})
		}
		wg.Wait()
	})
	return ends, ok
}

// TestBurstAgainstSlowFailuresLearnsWhenTheHostCameBack: a burst of 100
// through one Transport, a 1 s outage whose 503s take from 1 ms to 2 s,
// then answers in 1 ms. Failures of attempts sent before the host came
// back keep arriving after it, and the answers between them came to
// attempts sent after the held steps: timed only by the answered
// attempts' sends (see host.inGrace), the grace let none of those steps
// go, and storm control's requests ended 0.23 s later than plain
// backoff's on average over seeds 1-4 (a hunt's find). An answer within
// a failed attempt's time of the step puts it in grace too, as before
// the grace was timed by sends: 0.14 s sooner. None may be lost.
func TestBurstAgainstSlowFailuresLearnsWhenTheHostCameBack(t *testing.T) {
	t.Parallel() // virtual time only: runs beside the other simulations
	p := Policy{MaxRetries: 8, BaseDelay: 20 * time.Millisecond, MaxDelay: time.Second}
	var later time.Duration
	var both, lost int
	for seed := uint64(1); seed <= 4; seed++ {
		endsOn, okOn := slowFailuresBurst(t, StormControl{}, p, seed)
		endsOff, okOff := slowFailuresBurst(t, stormOff, p, seed)
		for i := range endsOn {
			switch {
			case okOff[i] && !okOn[i]:
				lost++
			case okOff[i]:
				later, both = later+endsOn[i]-endsOff[i], both+1
			}
		}
	}
	mean := later / time.Duration(max(both, 1))
	t.Logf("%d requests answered both ways, storm control's %v later on average; %d lost", both, mean, lost)
	if lost > 0 || mean > 100*time.Millisecond {
		t.Errorf("%d lost; storm control's requests %v later than plain backoff's on average", lost, mean)
	}
}
