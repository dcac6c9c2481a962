package httpretry

import (
	"net/http"
	"sync"
	"testing"
	"time"
)

// smallCapacityHost is a Base for callsThrough: down (503) until back has
// passed since start, then serving conc requests at a time, each answered
// 200 after serve, and failing the rest with a 503; every failure takes
// fail to come.
func smallCapacityHost(back time.Duration, conc int, serve, fail time.Duration) func(start time.Time) roundTripFunc {
	return func(start time.Time) roundTripFunc {
		var mu sync.Mutex
		busy := 0
		return func(*http.Request) (*http.Response, error) {
			mu.Lock()
			served := time.Since(start) >= back && busy < conc
			if served {
				busy++
			}
			mu.Unlock()
			if !served {
				time.Sleep(fail) // virtual
				return response(503, "busy"), nil
			}
			time.Sleep(serve) // virtual
			mu.Lock()
			busy--
			mu.Unlock()
			return response(200, "ok"), nil
		}
	}
}

// TestSharedClientOnAHostBackAtASmallCapacity: 50 requests through one
// Transport, the default Policy, a host down for 1.5 s and then serving
// 5 at a time (100 ms each), failing the rest at once or after 200 ms.
// Storm control rescued fewer than plain backoff: over seeds 1-10,
// 413-422 of 500 against 453 with fast failures and 463-475 against 496
// with slow ones, from run to run as the scheduler orders the held
// requests (a hunt on loopback: 80-84.5% against 89.5-93.5% with slow
// ones). The held requests came back together, the line's slow start
// releasing two more for each answer while the host turned most attempts
// away, and took the slots where plain backoff's last steps found room;
// the failed ones stopped with StopHostGate, their steps run out. Slow
// start now stops once the host sheds: 455-462 and 480-487 then
// (loopback, 84.5-87.5% against 88.5%); 435-452 and 480-491 in 24 runs at
// a7359a0 and after, as the rules since moved them. The test fails below
// 95% of plain backoff's rescues.
func TestSharedClientOnAHostBackAtASmallCapacity(t *testing.T) {
	t.Parallel() // virtual time only: runs beside the other simulations
	for _, fail := range []time.Duration{time.Millisecond, 200 * time.Millisecond} {
		var on, off int
		for seed := uint64(1); seed <= 10; seed++ {
			host := smallCapacityHost(1500*time.Millisecond, 5, 100*time.Millisecond, fail)
			_, okOn := callsThrough(t, StormControl{}, 50, 0, seed, func(int) string { return "http://h/" }, host)
			_, okOff := callsThrough(t, stormOff, 50, 0, seed, func(int) string { return "http://h/" }, host)
			on, off = on+okOn, off+okOff
		}
		t.Logf("failures taking %v: %d of 500 rescued, plain backoff %d", fail, on, off)
		if on*100 < off*95 {
			t.Errorf("failures taking %v: storm control rescued %d of 500, plain backoff %d", fail, on, off)
		}
	}
}
