package httpretry

import (
	"context"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// A Retry-After that names a date, told to held requests.

// rateWindow is a rate limiter that answers 429 until up, but for the
// first quota attempts of each window, each 429's Retry-After naming, as
// an HTTP date, the end of the 2 s window it came in, or, when moving is
// set, the moment 2 s after it, cut to the whole second as an HTTP date
// is (with a Date header when date is set); and
// the requests sent to it, each with a random stream of its own
// (PCG(seed, i)) and a deadline, to one path or, when ids is set, each
// to its own.
type rateWindow struct {
	pol         Policy
	lat         time.Duration
	up          time.Duration
	quota       int
	date        bool
	moving, ids bool
	seed        uint64
	reqs        []struct{ start, deadline time.Duration }
}

// rwResult is what became of the first request.
type rwResult struct {
	code  int
	sends []time.Duration
	end   time.Duration
}

// run runs w with storm control c in a synctest bubble and returns what
// became of its first request.
func (w rateWindow) run(t *testing.T, c StormControl) (a rwResult) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		var mu sync.Mutex
		used := map[time.Duration]int{} // attempts answered in each window
		streams := newRequestStreams(w.seed)
		tr := &Transport{Storm: c, Policy: w.pol,
			Random: streams.random,
			Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
				at := time.Since(t0)
				if r.Header.Get("X-I") == "0" {
					mu.Lock()
					a.sends = append(a.sends, at)
					mu.Unlock()
				}
				time.Sleep(w.lat) // virtual: synctest's clock
				window := (time.Since(t0)/(2*time.Second) + 1) * 2 * time.Second
				mu.Lock()
				answered := at >= w.up || used[window] < w.quota
				used[window]++
				mu.Unlock()
				if answered {
					return response(200, "ok"), nil
				}
				resp := response(429, "slow down")
				named := t0.Add(window)
				if w.moving {
					named = time.Now().Add(2 * time.Second)
				}
				resp.Header.Set("Retry-After", named.UTC().Format(http.TimeFormat))
				if w.date {
					resp.Header.Set("Date", time.Now().UTC().Format(http.TimeFormat))
				}
				return resp, nil
			})}
		var wg sync.WaitGroup
		for i, s := range w.reqs {
			wg.Go(func() {
				streams.join(uint64(i))
				time.Sleep(s.start) // virtual
				ctx, cancel := context.WithTimeout(context.Background(), s.deadline)
				defer cancel()
				url := "http://h/"
				if w.ids {
					url += "item/" + strconv.Itoa(i)
				}
				req := httptest.NewRequest("GET", url, nil).WithContext(ctx)
				req.Header.Set("X-I", strconv.Itoa(i))
				resp, err := tr.RoundTrip(req)
				if i == 0 {
					a.end = time.Since(t0)
				}
				if err == nil {
					if i == 0 {
						a.code = resp.StatusCode
					}
					resp.Body.Close()
				}
			})
		}
		wg.Wait()
	})
	return a
}

// rescuedAsOff checks that the first request, which plain backoff
// rescues, is rescued held too.
func (w rateWindow) rescuedAsOff(t *testing.T) {
	t.Helper()
	on, off := w.run(t, StormControl{}), w.run(t, stormOff)
	if off.code != 200 {
		t.Fatalf("plain backoff got %d at %v after %v: the arrangement must rescue A", off.code, off.end, off.sends)
	}
	if on.code != 200 {
		t.Errorf("held A got %d at %v after attempts at %v; plain backoff 200 at %v after %v", on.code, on.end, on.sends, off.end, off.sends)
	}
}

// TestHeldRequestToldADateFitsItToItsDeadlineAsPlainBackoff: A starts at
// 1.138 s with a 3.209 s deadline, beside B; the limiter answers from 4 s.
// Plain backoff's retry at 2.06 s is told the 4 s date and goes at 4.1 s,
// inside the deadline: 200. Held, A skipped that step, was let go at
// 2.08 s standing for its next, due at 2.97 s, and was told the 4 s date:
// counted as a delay from that step, the date's wait put plain backoff's
// next retry at 4.92 s, past the deadline, and A returned the 429 at
// 2.11 s (a review's find: 1,728 of 6,398 rescues lost in drawn rate
// windows). A date names one moment to every attempt, wherever its step.
func TestHeldRequestToldADateFitsItToItsDeadlineAsPlainBackoff(t *testing.T) {
	rateWindow{pol: Policy{MaxRetries: 6, BaseDelay: 88 * time.Millisecond, MaxDelay: 88 * time.Millisecond},
		lat: 28 * time.Millisecond, up: 4 * time.Second, seed: 485,
		reqs: []struct{ start, deadline time.Duration }{{1138 * time.Millisecond, 3209 * time.Millisecond}, {1101 * time.Millisecond, 3256 * time.Millisecond}},
	}.rescuedAsOff(t)
}

// TestHeldRequestToldADateKeepsItsLastStepAtPlainBackoffs: the same
// limiter, up at 8 s, with Date headers; A starts at 346 ms (deadline
// 8.57 s), B at 1.254 s. Plain backoff's retries go at 2.40, 4.57, 6.67
// and 8.72 s, each told the next window's date, and the last gets the
// 200. Held, A, let go at 3.18 s and told the 4 s date, took it as a wait
// of 1 s to be waited from the step it stood for, and a step ahead of
// plain backoff's, its last went at 6.61 s, into the window: 429.
func TestHeldRequestToldADateKeepsItsLastStepAtPlainBackoffs(t *testing.T) {
	rateWindow{pol: Policy{MaxRetries: 5, BaseDelay: 155 * time.Millisecond, MaxDelay: 465 * time.Millisecond, Jitter: JitterDecorrelated},
		lat: 11 * time.Millisecond, up: 8 * time.Second, seed: 855, date: true,
		reqs: []struct{ start, deadline time.Duration }{{346 * time.Millisecond, 8570 * time.Millisecond}, {1254 * time.Millisecond, 8045 * time.Millisecond}},
	}.rescuedAsOff(t)
}

// TestHeldRequestKeepsALastStepItsDeadlineSets: A starts at 1.366 s with a
// 3.554 s deadline, beside two others; the limiter answers from 4 s. Held,
// A was let go between steps at 2.66 s and told the 4 s date, which
// outlasts its next step, the last its deadline leaves: the retry stood
// for that step, sent early, and A returned the 429 at once. Plain
// backoff's retry went at 2.44 s, was told the same date, and its last,
// at 4.61 s, got the 200 (a review's find in drawn rate windows,
// where keeping such a step rescues 10 more of 645 with dates and 20 more
// of 498 with seconds counting down). A retry let go between steps no
// longer stands for a last step, whether MaxRetries or the deadline makes
// it the last: A waits the date out and sends it.
func TestHeldRequestKeepsALastStepItsDeadlineSets(t *testing.T) {
	ms := time.Millisecond
	rateWindow{pol: Policy{MaxRetries: 6, BaseDelay: 465 * ms, MaxDelay: 1860 * ms, Jitter: JitterEqual},
		lat: 44 * ms, up: 4 * time.Second, seed: 112, date: true,
		reqs: []struct{ start, deadline time.Duration }{{1366 * ms, 3554 * ms}, {1067 * ms, 3197 * ms}, {321 * ms, 4470 * ms}},
	}.rescuedAsOff(t)
}

// TestHeldGroupAsksARateLimitAtTheMomentItNamed: A starts at 1.806 s
// (deadline 5.352 s) beside two requests started before it; the limiter
// answers from 6 s. Plain backoff's retries go at 2.00 s (told the 4 s
// date), 4.16 s (told 6 s) and 6.10 s: 200. Held at 2 s, A skipped that
// step, and the line, waiting three gaps of the group's fresh requests
// for one that never came, asked the limiter again only at 3.98 s: A was
// let go then, told the 4 s date, retried at 4.01 s, told 6 s, and had
// no retry left: 429 at 4.03 s (in 3,000 drawn groups, A failed where
// plain backoff rescued it 216 times before, 97 now). The line's probe
// now goes at the moment the Retry-After named, as plain backoff's
// retries do.
func TestHeldGroupAsksARateLimitAtTheMomentItNamed(t *testing.T) {
	ms := time.Millisecond
	rateWindow{pol: Policy{MaxRetries: 3, BaseDelay: 62 * ms, MaxDelay: 124 * ms, Jitter: JitterDecorrelated},
		lat: 20 * ms, up: 6 * time.Second, seed: 11,
		reqs: []struct{ start, deadline time.Duration }{{1806 * ms, 5352 * ms}, {386 * ms, 6175 * ms}, {1225 * ms, 5432 * ms}},
	}.rescuedAsOff(t)
}

// TestRetryAfterThatNamesWindowsHoldsNoOneForIt: A starts at 1.761 s
// (deadline 6.48 s) beside two others; the limiter answers from 8 s, each
// 429 naming its window's end. Attempts sent after 2 s are told 4 s: the
// date named the end of a window, not the host's return, and holding A
// for it skipped its steps until 4.44 s, so that its last went at 6.59 s,
// into the window: 429. Plain backoff's retries go at 2.85, 5.00, 6.08
// and 8.16 s: 200. Once an attempt sent at or after the moment a
// Retry-After named is told a later one, a Retry-After alone holds no
// request of the host, and A goes at plain backoff's steps.
func TestRetryAfterThatNamesWindowsHoldsNoOneForIt(t *testing.T) {
	ms := time.Millisecond
	rateWindow{pol: Policy{MaxRetries: 4, BaseDelay: 362 * ms, MaxDelay: 724 * ms, Jitter: JitterDecorrelated},
		lat: 11 * ms, up: 8 * time.Second, seed: 322, date: true,
		reqs: []struct{ start, deadline time.Duration }{{1761 * ms, 6480 * ms}, {115 * ms, 9308 * ms}, {1626 * ms, 7197 * ms}},
	}.rescuedAsOff(t)
}

// TestHeldRetryWaitsForTheWindowsEndTheHostNamed: A starts at 1.792 s
// (deadline 4.281 s) beside B; the limiter answers from 6 s. Plain
// backoff's retries go at 2.01 s (told the 4 s date), 4.14 s (told 6 s)
// and 6.05 s: 200. Once an attempt sent after 2 s had been told 4 s, the
// host's Retry-After was known to name a window's end, yet the line let
// A go at 2.73 s, inside that window: told 4 s, then 6 s at 4.04 s, A had
// no step left: 429 at 4.07 s. A skipped step now stands for an attempt
// told the window's end, and the next waits until it; the line probes no
// earlier either (in 3,000 drawn groups, A failed where plain backoff
// rescued it 97 times before, 80 now).
func TestHeldRetryWaitsForTheWindowsEndTheHostNamed(t *testing.T) {
	ms := time.Millisecond
	rateWindow{pol: Policy{MaxRetries: 4, BaseDelay: 109 * ms, MaxDelay: 327 * ms, Jitter: JitterNone},
		lat: 29 * ms, up: 6 * time.Second, seed: 55,
		reqs: []struct{ start, deadline time.Duration }{{1792 * ms, 4281 * ms}, {1091 * ms, 5490 * ms}},
	}.rescuedAsOff(t)
}

// TestHeldRetryOnAPathOfItsOwnWaitsForTheWindowsEndTheHostNamed: A, to a
// path of its own, starts at 1.536 s (deadline 7.486 s) beside B, to
// another; the limiter answers from 8 s. Plain backoff's retries go at
// 2.03 s (told 4 s), 4.11 s (told 6 s), 6.05 s (told 8 s) and 8.12 s:
// 200. Held, A went at 3.00 s, inside the window after the host had
// named its end, as a skipped step waited only the Retry-After told to
// A's path: told 4 s, then 6 s, then 8 s at 6.15 s, A had no step left:
// 429 (1,000 drawn groups, each request to its own path: 41 of 2,147
// rescues lost, 20 now). A skipped step waits for the end the host named,
// whatever the path it was named to.
func TestHeldRetryOnAPathOfItsOwnWaitsForTheWindowsEndTheHostNamed(t *testing.T) {
	ms := time.Millisecond
	rateWindow{pol: Policy{MaxRetries: 5, BaseDelay: 73 * ms, MaxDelay: 73 * ms, Jitter: JitterNone},
		lat: 17 * ms, up: 8 * time.Second, seed: 287, ids: true,
		reqs: []struct{ start, deadline time.Duration }{{1536 * ms, 7486 * ms}, {103 * ms, 9223 * ms}},
	}.rescuedAsOff(t)
}

// TestHeldRetryWaitsWhatIsLeftOfAMovingDate: each 429 names the moment 2 s
// after it, as an HTTP date, to the whole second; A starts at 1.798 s
// (deadline 5.661 s) beside three others, and the limiter answers from
// 6 s. Plain backoff's retries go at 3.11 s (told 5 s), 5.03 s (told 7 s)
// and 7.02 s: 200. Held, A went at 3.28 s, between steps, standing for its
// 3.11 s step, and was told 5 s: taken as a wait of 1.7 s from that step,
// not as the moment it names, the date put A's next attempt at 5.06 s,
// told 7 s, and A returned that 429 at 5.10 s (1,000 drawn groups: 52 of
// 1,335 rescues lost, 33 now). A date names one moment to whoever is told
// it: what is left of it at the step is waited.
func TestHeldRetryWaitsWhatIsLeftOfAMovingDate(t *testing.T) {
	ms := time.Millisecond
	rateWindow{pol: Policy{MaxRetries: 3, BaseDelay: 172 * ms, MaxDelay: 172 * ms, Jitter: JitterDecorrelated},
		lat: 32 * ms, up: 6 * time.Second, seed: 544, moving: true,
		reqs: []struct{ start, deadline time.Duration }{{1798 * ms, 5661 * ms}, {657 * ms, 5784 * ms}, {787 * ms, 5732 * ms}, {1772 * ms, 4714 * ms}},
	}.rescuedAsOff(t)
}

// TestLineAsksAtTheEarliestMomentItsRequestsWereTold: four requests of
// the default jitter on a limiter whose 429s name their 2 s window's end,
// each read against the response's whole-second Date header, so that the
// moments told for the end at 2 s spread up to 3 s; the limiter answers
// from 6 s. A starts at 1.413 s. Plain backoff's retries go at 2.47 s
// (told 4 s), 4.63 s (told 6 s) and 6.77 s: 200. The line asked at the
// latest moment told, 2.89 s, a second into the next window, with A as
// its probe: told 4 s, A's steps ran out at 5.03 s, before the window
// at 6 s (4 goroutines in 300 runs: 313 of 1,200 rescues lost, 102 at
// the earliest moment). It now asks at the earliest moment told since the
// host's latest failure.
func TestLineAsksAtTheEarliestMomentItsRequestsWereTold(t *testing.T) {
	ms := time.Millisecond
	rateWindow{pol: Policy{MaxRetries: 3, BaseDelay: 100 * ms, MaxDelay: 400 * ms},
		lat: ms, up: 6 * time.Second, seed: 4, date: true,
		reqs: []struct{ start, deadline time.Duration }{{1413 * ms, 10 * time.Second}, {1068 * ms, 10 * time.Second}, {302 * ms, 10 * time.Second}, {492 * ms, 10 * time.Second}},
	}.rescuedAsOff(t)
}

// TestLineAsksAtOnceWhenAMomentNamedComesWithNoNews: four requests of
// the default jitter on the same limiter, with Date headers; A starts at
// 59 ms. Plain backoff's retries go at 2.22 s (told 4 s), 4.27 s (told
// 6 s) and 6.32 s: 200. Held at its first step, A went only at 2.83 s,
// waiting for the line, whose young flow of fresh requests had not yet
// stopped; told 4 s, A's last step, at 4.89 s, was told 6 s: 429 (in
// 300 drawn groups of this limiter, A lost 36 rescues; another 300 lost
// 121 of 1,200). The line now probes at the earliest moment its requests
// were told, when no news has come since, and A keeps plain backoff's
// steps (none lost).
func TestLineAsksAtOnceWhenAMomentNamedComesWithNoNews(t *testing.T) {
	ms := time.Millisecond
	rateWindow{pol: Policy{MaxRetries: 3, BaseDelay: 100 * ms, MaxDelay: 400 * ms},
		lat: ms, up: 6 * time.Second, seed: 7, date: true,
		reqs: []struct{ start, deadline time.Duration }{{59 * ms, time.Minute}, {1767 * ms, time.Minute}, {957 * ms, time.Minute}, {414 * ms, time.Minute}},
	}.rescuedAsOff(t)
}

// TestLineAsksAtNoMomentTheHostHasSinceMovedPast: the same limiter and
// four requests; A starts at 1.563 s. Plain backoff's retries go at
// 2.59 s (told 4 s), 4.66 s (told 6 s) and 6.66 s: 200. A moment told for
// the end at 2 s, read up to a second late, was still pending at 2.77 s
// after attempts sent past 2 s had been told 4 s: the line asked then,
// inside the next window, with A as its probe, and A's steps ran out at
// 4.77 s (4 goroutines in 300 runs: 102 of 1,200 rescues lost). A rule
// that dropped such superseded moments fixed it; the rules that came
// after it fix it without that rule (none lost), which was dropped.
func TestLineAsksAtNoMomentTheHostHasSinceMovedPast(t *testing.T) {
	ms := time.Millisecond
	rateWindow{pol: Policy{MaxRetries: 3, BaseDelay: 100 * ms, MaxDelay: 400 * ms},
		lat: ms, up: 6 * time.Second, seed: 26, date: true,
		reqs: []struct{ start, deadline time.Duration }{{1563 * ms, 10 * time.Second}, {282 * ms, 10 * time.Second}, {1290 * ms, 10 * time.Second}, {427 * ms, 10 * time.Second}},
	}.rescuedAsOff(t)
}

// TestLineProbesAQuotaThatAnswersSomeRequestsInEachWindow: ten requests
// on a limiter that answers the first two attempts of each 2 s window and
// tells the rest its end; A starts at 1.977 s. Plain backoff's retry at
// 2.12 s is told 4 s, and the next, at 4.01 s, is answered. Held, A went
// only at 7.56 s, and its steps were spent: 429. Each refusal names the
// window's end just ahead, so the line, kept from probing before the end
// the host named, never probed. The end is a bound on the line's probes
// only while the host has answered nothing; A now gets its 200 at 8 s,
// still 4 s after plain backoff's (a quota's open slots are left to the
// requests that ask when the window opens; open in docs/storm-control.md).
func TestLineProbesAQuotaThatAnswersSomeRequestsInEachWindow(t *testing.T) {
	ms := time.Millisecond
	w := rateWindow{pol: Policy{MaxRetries: 4, BaseDelay: 138 * ms, MaxDelay: 414 * ms}, lat: 9 * ms, up: time.Hour, quota: 2, seed: 208}
	for _, start := range []time.Duration{1977, 13, 3933, 732, 799, 30, 2510, 1034, 416, 1867} {
		w.reqs = append(w.reqs, struct{ start, deadline time.Duration }{start * ms, time.Minute})
	}
	w.rescuedAsOff(t)
}

// TestDrawnRateWindowsLoseFewRescues is a hunt over drawn groups of 2 to 4
// requests on a limiter that answers from 4, 6 or 8 s and tells each 429
// an HTTP date: its 2 s window's end (with or without a Date header, to
// one path or each to its own) or the moment 2 s after the 429 (a delay
// written as a date), with deadlines near the limiter's opening or none.
// It counts the first request's rescues by plain backoff that storm
// control loses. At 1,500 groups a family it lost 68 of 4,674 (1 to 18 a
// family); the line's next probe put after the Retry-After its
// predecessor was told (docs/storm-control.md) lost 97: 15, 16 and 23 in
// "moving, deadlines", "moving, no deadline" and "moving, IDs,
// deadlines", against 4, 5 and 16. At the
// default 150 groups a family, the bound (3 and a twenty-fifth) catches
// only a gross loss; HTTPRETRY_PROPERTY_SEEDS sets the groups per family,
// for a hunt.
func TestDrawnRateWindowsLoseFewRescues(t *testing.T) {
	t.Parallel() // virtual time only: runs beside the other simulations
	lostAll, rescuedAll := 0, 0
	for _, fam := range []struct {
		name                         string
		moving, date, ids, deadlines bool
	}{
		{"window's end, deadlines", false, false, false, true},
		{"window's end, no deadline", false, false, false, false},
		{"window's end with Date, deadlines", false, true, false, true},
		{"window's end, IDs, deadlines", false, false, true, true},
		{"moving, deadlines", true, false, false, true},
		{"moving, no deadline", true, false, false, false},
		{"moving, IDs, deadlines", true, false, true, true},
	} {
		lost, won, rescued := 0, 0, 0
		for seed := range uint64(propertySeeds(150)) {
			w := drawRateWindow(seed+1, fam.moving, fam.date, fam.ids, fam.deadlines)
			on, off := w.run(t, StormControl{}), w.run(t, stormOff)
			rescued += btoi(off.code == 200)
			lost += btoi(off.code == 200 && on.code != 200)
			won += btoi(on.code == 200 && off.code != 200)
		}
		t.Logf("%s: lost %d of plain backoff's %d rescues, won %d", fam.name, lost, rescued, won)
		lostAll, rescuedAll = lostAll+lost, rescuedAll+rescued
	}
	if lostAll > 3+rescuedAll/25 {
		t.Errorf("storm control lost %d of plain backoff's %d rescues", lostAll, rescuedAll)
	}
}

// drawRateWindow draws a group for TestDrawnRateWindowsLoseFewRescues.
func drawRateWindow(seed uint64, moving, date, ids, deadlines bool) rateWindow {
	r := rand.New(rand.NewPCG(seed, 777))
	base := time.Duration(20+r.IntN(400)) * time.Millisecond
	w := rateWindow{pol: Policy{MaxRetries: 2 + r.IntN(5), BaseDelay: base, MaxDelay: base * time.Duration(1+r.IntN(4)), Jitter: Jitter(r.IntN(4))},
		lat: time.Duration(1+r.IntN(50)) * time.Millisecond, up: time.Duration(4+2*r.IntN(3)) * time.Second,
		seed: seed, moving: moving, date: date, ids: ids}
	for range 2 + r.IntN(3) {
		// Drawn whether used or not, so that the families with and without
		// deadlines draw the same groups.
		start, near := time.Duration(r.IntN(2000))*time.Millisecond, time.Duration(r.IntN(3000)-1500)*time.Millisecond
		deadline := time.Minute
		if deadlines {
			deadline = max(w.up+near-start, 500*time.Millisecond)
		}
		w.reqs = append(w.reqs, struct{ start, deadline time.Duration }{start, deadline})
	}
	return w
}
