package httpretry

import (
	"net/http"
	"sync"
	"testing"
	"time"
)

// TestEverydayGroupsEndNoLaterOnAverage: groups a user meets every day,
// each request drawing its own random values (the same with storm control
// on and off), end on average within 10% of plain backoff's time, with
// room in most rows: an outage 0.66-0.99x of plain backoff's mean, a host
// that flaps 0.39x, one that sheds after its return 0.88-0.90x, a slow
// server 0.97x (1.04-1.05x in 20 runs under -race while the line's pace
// counted from a failed probe's return: see host.heard). One row pays
// for what the group learns later than plain backoff's retries would: a
// group told Retry-After: 1 whose host returns between its steps, the
// line probing once per Retry-After (1.02-1.04x).
// TestOrdinaryClientsAreNoWorseOff counts rescues; this counts time.
func TestEverydayGroupsEndNoLaterOnAverage(t *testing.T) {
	t.Parallel() // virtual time only: runs beside the other simulations
	ms := time.Millisecond
	for _, tc := range []struct {
		name string
		n    int
		gap  time.Duration
		base func(start time.Time) roundTripFunc
	}{
		{"20 at once, 1 s outage", 20, 0, outageThen(time.Second, ms)},
		{"100 10 ms apart, 2 s outage", 100, 10 * ms, outageThen(2*time.Second, ms)},
		{"5 at once, 3.3 s outage", 5, 0, outageThen(3300*ms, ms)},
		{"50 at once, 1 s outage, 200 ms attempts", 50, 0, outageThen(time.Second, 200*ms)},
		{"20 told Retry-After: 1, back at 4.2 s", 20, 0, func(start time.Time) roundTripFunc { return downWithRetryAfter(start, 4200*ms, nil) }},
		{"5 told Retry-After: 1, back at 4.2 s", 5, 0, func(start time.Time) roundTripFunc { return downWithRetryAfter(start, 4200*ms, nil) }},
		{"100 told Retry-After: 1, back at 2 s", 100, 0, func(start time.Time) roundTripFunc { return downWithRetryAfter(start, 2*time.Second, nil) }},
		{"20 20 ms apart, a host that flaps", 20, 20 * ms, flapping(ms, [2]time.Duration{0, 700 * ms}, [2]time.Duration{time.Second, 1600 * ms}, [2]time.Duration{1900 * ms, 2600 * ms})},
		{"100 at once, back at 1 s serving 10 per 100 ms", 100, 0, shedding(time.Second, 10)},
	} {
		var on, off time.Duration
		for seed := uint64(1); seed <= 8; seed++ {
			endsOn, _ := callsThrough(t, StormControl{}, tc.n, tc.gap, seed, func(int) string { return "http://h/" }, tc.base)
			endsOff, _ := callsThrough(t, stormOff, tc.n, tc.gap, seed, func(int) string { return "http://h/" }, tc.base)
			for i := range endsOn {
				on, off = on+endsOn[i], off+endsOff[i]
			}
		}
		t.Logf("%s: mean %.2fx of plain backoff's", tc.name, float64(on)/float64(off))
		if float64(on) > 1.10*float64(off) {
			t.Errorf("%s: the mean request ended at %.2fx of plain backoff's", tc.name, float64(on)/float64(off))
		}
	}
}

// outageThen is a Base whose attempts take lat and fail with 503 until
// back has passed since start, and answer 200 after.
func outageThen(back, lat time.Duration) func(time.Time) roundTripFunc {
	return flapping(lat, [2]time.Duration{0, back})
}

// flapping is a Base whose attempts take lat and fail with 503 when they
// end within one of downs (from, to since start), and answer 200 otherwise.
func flapping(lat time.Duration, downs ...[2]time.Duration) func(time.Time) roundTripFunc {
	return func(start time.Time) roundTripFunc {
		return func(*http.Request) (*http.Response, error) {
			time.Sleep(lat) // virtual
			at := time.Since(start)
			for _, d := range downs {
				if at >= d[0] && at < d[1] {
					return response(503, "down"), nil
				}
			}
			return response(200, "ok"), nil
		}
	}
}

// shedding is a Base whose attempts take 2 ms, fail with 503 until back
// has passed since start, and then answer perWindow in each 100 ms and
// shed the rest with 503.
func shedding(back time.Duration, perWindow int) func(time.Time) roundTripFunc {
	return func(start time.Time) roundTripFunc {
		var mu sync.Mutex
		used := map[time.Duration]int{}
		return func(*http.Request) (*http.Response, error) {
			time.Sleep(2 * time.Millisecond) // virtual
			at := time.Since(start)
			mu.Lock()
			defer mu.Unlock()
			used[at/(100*time.Millisecond)]++
			if at < back || used[at/(100*time.Millisecond)] > perWindow {
				return response(503, "down"), nil
			}
			return response(200, "ok"), nil
		}
	}
}
