package httpretry

import (
	"context"
	"net/http"
	"slices"
	"strconv"
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

// TestHeldStepThatWentLaterThanItsNextBackoffIsFittedWithTheDriftItAdds
// (a review's find):
// a held request 300 ms ahead of plain backoff (drift, the drains of the
// steps it skipped) whose step went 500 ms late: plain backoff's attempt
// went 200 ms before this one and failed 200 ms before, and its next
// wait, 200 ms, ends now. With 200 ms left plain backoff retries at
// once; plan fitted the wait (0) with the drift as it was, before the
// 300 ms this step's lateness takes off it (as cutShort fits it), and
// gave up, StopDeadline: a retry plain backoff sends, dropped.
func TestHeldStepThatWentLaterThanItsNextBackoffIsFittedWithTheDriftItAdds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := &Transport{Random: func() float64 { return 0.5 }}
		st := tr.ownStorm()
		now := time.Now()
		ctx, cancel := context.WithDeadline(context.Background(), now.Add(200*time.Millisecond))
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://h.test/", nil)
		sent := now.Add(-time.Millisecond)
		m := st.failed("h.test", nil, failure{first: true, at: sent.Add(-time.Second), sent: sent.Add(-time.Second)})
		m.policy = Policy{MaxRetries: 5, BaseDelay: 200 * time.Millisecond, MaxDelay: 200 * time.Millisecond, Jitter: JitterNone}
		m.drift, m.late = 300*time.Millisecond, 500*time.Millisecond
		r := &retrier{t: tr, req: req, st: st, m: m, pol: &m.policy, sent: sent, prev: 200 * time.Millisecond}
		body := requestBody{kind: bodyNone}
		wait, stop := r.plan(&body, response(503, ""), nil, 2)
		if stop != StopNone || wait != 0 || m.drift != 0 {
			t.Errorf("plan: wait %v, stop %v, drift %v; want a retry at once, level with plain backoff's (drift 0)", wait, stop, m.drift)
		}
		st.end(m, false)
	})
}

// planHeld drives plan for retry 2 of a request with drift d and late set,
// as TestHeldStepThatWentLaterThanItsNextBackoffIsFittedWithTheDriftItAdds
// does: drawn is its backoff (JitterNone, base = max), ra a Retry-After in
// seconds (0: none), u every Random value, left the time to its deadline.
func planHeld(t *testing.T, d, late, drawn time.Duration, ra int, u float64, left time.Duration) (wait time.Duration, stop StopReason, drift time.Duration) {
	synctest.Test(t, func(t *testing.T) {
		tr := &Transport{Random: func() float64 { return u }}
		st := tr.ownStorm()
		now := time.Now()
		ctx, cancel := context.WithDeadline(context.Background(), now.Add(left))
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://h.test/", nil)
		sent := now.Add(-time.Millisecond)
		m := st.failed("h.test", nil, failure{first: true, at: sent.Add(-time.Second), sent: sent.Add(-time.Second)})
		m.policy = Policy{MaxRetries: 5, BaseDelay: drawn, MaxDelay: drawn, Jitter: JitterNone}
		m.drift, m.late = d, late
		r := &retrier{t: tr, req: req, st: st, m: m, pol: &m.policy, sent: sent, prev: drawn}
		body := requestBody{kind: bodyNone}
		resp := response(503, "")
		if ra > 0 {
			resp.Header.Set("Retry-After", strconv.Itoa(ra))
		}
		wait, stop = r.plan(&body, resp, nil, 2)
		drift = m.drift
		st.end(m, false)
	})
	return wait, stop, drift
}

// TestPlanAgainstPlainBackoffGrid (a review's check): over a grid of drifts, lateness,
// backoffs, Retry-Afters, spreads and deadlines, plan's decision for a
// held request against plain backoff's on the same outcome. Plain
// backoff's attempt failed at now-late+d (the held step was due at now-late,
// plain's d after it); it retries iff its wait, max(drawn, spread), ends
// before the deadline. The held request waits its own backoff from its
// step, and a Retry-After from now, or from a step that went early, up to
// plain backoff's next retry (see toldWait). plan must never start a wait that ends at or past
// the deadline (its own, or plain backoff's: a retry more), and must not
// stop where both its own wait and plain backoff's end inside.
func TestPlanAgainstPlainBackoffGrid(t *testing.T) {
	t.Parallel() // virtual time only: runs beside the other simulations
	ms := time.Millisecond
	var cases, held, aheadStops, heldOnly int
	for _, d := range []time.Duration{-300 * ms, 0, 100 * ms, 300 * ms, 700 * ms} {
		for _, late := range []time.Duration{-400 * ms, -100 * ms, 0, 100 * ms, 300 * ms, 500 * ms, 900 * ms} {
			for _, drawn := range []time.Duration{200 * ms, 600 * ms} {
				for _, ra := range []int{0, 1} {
					for _, u := range []float64{0, 0.5, 0.99} {
						if ra == 0 && u != 0 {
							continue
						}
						for left := 50 * ms; left <= 2500*ms; left += 50 * ms {
							cases++
							spread := time.Duration(0)
							if ra > 0 {
								spread = spreadUp(time.Duration(ra)*time.Second, u)
							}
							plainEnd := -late + d + max(drawn, spread) // from now
							heldEnd := max(max(drawn-late, 0), spread)
							if ra > 0 { // waited from the step when it went early, up to plain backoff's next
								heldEnd = max(heldEnd, min(spread-min(late, 0), plainEnd))
							}
							wait, stop, _ := planHeld(t, d, late, drawn, ra, u, left)
							plainRetries := plainEnd < left
							heldFits := heldEnd < left
							switch {
							case stop == StopNone && wait != heldEnd:
								t.Errorf("d %v late %v drawn %v ra %d u %v left %v: wait %v, want %v", d, late, drawn, ra, u, left, wait, heldEnd)
							case stop == StopNone && !(heldFits && plainRetries):
								t.Errorf("d %v late %v drawn %v ra %d u %v left %v: waits %v; plain ends %v from now: a wait past the deadline or a retry more", d, late, drawn, ra, u, left, wait, plainEnd)
							case stop != StopNone && heldFits && plainRetries:
								t.Errorf("d %v late %v drawn %v ra %d u %v left %v: %v; its wait %v and plain's (%v from now) fit", d, late, drawn, ra, u, left, stop, heldEnd, plainEnd)
							case stop != StopNone && plainRetries:
								heldOnly++ // its own wait does not fit, plain backoff's does: it runs behind plain backoff
								if heldEnd <= plainEnd {
									t.Errorf("d %v late %v drawn %v ra %d u %v left %v: stops, its wait %v past, plain's %v inside", d, late, drawn, ra, u, left, heldEnd, plainEnd)
								}
								if ra > 0 && d >= 0 && late <= d {
									aheadStops++
								}
							case stop == StopNone:
								held++
							}
						}
					}
				}
			}
		}
	}
	t.Logf("%d cases; %d retried; %d stopped only for the held request's own wait, behind plain backoff's (%d of them with d >= 0 and late <= d)", cases, held, heldOnly, aheadStops)
}

// TestEarlyLastStepToldARetryAfterEndsThere: a held request counted two
// steps skipped before any of its attempts was timed (untimed), each
// standing for an attempt that took no time; its retry, 300 ms long,
// failed with 700 ms left to the deadline. Its steps ran 600 ms ahead of
// plain backoff's, so
// the retry it just sent was plain backoff's last (600 ms and a 200 ms
// backoff end past the deadline). Told no Retry-After, it goes again when
// plain backoff sends that last retry; told one, that retry would wait it
// out a whole Retry-After after plain backoff's last, so the request ends
// now, StopHostGate.
func TestEarlyLastStepToldARetryAfterEndsThere(t *testing.T) {
	for _, ra := range []int{0, 1} {
		synctest.Test(t, func(t *testing.T) {
			tr := &Transport{Random: func() float64 { return 0.5 }}
			st := tr.ownStorm()
			now := time.Now()
			ctx, cancel := context.WithDeadline(context.Background(), now.Add(700*time.Millisecond))
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://h.test/", nil)
			sent := now.Add(-300 * time.Millisecond)
			m := st.failed("h.test", nil, failure{first: true, at: now, sent: sent})
			m.policy = Policy{MaxRetries: 5, BaseDelay: 200 * time.Millisecond, MaxDelay: 200 * time.Millisecond, Jitter: JitterNone}
			m.untimed = 2
			r := &retrier{t: tr, req: req, st: st, m: m, pol: &m.policy, sent: sent, prev: 200 * time.Millisecond}
			resp := response(503, "")
			if ra > 0 {
				resp.Header.Set("Retry-After", strconv.Itoa(ra))
			}
			body := requestBody{kind: bodyNone}
			wait, stop := r.plan(&body, resp, nil, 2)
			switch {
			case ra > 0 && (stop != StopHostGate || wait != 0):
				t.Errorf("told Retry-After: %d: wait %v, stop %v; want an end now, StopHostGate", ra, wait, stop)
			case ra == 0 && (stop != StopNone || wait != 300*time.Millisecond):
				t.Errorf("told none: wait %v, stop %v; want a retry 300 ms on, when plain backoff sends its last", wait, stop)
			}
			st.end(m, false)
		})
	}
}
