package httpretry

import (
	"testing"
	"time"
)

// TestSmallClientsKeepTheirPaceThroughRandomFailuresAfterAnOutage: one
// Transport, and five, each sending 5 requests a second to a host down 3
// s that then fails 20% of attempts at random, as it did before; five
// told Retry-After: 1 through the outage too. Back from the outage, the
// few attempts a small client sends fail a third or more now and then by
// chance, which taken for a host at its capacity held its backlog in line
// (see failsAShare): over 20 seeds, requests rescued both ways ended
// 0.18 s, 0.09 s and, told, 0.20 s later than plain backoff's on
// average, some of them 4 s later. Now 0.07 s and 0.04 s later, and
// 0.03 s sooner.
func TestSmallClientsKeepTheirPaceThroughRandomFailuresAfterAnOutage(t *testing.T) {
	t.Parallel() // virtual time only: runs beside the other simulations
	for _, tc := range []struct {
		name    string
		clients int
		told    int // Retry-After seconds sent with every failure of the outage
		most    time.Duration
	}{
		{"1 client", 1, 0, 100 * time.Millisecond},
		{"5 clients", 5, 0, 60 * time.Millisecond},
		{"5 clients told Retry-After: 1", 5, 1, 60 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var later time.Duration
			var both int
			for seed := uint64(1); seed <= 20; seed++ {
				sc := fleetScenario{clients: tc.clients, rate: 5 * float64(tc.clients), down: [2]time.Duration{time.Second, 4 * time.Second},
					duration: 7 * time.Second, latency: time.Millisecond, failRate: 0.2, retryAfterSecs: tc.told, policy: defaultFleet().policy, seed: seed}
				on, off := runFleet(t, sc, StormControl{}), runFleet(t, sc, stormOff)
				offByStart := map[time.Duration]simRequest{}
				for _, r := range off.requests {
					offByStart[r.start] = r
				}
				for _, r := range on.requests {
					if o := offByStart[r.start]; o.ok && r.ok {
						later += r.latency - o.latency
						both++
					}
				}
			}
			mean := later / time.Duration(max(both, 1))
			t.Logf("%d requests rescued both ways, %v later on average", both, mean.Round(time.Millisecond))
			if mean > tc.most {
				t.Errorf("requests rescued both ways ended %v later than plain backoff's on average, want %v at most", mean.Round(time.Millisecond), tc.most)
			}
		})
	}
}
