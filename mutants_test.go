package httpretry

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// Behaviour that mutation testing of the storm-control files found
// unasserted (179 mutants, 48 survived at a8811eb): each test fails with
// the mutant named in its comment, the code changed as it says, and
// passes without it.

const msec = time.Millisecond

// manualHost returns a host set holding host "h" with members ms, its
// state set by hand as in wakeup_test.go: not down only once backAt is set.
func manualHost(share float64, ms ...*member) (*hostSet, *host) {
	s := newHostSet(share)
	h := &host{name: "h", share: share, releasedSinceHalved: true, outageStart: t0}
	s.byName.Store("h", h)
	s.active.Add(1)
	for _, m := range ms {
		m.h = h
		h.members = append(h.members, m)
	}
	return s, h
}

// H07 (hostgate.go:182, h.credit = min(h.credit, h.share) deleted): a
// failure halves the share and drops the credit earned above it, as TCP
// drops its window; kept, 3/4 of a release earned before the failure let
// a held retry go at the second answer after it.
func TestAFailureDropsTheCreditAboveTheHalvedShare(t *testing.T) {
	a, b := newMember(), newMember()
	s, h := manualHost(0.25, a, b)
	h.backAt = t0
	h.enqueue(a, place{nextAt: far, spare: true})
	h.credit = 0.75 // three answers' worth: not yet a release
	s.failed("h", b, failure{at: at(1), sent: at(1)})
	h.answered(at(2), "", nil, false, s.share, time.Time{})
	h.answered(at(3), "", nil, false, s.share, time.Time{})
	if a.released {
		t.Error("two answers after a failure released a held retry with credit earned before it")
	}
}

// L16 (line.go:210, h.credit = min(h.credit, 1) deleted): credit is not
// saved up while nobody waits; saved, twelve answers with no one in line
// let one answer release two retries held after them.
func TestCreditIsNotSavedUpWhileNoOneWaits(t *testing.T) {
	a, b, c := newMember(), newMember(), newMember()
	s, h := manualHost(0.25, a, b, c)
	h.backAt = t0
	for i := range 12 {
		h.answered(at(i), "", nil, false, s.share, time.Time{})
	}
	h.enqueue(a, place{nextAt: far, spare: true})
	h.enqueue(b, place{nextAt: far, spare: true})
	h.answered(at(20), "", nil, false, s.share, time.Time{})
	if !a.released {
		t.Fatal("setup: a whole release kept did not let the oldest go")
	}
	if b.released {
		t.Error("one answer released two retries: credit was saved up while no one waited")
	}
}

// H23 (hostgate.go:350, && !h.sheds(m) dropped): an answer to a retry the
// line let go earns two releases more (slow start) only until the host
// sheds; while it fails a share of what it is sent, it earns the share.
func TestNoSlowStartCreditWhileTheHostSheds(t *testing.T) {
	a, b, c := newMember(), newMember(), newMember()
	s, h := manualHost(0.25, a, b, c)
	h.backAt, h.run, h.downSeen = t0, 1, at(5)
	h.sentSinceBack, h.failedSinceBack, h.calm = 10, 10, 0 // back, and failing all it is sent since
	a.fromLine = true                                      // a's retry went from the line; fresh requests have stopped
	h.enqueue(b, place{nextAt: far, spare: true})
	h.enqueue(c, place{nextAt: far, spare: true})
	if !h.sheds(a) {
		t.Fatal("setup: the host does not shed")
	}
	h.answered(at(10), "", a, false, s.share, at(9))
	if b.released || c.released {
		t.Errorf("an answer while the host sheds released %v %v: slow start went on", b.released, c.released)
	}
}

// H25 (hostgate.go:360, h.nudgeHeld(now, true) deleted in the news case):
// the first answer after a failure wakes every held retry it puts in
// grace, not only the first in line.
func TestTheFirstAnswerAfterAFailureWakesEveryRetryItPutsInGrace(t *testing.T) {
	a, c := newMember(), newMember()
	_, h := manualHost(0.01, a, c)
	h.backAt, h.run, h.downSeen = at(-1000), 1, at(-100)
	h.took = attemptTime{avg: msec, timed: true}
	a.downStep, c.downStep = at(0), at(0) // their steps found it down
	h.enqueue(a, place{nextAt: at(1000), spare: true})
	h.enqueue(c, place{nextAt: at(1000), spare: true})
	h.answered(at(20), "", nil, false, 0.25, at(0)) // an attempt sent at their steps answered
	for i, m := range []*member{a, c} {
		if !h.inGrace(m, at(20)) {
			t.Fatalf("setup: %d not in grace", i)
		}
		if !nudged(m) {
			t.Errorf("held retry %d, in grace, was not woken", i)
		}
	}
}

// H27 (hostgate.go:363, h.nudgeHeld(now, true) deleted in the widened
// case) and H33 (hostgate.go:404, || sent.Before(h.upFrom) dropped): a
// slow answer to an attempt sent after the failure but before a held
// step, arriving after an answer to a later attempt, puts that step in
// grace (plain backoff's attempt there would have been answered) and
// wakes its retry.
func TestAnAnswerToAnEarlierAttemptWidensTheGraceAndWakes(t *testing.T) {
	a, b := newMember(), newMember()
	_, h := manualHost(0.01, a, b)
	h.backAt, h.run, h.downSeen = at(-1000), 1, at(-100)
	h.took = attemptTime{avg: msec, timed: true}
	a.downStep = at(0)
	h.enqueue(a, place{nextAt: at(1000), spare: true})
	h.answered(at(60), "", nil, false, 0.25, at(50)) // the first answer after the failure: to an attempt sent after a's step
	if h.inGrace(a, at(100)) {
		t.Fatal("setup: a in grace after an answer to an attempt sent after its step")
	}
	nudged(a)
	h.answered(at(100), "", nil, false, 0.25, at(-50)) // a slow one, sent after the failure and before a's step
	if !h.inGrace(a, at(100)) {
		t.Error("an answer to an attempt sent before a's step, after the failure, did not put a in grace")
	}
	if !nudged(a) {
		t.Error("the answer that put a in grace did not wake it")
	}
}

// H32 (hostgate.go:401, if first -> if false in noteUp): the first answer
// after a failure forgets the answers before it; kept, an answer from an
// earlier up period put every later step in grace.
func TestTheFirstAnswerAfterAFailureForgetsTheAnswersBeforeIt(t *testing.T) {
	a, b := newMember(), newMember()
	_, h := manualHost(0.01, a, b)
	h.backAt, h.run, h.downSeen = at(-3000), 1, at(-100)
	h.upFrom = at(-2010) // it answered an attempt sent then, before the failure
	h.took = attemptTime{avg: msec, timed: true}
	a.downStep = at(0)
	h.enqueue(a, place{nextAt: at(1000), spare: true})
	h.answered(at(20), "", nil, false, 0.25, at(10)) // to an attempt sent after a's step: the host may have come back since it
	if h.inGrace(a, at(20)) {
		t.Error("a step before the attempt answered is in grace by an answer before the failure")
	}
}

// H30 (hostgate.go:388, h.failing.run >= downAfter && dropped) and H31
// (hostgate.go:389, h.failing.path == path && dropped): a return opens a
// shed window only when the outage's latest downAfter failures were on
// the path that answers.
func TestShedWindowOpensOnlyForThePathOfTheOutagesLatestFailures(t *testing.T) {
	for _, c := range []struct {
		name        string
		first, then string // 30 failures on first, then 5 on then ("": none)
		answer      string
		window      bool
	}{
		{"answered on the failing path", "/a", "", "/a", true},
		{"5 latest failures on the path that answers", "/a", "/b", "/b", false},
		{"answered on another path", "/b", "", "/a", false},
	} {
		s := newHostSet(DefaultReleaseShare)
		a := newMember()
		ms := 0
		for i := range 35 {
			p := c.first
			if i >= 30 {
				if c.then == "" {
					break
				}
				p = c.then
			}
			s.failed("h", a, failure{at: at(ms), sent: at(ms), path: p})
			ms++
		}
		h := a.h
		h.answered(at(100), c.answer, nil, false, s.share, at(99))
		if got := !h.shedUntil.IsZero(); got != c.window {
			t.Errorf("%s: shed window %v, want %v", c.name, got, c.window)
		}
	}
}

// L03 (line.go:118, if !m.took.timed -> if false): until one of its own
// attempts is timed, a held request's next attempt and each step it
// skipped are fitted to the deadline as the host's longest.
func TestSkippedStepOfAnUntimedRequestIsFittedAsTheHostsLongest(t *testing.T) {
	a, b := newMember(), newMember()
	_, h := manualHost(0.25, a, b)
	h.took = attemptTime{avg: 10 * msec, longest: 300 * msec, timed: true}
	a.untimed = 2
	if got, want := h.skipTime(a).fit, 3*300*msec+drainTimeout; got != want {
		t.Errorf("fit %v, want %v", got, want)
	}
}

// L07 (line.go:129, if h.windows -> if true): a skipped step waits until
// the latest moment the host named only once its Retry-After is known to
// name a window's end; otherwise another request's far moment put it off.
func TestSkippedStepWaitsForTheMomentNamedOnlyWhenItIsAWindowsEnd(t *testing.T) {
	a, b := newMember(), newMember()
	_, h := manualHost(0.25, a, b)
	h.says = latest{v: time.Second, by: b}
	h.named = at(30_000)
	a.told, a.heeded = failure{at: at(0), floor: time.Second}, time.Second
	if s := h.skipTime(a); !s.named.IsZero() {
		t.Errorf("not a window's end: the step waits until %v", s.named.Sub(t0))
	}
	h.windows = true
	if s := h.skipTime(a); !s.named.Equal(h.named) {
		t.Fatalf("setup: a window's end not waited: %v", s.named)
	}
}

// L11 (line.go:167, max(h.gap, h.pace) -> h.pace): a probe whose request
// ends with no outcome (canceled) still paces the next a gap after it
// went; paced by the failed probes' pace alone (none yet), the next went
// at once.
func TestAProbeThatEndsUnansweredStillPacesTheNextByTheGap(t *testing.T) {
	p, b := newMember(), newMember()
	_, h := manualHost(0.25, p, b)
	h.run, h.downSeen = downAfter, at(-1000)
	h.gaps, h.gap, h.lastFresh = 1, 500*msec, at(-2000) // fresh requests came 500 ms apart, and stopped
	h.probing, h.probedAt = p, at(0)
	h.enqueue(b, place{nextAt: far, spare: true})
	h.heard(p, at(10), false) // p's request ended without an outcome, as its leave reports
	if send, _ := h.poll(b, at(20), false, false); send {
		t.Error("the next probe went 20 ms after the one before, not a gap (500 ms)")
	}
	if next := h.probeAt(b); next.Before(at(500)) {
		t.Errorf("next probe at %v, want 500 ms", next.Sub(t0))
	}
}

// L23 (line.go:243, !h.windows && dropped): a retry told a Retry-After
// that names a rate window's end is not held for being told; its own
// backoff waited it.
func TestRetryToldAWindowsEndIsNotHeldForBeingTold(t *testing.T) {
	s := newHostSet(DefaultReleaseShare)
	a, b := newMember(), newMember()
	s.failed("h", a, failure{first: true, at: at(0), sent: at(0), floor: time.Second})
	s.failed("h", b, failure{first: true, at: at(1000), sent: at(1000), floor: 2 * time.Second}) // sent at the moment named, told a later one
	h := a.h
	if !h.windows || h.provenDown(at(1500)) {
		t.Fatalf("setup: windows %v, proven %v", h.windows, h.provenDown(at(1500)))
	}
	if h.ask(a, false, at(1500)) {
		t.Error("a retry told a window's end, the host not proven down, was held")
	}
}

// L24 (line.go:248, len(h.members) > 1 && dropped): the gate never holds a
// request alone on its host, even on a proven outage (ask; held() in
// TestGateLetsALoneRequestGo polls too, where a lone retry goes at once).
func TestGateNeverHoldsALoneRequest(t *testing.T) {
	_, ms := failing(1)
	h, a := ms[0].h, ms[0]
	if !h.provenDown(at(50)) {
		t.Fatal("setup: not proven down")
	}
	if h.ask(a, false, at(50)) {
		t.Error("a request alone on its host was held")
	}
}

// L34 (line.go:377, h.firstWaiting(now).nudge() deleted in poll): a held
// retry that goes at its step wakes the retry now first in line, whose
// probe is due; otherwise it slept to its own step.
func TestAStepThatGoesWakesTheNextInLineToProbe(t *testing.T) {
	a, b := newMember(), newMember()
	_, h := manualHost(0.25, a, b)
	h.run, h.downSeen = downAfter, at(0)
	h.enqueue(a, place{nextAt: far, spare: true})
	h.enqueue(b, place{nextAt: far, spare: true})
	if send, _ := h.poll(a, at(50), true, true); !send {
		t.Fatal("setup: a did not go at its last step")
	}
	if !nudged(b) {
		t.Error("b, first in line now, its probe due, was not woken")
	} else if send, _ := h.poll(b, at(50), false, false); !send {
		t.Error("b did not go as the line's probe")
	}
}

// L39 (line.go:411, h.windows && h.backAt.IsZero() -> h.windows): the
// line's probe waits for the window's end the host named only while it
// has answered nothing: a quota's host always has its next end ahead.
func TestLineProbesAHostThatAnsweredWithoutWaitingForTheWindowsEnd(t *testing.T) {
	a, b := newMember(), newMember()
	_, h := manualHost(0.25, a, b)
	h.backAt, h.run, h.downSeen = at(-5000), downAfter, at(0)
	h.windows, h.named = true, at(60_000)
	if next := h.probeAt(a); !next.Before(h.named) {
		t.Errorf("probe at %v: gated by the window's end though the host has answered", next.Sub(t0))
	}
	h.backAt = time.Time{}
	if next := h.probeAt(a); !next.Equal(h.named) {
		t.Fatalf("setup: a host that never answered probed at %v", next.Sub(t0))
	}
}

// L40 (line.go:427, && end.After(h.downSeen) dropped): a moment named
// before the latest failed attempt went is not pending: that attempt
// found the host still down after it, and the line does not probe at once.
func TestAMomentNamedBeforeTheLatestFailureIsNotPending(t *testing.T) {
	s := newHostSet(DefaultReleaseShare)
	a, b := newMember(), newMember()
	s.failed("h", a, failure{at: at(0), sent: at(0), floor: 100 * msec})
	s.failed("h", b, failure{at: at(200), sent: at(200)})
	h := a.h
	h.probedAt, h.nextProbe = at(50), at(1200) // the probe before paced the next at 1.2 s
	if p := h.pendingMoment(); !p.IsZero() {
		t.Errorf("pending moment %v, before the latest failure (200 ms)", p.Sub(t0))
	}
	h.enqueue(a, place{nextAt: far, spare: true})
	if send, _ := h.poll(a, at(250), false, false); send {
		t.Error("the line probed at once for a moment a later failure showed gone")
	}
}

// L44 (line.go:457, || h.pathFailed(m) == 0 dropped): a held step goes
// when its path answered after its latest failure, though the host's
// latest failure, once, on another path, and fresh requests still come.
func TestAStepGoesWhenItsPathAnsweredSinceItsLatestFailure(t *testing.T) {
	s := newHostSet(DefaultReleaseShare)
	a, b := newMember(), newMember()
	s.failed("h", b, failure{at: at(0), sent: at(0), path: "/b"})
	s.failed("h", a, failure{at: at(1), sent: at(1), path: "/a"})
	h := a.h
	h.answered(at(10), "/a", nil, false, s.share, at(9))           // /a answers
	s.failed("h", b, failure{at: at(12), sent: at(8), path: "/b"}) // /b fails, an attempt sent before that answer
	h.gaps, h.gap, h.lastFresh = flowGaps, 10*msec, at(11)         // fresh requests coming
	h.enqueue(a, place{nextAt: at(13), spare: true})
	if !h.flowing(at(13)) || h.pathFailed(a) != 0 || h.run == 0 {
		t.Fatal("setup")
	}
	if send, _ := h.poll(a, at(13), true, false); !send {
		t.Error("a step whose path answered since its failure was skipped")
	}
}

// L53 (line.go:575, !now.After(m.downStep.Add(h.took.avg)) || dropped):
// an answer within a failed attempt's time of a held step puts it in
// grace (plain backoff's attempt there might have been answered), even
// when the attempt answered went after the step.
func TestAnAnswerWithinAnAttemptsTimeOfAStepPutsItInGrace(t *testing.T) {
	a, b := newMember(), newMember()
	_, h := manualHost(0.01, a, b)
	h.backAt, h.run, h.downSeen = at(-1000), 1, at(-100)
	h.took = attemptTime{avg: 100 * msec, timed: true}
	a.downStep = at(0)
	h.enqueue(a, place{nextAt: at(1000), spare: true})
	h.answered(at(50), "", nil, false, 0.25, at(10))
	if !h.inGrace(a, at(50)) {
		t.Error("an answer 50 ms after a's step, attempts taking 100 ms, did not put it in grace")
	}
	if send, _ := h.poll(a, at(50), false, false); !send {
		t.Error("a did not go")
	}
}

// H16 (hostgate.go:268, && !sent.Before(h.firstNamed) dropped): only a
// failure of an attempt sent at or after the first moment named shows
// that the host's Retry-After names a wait, not its return.
func TestOnlyAnAttemptSentAfterTheMomentNamedShowsARetryAfterIsAWait(t *testing.T) {
	s := newHostSet(DefaultReleaseShare)
	a, b := newMember(), newMember()
	s.failed("h", a, failure{at: at(0), sent: at(0), floor: time.Second})
	s.failed("h", b, failure{at: at(500), sent: at(400), floor: 2 * time.Second})
	h := a.h
	if h.waits {
		t.Error("a failure sent before the first moment named made the Retry-After a wait")
	}
	s.failed("h", a, failure{at: at(1100), sent: at(1050), floor: 2 * time.Second})
	if !h.waits {
		t.Fatal("setup: one sent after it, told a moment past the grain, did not")
	}
}

// S01 (storm.go:153, !(share > 0) -> share <= 0): a NaN ReleaseShare
// means DefaultReleaseShare, as documented.
func TestNaNReleaseShareMeansTheDefault(t *testing.T) {
	tr := &Transport{Storm: StormControl{ReleaseShare: math.NaN()}}
	if got := tr.ownStorm().hosts.share; got != DefaultReleaseShare {
		t.Errorf("share %v, want %v", got, DefaultReleaseShare)
	}
}

// O24 (hold.go:310, if left.at().Before(now) -> if false): a retry sent
// between steps, still out when the step it left came, waits that step's
// own backoff from its failure, not none.
func TestARetryBetweenStepsStillOutAtItsStepWaitsItsBackoffAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := &Transport{}
		st := tr.ownStorm()
		start := time.Now()
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://h.test/", nil)
		m := st.failed("h.test", nil, failure{first: true, at: start, sent: start})
		m.policy, m.n = Policy{MaxRetries: 5, BaseDelay: 100 * msec, MaxDelay: time.Second}, 2
		m.took = attemptTime{avg: 300 * msec, longest: 300 * msec, timed: true}
		r := &retrier{t: tr, req: req, st: st, m: m, pol: &m.policy, start: start, sent: start}
		m.left = heldStep{from: start, own: 100 * msec} // the step it left came at 100 ms
		wait, stop, set := r.heldWait(start.Add(300*msec), 0, false)
		if !set || stop != StopNone || wait != 100*msec {
			t.Errorf("wait %v (set %v, stop %v), want the step's own 100 ms from the failure", wait, set, stop)
		}
		st.end(m, false)
	})
}

// shedLine builds, in a synctest bubble, request a's retrier on host
// "h.test" with the members b (who fails on) and c (whose probe is out,
// so that a never goes as the line's probe). With back, the host is back
// from a long outage since 1 s ago, a's latest failure before it, and
// fails all it is sent since: it sheds, and a's steps are owed (see
// host.owes). Without, the host is down and proven.
func shedLine(t *testing.T, share float64, pol Policy, back bool) (r *retrier, h *host, b *member, start time.Time) {
	t.Helper()
	tr := &Transport{Storm: StormControl{ReleaseShare: share}, Random: func() float64 { return 0.5 }}
	st := tr.ownStorm()
	start = time.Now()
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://h.test/", nil)
	sec := time.Second
	b = st.failed("h.test", nil, failure{at: start.Add(-10 * sec), sent: start.Add(-10*sec - msec)})
	c := st.failed("h.test", nil, failure{at: start.Add(-10 * sec), sent: start.Add(-10*sec - msec)})
	for i := range 40 {
		st.failed("h.test", b, failure{at: start.Add(-10*sec + time.Duration(i+1)*msec), sent: start.Add(-10*sec + time.Duration(i)*msec)})
	}
	a := st.failed("h.test", nil, failure{at: start.Add(-2 * sec), sent: start.Add(-2*sec - msec)})
	h = a.h
	if back {
		h.answered(start.Add(-sec), "", nil, false, st.hosts.share, time.Time{}) // back: its shed window lasts to 8 s
		for i := range 3 {
			st.failed("h.test", b, failure{at: start.Add(-500*msec + time.Duration(i)*msec), sent: start.Add(-510*msec + time.Duration(i)*msec)})
		}
	} else {
		st.failed("h.test", b, failure{at: start.Add(-msec), sent: start.Add(-2 * msec)}) // news newer than a's
	}
	h.probing = c
	a.policy, a.n = pol, 1
	r = &retrier{t: tr, req: req, st: st, m: a, pol: &a.policy, start: start.Add(-2 * sec), prev: pol.BaseDelay}
	if !h.ask(a, false, start) {
		t.Fatal("setup: a is not held")
	}
	return r, h, b, start
}

// holdAsync runs r.hold in the bubble; done is closed when it returns.
func holdAsync(r *retrier, due time.Time) (ctx context.Context, cancel func(), done chan struct{}) {
	ctx, cancel = context.WithCancel(context.Background())
	done = make(chan struct{})
	go func() {
		defer close(done)
		r.hold(ctx, due)
	}()
	return ctx, cancel, done
}

func returned(done chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// O08 (hold.go:69, p.owed = owed deleted): a held step put off (owed)
// may be let go by the line's credit before the step it was put off to,
// as that step, though it has no skipped step to stand for.
func TestAPutOffStepMayBeReleasedBeforeItComes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, h, _, start := shedLine(t, 0, Policy{MaxRetries: 10, BaseDelay: 100 * msec, MaxDelay: 10 * time.Second, Jitter: JitterNone}, true)
		_, cancel, done := holdAsync(r, start)
		defer cancel()
		time.Sleep(10 * msec)
		synctest.Wait()
		h.mu.Lock()
		owed, next := r.m.owed, r.m.nextAt
		h.credit = 1
		h.release(time.Now())
		h.mu.Unlock()
		synctest.Wait()
		if !owed || !next.Equal(start.Add(100*msec)) {
			t.Fatalf("setup: owed %v, step at %v; want put off to 100 ms", owed, next.Sub(start))
		}
		if !returned(done) {
			t.Error("a release did not let a step put off go")
		}
		cancel()
		<-done
	})
}

// O07 (hold.go:66, putOffs++ deleted): a step put off again waits the
// backoff of a step more each time (100 ms, then 200 ms), so that a long
// shed window puts it off a few times, not once each base delay.
func TestAStepPutOffAgainWaitsALongerBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, h, b, start := shedLine(t, 0, Policy{MaxRetries: 10, BaseDelay: 100 * msec, MaxDelay: 10 * time.Second, Jitter: JitterNone}, true)
		_, cancel, done := holdAsync(r, start)
		defer cancel()
		time.Sleep(50 * msec)
		now := time.Now()
		r.st.hosts.failed("h.test", b, failure{at: now, sent: now.Add(-10 * msec)}) // news newer than a's: its step at 100 ms is not stale
		time.Sleep(100 * msec)
		synctest.Wait()
		h.mu.Lock()
		owed, next := r.m.owed, r.m.nextAt
		h.mu.Unlock()
		if !owed || !next.Equal(start.Add(300*msec)) {
			t.Errorf("owed %v, step at %v; want put off again, 200 ms after 100 ms", owed, next.Sub(start))
		}
		cancel()
		<-done
	})
}

// O05 (hold.go:56, last && !owes -> last): a held request's last step,
// owed and able to be put off within its limits, is put off as the others
// are, not sent at its time into a host at its capacity.
func TestAnOwedLastStepIsPutOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, h, b, start := shedLine(t, 0.01, Policy{MaxRetries: 2, BaseDelay: 100 * msec, MaxDelay: 10 * time.Second, Jitter: JitterNone}, false)
		_, cancel, done := holdAsync(r, start)
		defer cancel()
		time.Sleep(10 * msec)
		synctest.Wait() // step 1 skipped, the host down: step 2 is the last
		now := time.Now()
		h.answered(now, "", nil, false, r.st.hosts.share, time.Time{}) // back, the outage long: a shed window opens
		for i := range 3 {                                             // failing what it is sent since: it sheds
			ft := now.Add(time.Duration(i+1) * msec)
			r.st.hosts.failed("h.test", b, failure{at: ft, sent: ft.Add(-msec / 2)})
		}
		synctest.Wait()
		h.mu.Lock()
		last, step := r.m.last, r.m.nextAt
		h.mu.Unlock()
		if !last || r.m.skipped != 1 {
			t.Fatalf("setup: last %v, skipped %d", last, r.m.skipped)
		}
		if !h.owes(r.m, step) {
			t.Fatal("setup: the last step is not owed")
		}
		time.Sleep(time.Until(step) + 10*msec)
		synctest.Wait()
		if returned(done) {
			t.Error("the owed last step went at its time")
		}
		cancel()
		<-done
	})
}

// O02 (hold.go:25, m.h.abandon(m, due) deleted): a request held before,
// its step come and not held now, leaves the line as its retry goes: a
// release then goes to the next in line, not to the retry already out.
func TestARetryNotHeldLeavesTheLine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := &Transport{}
		st := tr.ownStorm()
		start := time.Now()
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://h.test/", nil)
		a := st.failed("h.test", nil, failure{at: start.Add(-time.Second), sent: start.Add(-time.Second - msec)})
		b := st.failed("h.test", nil, failure{at: start.Add(-time.Second), sent: start.Add(-time.Second - msec)})
		h := a.h
		h.answered(start.Add(-500*msec), "", nil, false, st.hosts.share, time.Time{}) // the host answers: nothing held
		a.policy, a.n = Policy{MaxRetries: 5, BaseDelay: 100 * msec}, 1
		a.inLine = true
		h.enqueue(a, place{nextAt: start, ownWait: true}) // waited in line to its step, as waitInLine leaves it
		h.enqueue(b, place{nextAt: far, spare: true})
		r := &retrier{t: tr, req: req, st: st, m: a, pol: &a.policy, start: start.Add(-time.Second)}
		if held, stop := r.hold(context.Background(), start); held || stop != StopNone {
			t.Fatalf("setup: held %v, stop %v", held, stop)
		}
		h.mu.Lock()
		h.credit = 1 // a release, a's retry out
		h.release(start)
		h.mu.Unlock()
		if a.released || !b.released {
			t.Errorf("the release went to a (%v), whose retry is out, not to b (%v), held", a.released, b.released)
		}
		st.end(a, false)
		st.end(b, false)
	})
}

// B04 (budget.go:107, laterOf(b.last, now) -> now): a call with an older
// clock earns nothing and does not move the refill's time back, so that
// the next call does not earn that second again.
func TestBudgetAnOlderClockDoesNotCountTwice(t *testing.T) {
	b := &Budget{Reserve: 10, Ratio: -1}
	b.add(0, t0)
	for range 50 {
		b.take(t0)
	}
	b.add(0, t0.Add(-time.Second)) // a caller racing with an older clock
	if got := b.available(t0); got != 50 {
		t.Errorf("tokens %v, want 50: the second before was earned again", got)
	}
}

// B05 (budget.go:123, min(v, math.MaxFloat32) -> v): an infinite Reserve
// is made finite, so that no time elapsed (a zero count) earns nothing
// rather than NaN tokens.
func TestBudgetInfiniteReserveNeverMakesNaN(t *testing.T) {
	b := &Budget{Reserve: math.Inf(1)}
	b.add(0, t0)
	if got := b.available(t0); got != DefaultBudgetBurst {
		t.Errorf("tokens %v, want %v", got, DefaultBudgetBurst)
	}
}

// H10 (hostgate.go:214, || h.down() != wasDown dropped): a failure that
// makes the host down, so that the first in line, told a Retry-After that
// would now end past its step, may no longer go, wakes the next, which
// may: it is first in line now.
func TestAFailureThatMakesTheHostDownWakesTheNewFirstInLine(t *testing.T) {
	a, b, c := newMember(), newMember(), newMember()
	s, h := manualHost(0.25, a, b, c)
	h.backAt, h.run = t0, downAfter-1
	h.gaps, h.gap, h.lastFresh = flowGaps, 10*msec, at(-10_000) // fresh requests stopped long ago
	h.says = latest{v: time.Second, by: c}
	h.failing = pathRun{run: 5}
	a.told, a.heeded = failure{at: at(0), floor: time.Second}, time.Second
	h.enqueue(a, place{nextAt: at(500), spare: true})
	h.enqueue(b, place{nextAt: far, spare: true})
	if h.firstWaiting(at(10)) != a {
		t.Fatal("setup: a is not first in line")
	}
	s.failed("h", c, failure{at: at(10), sent: at(9), floor: time.Second}) // the 16th in a row: down
	if !h.down() || h.firstWaiting(at(10)) != b {
		t.Fatal("setup: b is not first in line now")
	}
	if !nudged(b) {
		t.Error("b, first in line once the host is down, was not woken")
	}
}

// C09 (hostgate.go:45, retryAfterGrain = time.Second -> time.Millisecond):
// moments named less than a grain (a second) apart, as dates read against
// whole-second Date headers are, name one return, not a rate window's
// ends.
func TestMomentsNamedWithinAGrainAreNotAWindowsEnds(t *testing.T) {
	s := newHostSet(DefaultReleaseShare)
	a, b := newMember(), newMember()
	s.failed("h", a, failure{at: at(0), sent: at(0), floor: time.Second})
	s.failed("h", b, failure{at: at(1000), sent: at(1000), floor: 400 * msec}) // sent at the moment named, told one 400 ms later
	if a.h.windows {
		t.Error("moments 400 ms apart taken for a rate window's ends")
	}
}

// C08 (hostgate.go:39, shareStep = 1.0 / 8 -> 1.0 / 4): an answer grows
// the share back by an eighth of ReleaseShare.
func TestAnAnswerGrowsTheShareByAnEighth(t *testing.T) {
	a, b := newMember(), newMember()
	s, h := manualHost(0.25, a, b)
	h.backAt = t0
	s.failed("h", b, failure{at: at(1), sent: at(1)}) // halved: 1/8
	h.answered(at(2), "", nil, false, s.share, time.Time{})
	if want := 0.25 * (1.0/2 + 1.0/8); h.share != want {
		t.Errorf("share %v, want %v", h.share, want)
	}
}

// C11 (hostgate.go:57, runWeight = 8 -> 4): the runs of failures a host's
// answers ended weigh as a mean of eight: a host that failed 4 in 5 at
// random, then answered 4 in a row, still needs 24 failures in a row to be
// down (fewer with a mean of four runs).
func TestDownRunFollowsTheMeanOfEightRuns(t *testing.T) {
	s := newHostSet(DefaultReleaseShare)
	a := newMember()
	ms := 0
	s.failed("h", a, failure{at: at(ms), sent: at(ms)})
	h := a.h
	for range 8 {
		for range 4 {
			ms++
			s.failed("h", a, failure{at: at(ms), sent: at(ms)})
		}
		ms++
		h.answered(at(ms), "", nil, false, s.share, time.Time{})
	}
	for range 4 {
		ms++
		h.answered(at(ms), "", nil, false, s.share, time.Time{})
	}
	if got := h.downRun(); got != 24 {
		t.Errorf("down after %d failures in a row, want 24", got)
	}
}

// H49 (hostgate.go:334, if first -> if false in answered): first attempts
// the host answers count as fresh requests too: while they come, an
// answer to a retry the line let go earns no slow start's two releases.
func TestAnsweredFreshRequestsAreAFlow(t *testing.T) {
	a, b, c := newMember(), newMember(), newMember()
	s, h := manualHost(0.25, a, b, c)
	h.backAt = t0
	for i := range 11 {
		h.answered(at(10*i), "", nil, true, s.share, time.Time{})
	}
	if !h.flowing(at(105)) {
		t.Error("fresh requests answered 10 ms apart are not a flow")
	}
	h.enqueue(b, place{nextAt: far, spare: true})
	h.enqueue(c, place{nextAt: far, spare: true})
	h.credit, a.fromLine = 0, true
	h.answered(at(105), "", a, false, s.share, at(104))
	if b.released {
		t.Error("an answer to a retry from the line, fresh requests coming, earned a slow start")
	}
}

// H62 (hostgate.go:417, min(h.gaps+1, gapWeight) dropped): the gap between
// fresh requests is a moving average of gapWeight gaps: a flow that slows
// from 10 ms apart to 30 ms apart is read as 30 ms apart soon, not as the
// mean of all its gaps.
func TestTheGapFollowsAFlowThatSlows(t *testing.T) {
	a, b := newMember(), newMember()
	_, h := manualHost(0.25, a, b)
	h.backAt = t0
	ms := 0
	for i := range 200 {
		ms += 5 + 10*(i%2) // 5 and 15 ms apart by turns
		h.noteFresh(at(ms))
	}
	for i := range 24 {
		ms += 25 + 10*(i%2) // 25 and 35
		h.noteFresh(at(ms))
	}
	if h.gap < 25*msec {
		t.Errorf("gap %v after 24 gaps of 30 ms on average, want 25 ms at least", h.gap)
	}
}

// L60 (line.go:206, h.releasedSinceHalved = true dropped from release):
// a failure halves the share once per release, as TCP once per round
// trip: after a release, the next failure halves it again.
func TestAFailureAfterAReleaseHalvesTheShareAgain(t *testing.T) {
	a, b := newMember(), newMember()
	s, h := manualHost(0.25, a, b)
	h.backAt = t0
	s.failed("h", b, failure{at: at(1), sent: at(0)}) // halved: 0.125
	h.enqueue(a, place{nextAt: far, spare: true})
	for i := 2; !a.released && i < 100; i++ {
		h.answered(at(i), "", nil, false, s.share, time.Time{})
	}
	if !a.released {
		t.Fatal("setup: a was not released")
	}
	before := h.share
	s.failed("h", b, failure{at: at(200), sent: at(199)})
	if h.share != before/2 {
		t.Errorf("share %v after a failure that followed a release, want %v", h.share, before/2)
	}
}

// L62 (line.go:520, >= -> >): a host back from an outage sheds at one
// standard deviation of chance past a third failed: 4 of 8 (4·3 = 8 + √16).
func TestHalfOfEightFailedIsAShed(t *testing.T) {
	h := &host{sentSinceBack: 8, failedSinceBack: 4}
	if !h.failsAShare() {
		t.Error("4 of 8 attempts failed since the return: not a shed")
	}
}

// O31 (hold.go:88, m.h.abandon(m, time.Now()) deleted in pause): a held
// retry canceled while first in line hands the line on: the next is woken,
// as its probe may be due. At a8811eb the request's end (leave) woke no
// one with three or more retrying; since 2ce7631 leave takes a request
// still in line out of it too, and this test passes with the mutant.
func TestACanceledHoldWakesTheNextInLine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, h, _, start := shedLine(t, 0.01, Policy{MaxRetries: 10, BaseDelay: 100 * msec, MaxDelay: 10 * time.Second, Jitter: JitterNone}, false)
		d := r.st.failed("h.test", nil, failure{at: start.Add(-time.Second), sent: start.Add(-time.Second - msec)})
		h.mu.Lock()
		h.probing, h.nextProbe = nil, start.Add(100*msec)
		h.mu.Unlock()
		_, cancel, done := holdAsync(r, start)
		defer cancel()
		time.Sleep(50 * msec)
		synctest.Wait()
		if returned(done) || h.firstWaiting(time.Now()) != r.m {
			t.Fatal("setup: a is not first in line")
		}
		h.enqueue(d, place{nextAt: far, spare: true})
		cancel()
		<-done
		r.st.end(r.m, false)
		if !nudged(d) {
			t.Error("d, first in line once a was canceled, was not woken")
		}
	})
}

// O28 (hold.go:23, base <= 0 || dropped): with no backoff (a negative
// BaseDelay), storm control holds nothing: requests retrying together on
// a dead host, whose failures take 1 to 10 ms, each make every attempt
// plain backoff makes, none skipped.
func TestNoBackoffHoldsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 10
		var calls atomic.Int64
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			calls.Add(1)
			i, _ := strconv.Atoi(r.URL.Query().Get("i"))
			time.Sleep(time.Duration(i+1) * msec)
			return response(503, ""), nil
		})
		tr := &Transport{Base: base, Policy: Policy{BaseDelay: -1, MaxRetries: 5}}
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if resp, err := tr.RoundTrip(httptest.NewRequest(http.MethodGet, "http://h/?i="+strconv.Itoa(i), nil)); err == nil {
					resp.Body.Close()
				}
			}()
		}
		wg.Wait()
		if got := calls.Load(); got != n*6 {
			t.Errorf("%d attempts, want %d: 6 each", got, n*6)
		}
	})
}
