package httpretry

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

// TestHeldRequestEndsNoLaterThanWithoutStormControl is the property of
// rule 2 (docs/storm-control.md): over random scenarios, a request L that
// fails in the end ends after no more attempts with storm control than
// without it, however the others to its host are held, and no later but
// for the steps owed to it while its host shed after an outage (see
// host.owes), which may put it later by the host's outages' time at most:
// 12 of 6,000 draws ended later in two runs, by up to 2.1 s (4 of the
// 600 here; 19 and 20 before a put-off step was kept within plain
// backoff's longest life), 17-19 in four runs since a last step owed is
// put off too (19 at ff3a8d3, counted again, by up to 2.1 s), 35-36 in
// three runs since the backlog is held whatever the host's latest
// outcome (by up to 2.1 s; 6 to 16 in each case's 2,000; 7 of the 600
// here, 2 or 3 a case against 4 allowed), 27 since a host back sheds
// only while a third of what it was sent since fails (by up to 1.3 s; 5
// of the 600 here), and no more than 1 in 50 may. L's Policy has no
// jitter, so that its schedule depends on time alone; a
// Retry-After told to L alone is left out, Retry-After on some failures
// and not others being the documented exception. "different attempt times" gives L 1 ms attempts among slower
// ones: a life timed by the host's average ended 12-50 ms late on 6 seeds
// in 5,000 (159 and 312 among them). "L first" starts L at 0, before the
// others, so that its first attempt is not timed: a life fitted to L's
// deadline as if its attempts took no time ended past plain backoff's on
// 6 seeds in 8,000 of a review's harness. Each runs 200 seeds, so that
// make test stays short (400 took a tenth of its time under -race); a
// rare case needs thousands: HTTPRETRY_PROPERTY_SEEDS sets how many.
func TestHeldRequestEndsNoLaterThanWithoutStormControl(t *testing.T) {
	t.Parallel() // virtual time only: runs beside the other simulations
	seeds := propertySeeds(200)
	for name, v := range map[string]struct{ lFast, lFirst bool }{
		"same attempt times": {}, "different attempt times": {lFast: true}, "L first": {lFirst: true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			later := 0
			for seed := 1; seed <= seeds && !t.Failed(); seed++ {
				c := drawHeldCase(uint64(seed))
				if v.lFirst {
					c.lStart, c.bgAfter = 0, time.Millisecond
				}
				on := runHeldCase(t, c, StormControl{}, v.lFast)
				off := runHeldCase(t, c, stormOff, v.lFast)
				if on.status == 200 || off.status == 200 || c.lRA > 0 {
					continue
				}
				if on.end > off.end {
					later++
				}
				if on.attempts > off.attempts || on.end > off.end+c.downTime() {
					t.Errorf("seed %d: %+v\non:  ended at %v after %d attempts %v, %q\n     %v\noff: ended at %v after %d attempts %v, %q\n     %v", seed, c,
						on.end, on.attempts, on.sends, on.err, on.events, off.end, off.attempts, off.sends, off.err, off.events)
				}
			}
			if later*50 > seeds {
				t.Errorf("L ended later than plain backoff in %d of %d draws", later, seeds)
			}
		})
	}
}

// TestHeldRequestToldSomeRetryAftersKeepsItsLimits is the contract of a
// request whose failures only sometimes carry a Retry-After, the
// documented exception to rule 2: a held request may then end later, or
// after an attempt more, than with plain backoff (the server told the two
// runs different things), but never sends more than MaxRetries retries,
// never goes before a Retry-After it was told ends, and never ends past
// its deadline. L's failures say Retry-After in even seconds of the run
// only, so that what the server says depends on when, not on how many.
func TestHeldRequestToldSomeRetryAftersKeepsItsLimits(t *testing.T) {
	t.Parallel() // virtual time only: runs beside the other simulations
	seeds := propertySeeds(400)
	for seed := 1; seed <= seeds && !t.Failed(); seed++ {
		c := drawHeldCase(uint64(seed))
		c.lAlways, c.lRA, c.lRASome = true, max(c.lRA, 1), true
		on := runHeldCase(t, c, StormControl{}, false)
		if on.attempts > c.lPol.MaxRetries+1 {
			t.Errorf("seed %d: %d attempts, MaxRetries %d: %v", seed, on.attempts, c.lPol.MaxRetries, on.sends)
		}
		if c.lDeadline > 0 && on.end > c.lDeadline {
			t.Errorf("seed %d: ended at %v, past its deadline %v", seed, on.end, c.lDeadline)
		}
		for i, until := range on.toldUntil {
			if i+1 < len(on.sends) && on.sends[i+1] < until {
				t.Errorf("seed %d: attempt %d went at %v, before the Retry-After's end %v\n%v", seed, i+2, on.sends[i+1], until, on.events)
			}
		}
	}
}

// heldOutcome is what became of L in one run.
type heldOutcome struct {
	end       time.Duration
	attempts  int
	status    int
	err       string
	sends     []time.Duration
	toldUntil []time.Duration // per failure of L, when the Retry-After it carried ends; zero when none
	events    []string
}

// heldCase is one random scenario: L's Policy, start and deadline, the
// host's outages, and the background traffic.
type heldCase struct {
	seed      uint64
	lPol      Policy
	lStart    time.Duration
	lDeadline time.Duration
	lAlways   bool // L always gets 503 (path-specific)
	lRA       int  // L's 503s carry Retry-After: lRA (0: none)
	lRASome   bool // only those in even seconds of the run do
	lat       time.Duration
	downs     [][2]time.Duration
	nBg       int
	bgPol     Policy
	noise     int           // percent of random failures for background
	bgAfter   time.Duration // the background starts no earlier
}

// drawHeldCase draws the scenario of a seed.
func drawHeldCase(seed uint64) heldCase {
	r := rand.New(rand.NewPCG(seed, 99))
	c := heldCase{seed: seed}
	c.lPol = Policy{MaxRetries: 1 + r.IntN(8), BaseDelay: time.Duration(1+r.IntN(400)) * time.Millisecond, MaxDelay: time.Duration(50+r.IntN(3000)) * time.Millisecond, Jitter: JitterNone}
	c.lStart = time.Duration(r.IntN(3000)) * time.Millisecond
	if r.IntN(2) == 0 {
		c.lDeadline = time.Duration(100+r.IntN(6000)) * time.Millisecond
	}
	c.lAlways = r.IntN(3) == 0
	if r.IntN(5) == 0 {
		c.lRA = 1 + r.IntN(2)
	}
	switch r.IntN(3) {
	case 0:
		c.lat = 0
	case 1:
		c.lat = time.Duration(1+r.IntN(20)) * time.Millisecond
	case 2:
		c.lat = time.Duration(50+r.IntN(400)) * time.Millisecond
	}
	t := time.Duration(0)
	for range 1 + r.IntN(3) {
		a := t + time.Duration(r.IntN(2000))*time.Millisecond
		b := a + time.Duration(100+r.IntN(4000))*time.Millisecond
		c.downs = append(c.downs, [2]time.Duration{a, b})
		t = b
	}
	c.nBg = 1 + r.IntN(40)
	c.bgPol = Policy{MaxRetries: 1 + r.IntN(8), BaseDelay: time.Duration(1+r.IntN(300)) * time.Millisecond, MaxDelay: time.Duration(50+r.IntN(3000)) * time.Millisecond, Jitter: Jitter(r.IntN(4))}
	c.noise = r.IntN(3) * 20
	return c
}

// down reports whether the host is down at at.
func (c heldCase) down(at time.Duration) bool { return inWindows(c.downs, at) }

// downTime returns how long the host is down in all.
func (c heldCase) downTime() (total time.Duration) {
	for _, w := range c.downs {
		total += w[1] - w[0]
	}
	return total
}

// inWindows reports whether at falls in one of the windows [from, to).
func inWindows(windows [][2]time.Duration, at time.Duration) bool {
	for _, w := range windows {
		if at >= w[0] && at < w[1] {
			return true
		}
	}
	return false
}

// runHeldCase runs c with storm, in a synctest bubble; with lFast, L's
// attempts take 1 ms whatever the others' take.
func runHeldCase(t *testing.T, c heldCase, storm StormControl, lFast bool) (res heldOutcome) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		r := rand.New(rand.NewPCG(c.seed, 7))
		var rmu sync.Mutex
		rint := func(n int) int { rmu.Lock(); defer rmu.Unlock(); return r.IntN(n) }
		var mu sync.Mutex
		base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
			isL := req.Header.Get("X-Who") == "L"
			if isL {
				mu.Lock()
				res.sends = append(res.sends, time.Since(t0))
				mu.Unlock()
			}
			lat := c.lat
			if isL && lFast {
				lat = time.Millisecond
			}
			if lat > 0 {
				tm := time.NewTimer(lat)
				select {
				case <-req.Context().Done():
					tm.Stop()
					return nil, req.Context().Err()
				case <-tm.C:
				}
			}
			at := time.Since(t0)
			if isL {
				if c.lAlways || c.down(at) {
					resp, until := response(503, "x"), time.Duration(0)
					if c.lRA > 0 && (!c.lRASome || at/time.Second%2 == 0) {
						resp.Header.Set("Retry-After", strconv.Itoa(c.lRA))
						until = at + time.Duration(c.lRA)*time.Second
					}
					mu.Lock()
					res.toldUntil = append(res.toldUntil, until)
					mu.Unlock()
					return resp, nil
				}
				return response(200, "ok"), nil
			}
			if c.down(at) {
				if rint(2) == 0 {
					return nil, syscall.ECONNRESET
				}
				return response(503, "x"), nil
			}
			if c.noise > 0 && rint(100) < c.noise {
				return response(503, "x"), nil
			}
			return response(200, "ok"), nil
		})
		tr := &Transport{Base: base, Policy: c.bgPol, Storm: storm, Random: seeded(c.seed),
			OnRetry: func(e RetryEvent) {
				if e.Request.Header.Get("X-Who") == "L" {
					mu.Lock()
					res.events = append(res.events, fmt.Sprintf("retry a%d %v wait %v held %v", e.Attempt, time.Since(t0), e.Wait, e.Held))
					mu.Unlock()
				}
			},
			OnGiveUp: func(e RetryEvent) {
				if e.Request.Header.Get("X-Who") == "L" {
					mu.Lock()
					res.events = append(res.events, fmt.Sprintf("giveup a%d %v stop %v held %v", e.Attempt, time.Since(t0), e.Stop, e.Held))
					mu.Unlock()
				}
			},
		}
		var wg sync.WaitGroup
		for i := range c.nBg {
			start := c.bgAfter + time.Duration(rint(5000))*time.Millisecond
			calls := 1 + rint(5)
			pause := time.Duration(rint(400)) * time.Millisecond
			wg.Go(func() {
				time.Sleep(start) // virtual: synctest's clock
				for range calls {
					req := httptest.NewRequest("GET", "http://h/", nil)
					req.Header.Set("X-Who", strconv.Itoa(i))
					if resp, err := tr.RoundTrip(req); err == nil {
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
					time.Sleep(pause) // virtual: synctest's clock
				}
			})
		}
		wg.Go(func() {
			time.Sleep(c.lStart) // virtual: synctest's clock
			ctx := WithPolicy(context.Background(), c.lPol)
			cancel := context.CancelFunc(func() {})
			if c.lDeadline > 0 {
				ctx, cancel = context.WithTimeout(ctx, c.lDeadline)
			}
			defer cancel()
			req := httptest.NewRequest("GET", "http://h/", nil).WithContext(ctx)
			req.Header.Set("X-Who", "L")
			resp, err := tr.RoundTrip(req)
			res.end = time.Since(t0) - c.lStart
			if err != nil {
				res.err = err.Error()
			} else {
				res.status = resp.StatusCode
				resp.Body.Close()
			}
		})
		wg.Wait()
		res.attempts = len(res.sends)
		if s := tr.StormState(); s.Hosts != 0 || s.Retrying != 0 || s.Held != 0 {
			t.Errorf("seed %d: state left %+v", c.seed, s)
		}
	})
	return res
}
