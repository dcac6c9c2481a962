package httpretry

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestRetryThatGoesAtItsFirstLookIsNotReportedHeld: four requests told
// Retry-After: 1 by a host that then answers. Each retry goes at its own
// backoff's time, so OnRetry reports the same waits as with storm control
// off and nothing held. The gate's look took time (here a Random that
// takes a millisecond of virtual time; on a real clock, microseconds), and
// that time was reported as Held, the retry's Wait longer by as much: 199
// of 200 retries of a newcomer's burst reported a hold of 10-23 µs (a
// newcomer's find).
func TestRetryThatGoesAtItsFirstLookIsNotReportedHeld(t *testing.T) {
	events := func(off bool) (waits []time.Duration, held time.Duration) {
		synctest.Test(t, func(t *testing.T) {
			var n atomic.Int32
			base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
				if n.Add(1) <= 4 {
					resp := response(503, "")
					resp.Header.Set("Retry-After", "1")
					return resp, nil
				}
				return response(200, "ok"), nil
			})
			var mu sync.Mutex
			tr := &Transport{
				Base:   base,
				Random: func() float64 { time.Sleep(time.Millisecond); return 0.5 }, // virtual
				OnRetry: func(e RetryEvent) {
					mu.Lock()
					defer mu.Unlock()
					waits, held = append(waits, e.Wait), held+e.Held
				},
			}
			if off {
				tr.Storm = StormControl{NoHostGate: true, NoBudget: true}
			}
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() {
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a deadline: the gate peeks at the next step's wait
					defer cancel()
					req, _ := http.NewRequestWithContext(ctx, "GET", "http://h.test/", nil)
					resp, err := tr.RoundTrip(req)
					if err != nil || resp.StatusCode != 200 {
						t.Errorf("got %v, %v; want the 200", resp, err)
						return
					}
					resp.Body.Close()
				})
			}
			wg.Wait()
		})
		slices.Sort(waits)
		return waits, held
	}
	onWaits, onHeld := events(false)
	offWaits, _ := events(true)
	if onHeld != 0 || !slices.Equal(onWaits, offWaits) || len(onWaits) != 4 {
		t.Errorf("storm control on: waits %v, held %v in all; off: waits %v; want the same waits and nothing held", onWaits, onHeld, offWaits)
	}
}
