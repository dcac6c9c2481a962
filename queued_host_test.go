package httpretry

import (
	"net/http"
	"testing"
	"time"
)

// queuedHost is a Base for callsThrough: a server that serves slots
// requests at a time, each taking serve, the others queued, and answers
// 503 to those served in [down, up) after start and 200 to the rest.
func queuedHost(down, up time.Duration, slots int, serve time.Duration) func(start time.Time) roundTripFunc {
	return func(start time.Time) roundTripFunc {
		sem := make(chan struct{}, slots)
		return func(*http.Request) (*http.Response, error) {
			sem <- struct{}{}
			defer func() { <-sem }()
			time.Sleep(serve) // virtual
			if at := time.Since(start); at >= down && at < up {
				return response(503, "down"), nil
			}
			return response(200, "ok"), nil
		}
	}
}

// TestHeldRequestsOnAQueuedHostDoNotSeeTheQueueTheyKeptAway: a newcomer's
// hunt. One Transport sends 60 requests a second for 5 s to a server
// that serves 2 at a time (20 ms each, the rest queued) and fails all it
// serves from 1 s to 4 s. Plain backoff's retries fill the queue, so each
// of its attempts in the outage waits there hundreds of milliseconds, and
// its requests' lives stretch past the outage's end: it rescued 299-300
// of 300 on loopback. Storm control holds most retries, the queue stays
// short and attempts fast, and a held request's skipped steps count as
// long as its own (fast) attempts took: it ran through its steps before
// the return and rescued 279-282 (loopback, three runs). The attempt
// that plain backoff would have sent is slower only because of plain
// backoff's own load, which no request of a held Transport can see: a
// cost listed in the README. The test fails below 90% of plain
// backoff's rescues.
func TestHeldRequestsOnAQueuedHostDoNotSeeTheQueueTheyKeptAway(t *testing.T) {
	t.Parallel() // virtual time only
	var on, off int
	for seed := uint64(1); seed <= 3; seed++ {
		host := queuedHost(time.Second, 4*time.Second, 2, 20*time.Millisecond)
		url := func(int) string { return "http://h/item" }
		_, okOn := callsThrough(t, StormControl{}, 300, time.Second/60, seed, url, host)
		_, okOff := callsThrough(t, stormOff, 300, time.Second/60, seed, url, host)
		on, off = on+okOn, off+okOff
	}
	t.Logf("%d of 900 rescued, plain backoff %d", on, off)
	if on*100 < off*90 {
		t.Errorf("storm control rescued %d of 900, plain backoff %d", on, off)
	}
}
