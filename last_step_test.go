package httpretry

import (
	"context"
	"net/http"
	"testing"
	"testing/synctest"
	"time"
)

// TestStepNotTakenForTheLastHasItsNextWithinMaxElapsed (CI's find, the
// random traffic's seed 68): a held request whose step is not its last
// skips it, and its next step must come before MaxElapsed's end, as it is
// sent there when it is the last. The Retry-After floor that waits until
// a named moment is longer from an earlier end, and its spread is too:
// checked only from the end of an attempt as long as the host's longest
// (skipTimes.fit), the step after a skipped one went up to 7 ms past
// MaxElapsed.
func TestStepNotTakenForTheLastHasItsNextWithinMaxElapsed(t *testing.T) {
	ms := time.Millisecond
	var notLast int
	for at := 100 * ms; at <= 600*ms; at += 5 * ms {
		for _, u := range []float64{0, 0.5, 0.7, 0.99} {
			for _, named := range []time.Duration{0, 1262 * ms} {
				synctest.Test(t, func(t *testing.T) {
					tr := &Transport{Random: func() float64 { return u }, MaxElapsed: 1302 * ms}
					st := tr.ownStorm()
					start := time.Now()
					req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://h.test/", nil)
					m := st.failed("h.test", nil, failure{first: true, at: start.Add(100 * ms), sent: start})
					m.policy = Policy{MaxRetries: 2, BaseDelay: 89 * ms, MaxDelay: 1710 * ms, Jitter: JitterDecorrelated}
					m.took = attemptTime{avg: 269 * ms, longest: 269 * ms, timed: true}
					r := &retrier{t: tr, req: req, st: st, m: m, pol: &m.policy, start: start, prev: 89 * ms}
					skip := skipTimes{fit: 269*ms + drainTimeout, floor: 300 * ms}
					if named > 0 {
						skip.named = start.Add(named)
					}
					step := start.Add(at)
					if !r.lastStep(1, step, &skip) {
						notLast++
						if next, _ := r.nextStep(step, skip, 0, false); !next.at().Before(r.limit()) {
							t.Errorf("step at %v (u %v, named %v) not the last, but the next comes at %v, at or past MaxElapsed (%v)", at, u, named, next.at().Sub(start), tr.MaxElapsed)
						}
					}
					st.end(m, false)
				})
			}
		}
	}
	if notLast == 0 {
		t.Fatal("every step was the last: the grid checks nothing")
	}
}

// TestStepPutOffKeepsTheNextWithinMaxElapsed: a held step that is owed
// (see host.owes) and not its last is put off only so far that the step
// after it still fits MaxElapsed, or not at all. Put off by the base
// delay, as far as full jitter's small draws and no Retry-After floor
// allowed, it came past MaxElapsed's end and was sent there (a review's
// find: MaxElapsed 1.29 s, the retry at 1.300 s).
func TestStepPutOffKeepsTheNextWithinMaxElapsed(t *testing.T) {
	ms := time.Millisecond
	var put int
	for at := 100 * ms; at <= 1300*ms; at += 5 * ms {
		for _, u := range []float64{0, 0.2, 0.5, 0.99} {
			for _, jitter := range []Jitter{JitterFull, JitterDecorrelated, JitterNone} {
				synctest.Test(t, func(t *testing.T) {
					tr := &Transport{Random: func() float64 { return u }, MaxElapsed: 1302 * ms}
					st := tr.ownStorm()
					start := time.Now()
					req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://h.test/", nil)
					m := st.failed("h.test", nil, failure{first: true, at: start.Add(ms), sent: start})
					m.policy, m.n = Policy{Jitter: jitter}, 1 // its first retry is due
					m.took = attemptTime{avg: ms, longest: ms, timed: true}
					r := &retrier{t: tr, req: req, st: st, m: m, pol: &m.policy, start: start}
					step, skip := start.Add(at), skipTimes{}
					for putOffs := range 3 {
						if r.lastStep(1, step, &skip) {
							break // the last: see TestLastStepPutOffEndsWithinItsLimits
						}
						next, owed := r.nextStep(step, skip, putOffs, true)
						if !owed {
							break
						}
						put++
						if !next.at().Before(r.limit()) {
							t.Errorf("step at %v (u %v, %v) put off a %d-th time to %v, at or past MaxElapsed (%v)", at, u, jitter, putOffs+1, next.at().Sub(start), tr.MaxElapsed)
						}
						step = next.at()
					}
					st.end(m, false)
				})
			}
		}
	}
	if put == 0 {
		t.Fatal("no step was put off: the grid checks nothing")
	}
}

// TestLastStepPutOffEndsWithinItsLimits: a held request's last step, owed
// (see host.owes), is put off as its other steps are, and stays its last:
// only so far that its attempt, as long as the host's longest and its
// drain, still ends before MaxElapsed, and its step within plain
// backoff's longest life from the request's first failure; otherwise not
// at all, and it goes at its time.
func TestLastStepPutOffEndsWithinItsLimits(t *testing.T) {
	ms := time.Millisecond
	lives := []struct {
		pol        Policy
		maxElapsed time.Duration
	}{
		{Policy{MaxRetries: 2}, 1302 * ms},                                  // MaxElapsed ends it
		{Policy{MaxRetries: 2, BaseDelay: 100 * ms, MaxDelay: 300 * ms}, 0}, // plain backoff's life: 600 ms from its first failure
	}
	var put, refused int
	for _, life := range lives {
		for at := 100 * ms; at <= 1300*ms; at += 25 * ms {
			for _, u := range []float64{0, 0.5, 0.99} {
				synctest.Test(t, func(t *testing.T) {
					tr := &Transport{Random: func() float64 { return u }, MaxElapsed: life.maxElapsed}
					st := tr.ownStorm()
					start := time.Now()
					req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://h.test/", nil)
					m := st.failed("h.test", nil, failure{first: true, at: start.Add(ms), sent: start})
					m.policy, m.n = life.pol, life.pol.retries() // its last retry is due
					m.took = attemptTime{avg: ms, longest: ms, timed: true}
					r := &retrier{t: tr, req: req, st: st, m: m, pol: &m.policy, start: start}
					n := putOffLastStep(t, r, start.Add(at), skipTimes{fit: ms + drainTimeout}, 4)
					if put += n; n < 4 {
						refused++
					}
					st.end(m, false)
				})
			}
		}
	}
	if put == 0 || refused == 0 {
		t.Fatalf("%d last steps put off, %d refused: the grid checks one side only", put, refused)
	}
}

// TestLastStepByTheLimitPutOffStaysTheLast: as
// TestLastStepPutOffEndsWithinItsLimits, for a step that is the last
// because the next would end past the deadline or MaxElapsed, not by
// MaxRetries: put off, it is still the last, its attempt ends before the
// limit, it comes later than it was, and within plain backoff's life.
// Its next put-off waits the backoff of a step more, which is what made
// it the last, so that it is put off once at most (a review's grid).
func TestLastStepByTheLimitPutOffStaysTheLast(t *testing.T) {
	ms := time.Millisecond
	var put, refused, lastByLimit int
	for _, jitter := range []Jitter{JitterFull, JitterEqual, JitterDecorrelated, JitterNone} {
		for _, byDeadline := range []bool{false, true} {
			for at := 100 * ms; at <= 1300*ms; at += 20 * ms {
				for _, u := range []float64{0, 0.5, 0.99, 1} {
					synctest.Test(t, func(t *testing.T) {
						tr := &Transport{Random: func() float64 { return u }}
						start, ctx := time.Now(), context.Background()
						if byDeadline {
							var cancel context.CancelFunc
							ctx, cancel = context.WithDeadline(ctx, start.Add(1302*ms))
							defer cancel()
						} else {
							tr.MaxElapsed = 1302 * ms
						}
						st := tr.ownStorm()
						req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://h.test/", nil)
						m := st.failed("h.test", nil, failure{first: true, at: start.Add(ms), sent: start})
						m.policy, m.n = Policy{MaxRetries: 6, Jitter: jitter, BaseDelay: 100 * ms, MaxDelay: 2 * time.Second}, 2
						m.took, m.drift = attemptTime{avg: 30 * ms, longest: 30 * ms, timed: true}, 7*ms
						r := &retrier{t: tr, req: req, st: st, m: m, pol: &m.policy, start: start, prev: 50 * ms}
						defer st.end(m, false)
						step, skip := start.Add(at), skipTimes{fit: 30*ms + drainTimeout, announced: 2 * ms}
						if !r.lastStep(r.step(), step, &skip) {
							return
						}
						lastByLimit++
						n := putOffLastStep(t, r, step, skip, 6)
						if n > 1 {
							t.Errorf("step at %v (u %v, %v) put off %d times", at, u, jitter, n)
						}
						if put += n; n < 6 {
							refused++
						}
					})
				}
			}
		}
	}
	if put == 0 || refused == 0 {
		t.Fatalf("of %d last steps, %d put off, %d refused: the grid checks one side only", lastByLimit, put, refused)
	}
}

// putOffLastStep puts off r's last step, due at step, as hold does, up to
// tries times or until it may not be, checking each put-off: still the
// last, later than before, its attempt ending within the limits, and
// within plain backoff's life from the request's first failure. It
// returns how many times the step was put off.
func putOffLastStep(t *testing.T, r *retrier, step time.Time, skip skipTimes, tries int) (put int) {
	t.Helper()
	_, most := r.pol.bounds()
	for put < tries {
		next, owed := r.nextStep(step, skip, put, true)
		if !owed {
			break
		}
		switch at := next.at().Sub(r.start); {
		case !r.lastStep(r.step(), next.at(), &skip):
			t.Errorf("put off to %v: no longer the last", at)
		case !next.at().After(step):
			t.Errorf("put off to %v: not after %v", at, step.Sub(r.start))
		case r.pastLimits(next.at().Add(skip.fit+skip.announced)) != StopNone:
			t.Errorf("put off to %v: its attempt ends past the limit", at)
		case next.at().After(r.m.firstFailed.Add(times(r.step(), most))):
			t.Errorf("put off to %v: past plain backoff's life", at)
		}
		step, put = next.at(), put+1
	}
	return put
}
