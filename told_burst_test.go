package httpretry

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"
)

// toldBurst sends n requests 50 µs apart through one Transport to a host
// that answers 503 with Retry-After: 1 until down has passed, each
// attempt taking 1-4 ms, and returns their mean time to finish, counted
// from the first's start, and the latest, how many succeeded, and the
// attempts sent.
func toldBurst(t *testing.T, c StormControl, n int, down time.Duration, seed uint64) (mean, last time.Duration, ok, attempts int) {
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
		last = max(last, end+time.Duration(i)*gap)
	}
	return total / time.Duration(n), last, ok, attempts
}

// TestBurstToldRetryAfterEndsAsSoonAsPlainBackoff: 100 requests through
// one Transport, every failure told Retry-After: 1 through an outage of 2
// or 3 s. A held step at the moment its Retry-After named skipped when the
// line's probes, 0.1-0.8 s apart and each told a later moment, had failed
// since its own news, and the requests waited for the next probe: 2.53 s
// and 4.08-4.12 s on average against plain backoff's 2.11 s and 3.17 s
// (seeds 1-3). A Retry-After is news until the moment it named (see
// member.newsUntil): 2.04-2.06 s and 3.05-3.09 s, every request answered,
// with 70% and half of plain backoff's attempts. The last ended at
// 2.71 s and 3.82-3.84 s, against plain backoff's 2.20 s and 3.28 s: a
// retry sent between its steps as the line's probe, late in the outage,
// was told Retry-After: 1 again, which put its request past the step it
// stood for, where plain backoff's found the host back. While the host
// tells every request the same wait, no retry goes between steps when
// told it again would end past its next (see mayGoBetween): 2.03-2.05 s
// and 3.05-3.08 s.
func TestBurstToldRetryAfterEndsAsSoonAsPlainBackoff(t *testing.T) {
	for _, down := range []time.Duration{2 * time.Second, 3 * time.Second} {
		for seed := uint64(1); seed <= 3; seed++ {
			on, lastOn, okOn, sentOn := toldBurst(t, StormControl{}, 100, down, seed)
			off, lastOff, okOff, sentOff := toldBurst(t, stormOff, 100, down, seed)
			if float64(on) > 1.02*float64(off) || lastOn > lastOff || okOn < okOff || sentOn > sentOff {
				t.Errorf("outage %v, seed %d: mean %v, last %v, %d answered, %d attempts; plain backoff %v, %v, %d, %d",
					down, seed, on, lastOn, okOn, sentOn, off, lastOff, okOff, sentOff)
			}
		}
	}
}

// TestFleetToldADelayEndsAsSoonAsPlainBackoff: 19 to 33 clients, a
// Transport each, 3 to 5 requests a second each, through a 3 to 5 s
// outage whose every 503 says Retry-After: 1 or 2. A told step waited,
// once the host answered, for the line's releases, as if the Retry-After
// had named the host's return to the fleet: storm control's requests
// ended 0.2-0.6 s later than plain backoff's on average (later, net of
// those that ended sooner). A host that fails an attempt sent at or after
// the first moment it named, naming or sent a second later, names waits,
// not its return (see host.noteNamed): -0.001 to 0.04 s. Each answer to a
// told retry the line let go then lets two more go, as when fresh
// requests have stopped, where the fresh requests' answers alone paced
// them: -0.29 to -0.03 s. Since 2026-12-07 every told step goes on the
// host's answer (see TestToldStepGoesOnTheHostsAnswer), and noteNamed only
// grants that slow start. None may be lost, nor any fleet end later.
func TestFleetToldADelayEndsAsSoonAsPlainBackoff(t *testing.T) {
	t.Parallel() // virtual time only: runs beside the other simulations
	for _, fc := range []struct {
		clients, perClient, outage, retryAfter int
		seed                                   uint64
	}{{19, 3, 3, 2, 7}, {23, 5, 5, 2, 9}, {29, 3, 3, 1, 12}} {
		clients := float64(fc.clients)
		out := time.Duration(fc.outage) * time.Second
		sc := fleetScenario{clients: fc.clients, rate: clients * float64(fc.perClient), down: [2]time.Duration{time.Second, time.Second + out},
			duration: out + 3*time.Second, latency: time.Millisecond, retryAfterSecs: fc.retryAfter,
			policy: Policy{MaxRetries: 8, BaseDelay: 20 * time.Millisecond, MaxDelay: time.Second}, seed: fc.seed}
		if mean, lost := latenessAgainstPlainBackoff(t, fmt.Sprintf("%+v", fc), sc); lost > 0 || mean > 0 {
			t.Errorf("%+v: %d lost, %v later on average than plain backoff", fc, lost, mean)
		}
	}
}

// TestClientToldTheOutagesEndEndsAsSoonAsPlainBackoff: one client, from 2
// to 30 requests a second, through a 3 s outage whose every 503 names its
// end as a date, the host then answering all it gets. Plain backoff's
// retries go at the date and are answered; the held ones go as soon, on
// the host's first answer. When told steps waited for the line's
// releases, as a herd's must to spread its return, these clients ended
// 0.84-1.05 s later on average (the hunt's small clients, seeds 1-4:
// 0.37-1.19 s, up to 4.2 s): from inside one client a herd member and a
// small client look alike, and the client's contract comes first.
func TestClientToldTheOutagesEndEndsAsSoonAsPlainBackoff(t *testing.T) {
	t.Parallel() // virtual time only: runs beside the other simulations
	for _, rate := range []float64{2, 5, 30} {
		sc := fleetScenario{clients: 1, rate: rate, down: [2]time.Duration{time.Second, 4 * time.Second},
			duration: 7 * time.Second, latency: time.Millisecond, retryAfter: true,
			policy: Policy{MaxRetries: 8, BaseDelay: 20 * time.Millisecond, MaxDelay: time.Second}, seed: 1}
		if mean, lost := latenessAgainstPlainBackoff(t, fmt.Sprintf("%v a second", rate), sc); lost > 0 || mean > 10*time.Millisecond {
			t.Errorf("%v requests a second: %d lost, %v later on average than plain backoff", rate, lost, mean)
		}
	}
}

// latenessAgainstPlainBackoff runs sc with storm control on and off and
// returns how much later the requests answered both ways end with it, on
// average, and how many of plain backoff's rescues it lost; it fails when
// fewer than nine in ten were answered both ways.
func latenessAgainstPlainBackoff(t *testing.T, name string, sc fleetScenario) (mean time.Duration, lost int) {
	t.Helper()
	on, off := runFleet(t, sc, StormControl{}), runFleet(t, sc, stormOff)
	offByStart := map[time.Duration]simRequest{}
	for _, r := range off.requests {
		offByStart[r.start] = r
	}
	var later time.Duration
	var both int
	for _, r := range on.requests {
		switch o := offByStart[r.start]; {
		case o.ok && !r.ok:
			lost++
		case o.ok:
			later, both = later+r.latency-o.latency, both+1
		}
	}
	mean = later / time.Duration(max(both, 1))
	t.Logf("%s: %d of %d requests answered both ways, storm control's %v later on average, %d lost", name, both, len(on.requests), mean, lost)
	if both < len(on.requests)*9/10 {
		t.Errorf("%s: only %d of %d requests answered both ways", name, both, len(on.requests))
	}
	return mean, lost
}
