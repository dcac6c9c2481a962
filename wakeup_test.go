package httpretry

import (
	"testing"
	"time"
)

// The line's wake-ups: a held request sleeps until its step, or until the
// time poll gave it, unless nudged. Each test puts the host where a poll
// of a held request would send it, and checks that something wakes it: a
// nudge, or the wake time poll returned. Each failed before (a review's
// audit: a poll would have sent the request, but it slept to its step).

// nudged reports whether m has a nudge pending, taking it.
func nudged(m *member) bool {
	select {
	case <-m.wake:
		return true
	default:
		return false
	}
}

// TestProbeGoesToTheNextWhenTheFirstCannot: A, first in line, would sleep
// until the probe's time; by then its attempt would not be back before its
// next step, so B is first. A wakes when it may no longer go and must
// hand the probe on.
func TestProbeGoesToTheNextWhenTheFirstCannot(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	h := &host{name: "x", share: 0.25, releasedSinceHalved: true, outageStart: t0, downSeen: t0, nextProbe: t0.Add(60 * time.Millisecond)}
	a, b := newMember(), newMember()
	a.h, b.h = h, h
	h.members = []*member{a, b}
	a.took = attemptTime{avg: 50 * time.Millisecond, timed: true} // A may go between steps until t0+50ms
	h.enqueue(a, place{nextAt: t0.Add(100 * time.Millisecond), spare: true})
	h.enqueue(b, place{nextAt: t0.Add(time.Second), spare: true})
	if send, wake := h.poll(a, t0, false, false); send || !wake.Equal(t0.Add(50*time.Millisecond)) {
		t.Fatalf("A at t0: send %v, wake %v; want a wait until it may no longer go, 50 ms", send, wake)
	}
	if send, wake := h.poll(b, t0, false, false); send || !wake.IsZero() {
		t.Fatalf("B at t0: send %v, wake %v; want to sleep to its step", send, wake)
	}
	nudged(b)
	handOver := t0.Add(50 * time.Millisecond)
	if send, _ := h.poll(a, handOver, false, false); send {
		t.Fatal("A went as the probe though its attempt would not be back before its step")
	}
	if !nudged(b) {
		t.Fatal("B, now first in line, was not woken")
	}
	if send, wake := h.poll(b, handOver, false, false); send || !wake.Equal(t0.Add(60*time.Millisecond)) {
		t.Fatalf("B at 50 ms: send %v, wake %v; want a wait for the probe's time, 60 ms", send, wake)
	}
	if send, _ := h.poll(b, t0.Add(60*time.Millisecond), false, false); !send {
		t.Error("B did not go as the line's probe at its time")
	}
}

// TestCreditWaitsForTheRetryAfterToEnd: a retry waiting through its own
// backoff is told a Retry-After; a release earned before it ends is kept,
// and the retry looks again when it ends.
func TestCreditWaitsForTheRetryAfterToEnd(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	h := &host{name: "x", share: 1, outageStart: t0, backAt: t0}
	a, b := newMember(), newMember()
	a.h, b.h = h, h
	h.members = []*member{a, b}
	end := t0.Add(100 * time.Millisecond)
	h.enqueue(a, place{nextAt: t0.Add(time.Second), spare: true, ownWait: true, notBefore: end})
	h.answered(t0.Add(10*time.Millisecond), "", nil, true, 1, time.Time{}) // a whole release
	send, wake := h.poll(a, t0.Add(10*time.Millisecond), false, false)
	if send {
		t.Fatal("A went before its Retry-After ended")
	}
	if !wake.Equal(end) {
		t.Fatalf("A sleeps until %v, want the Retry-After's end %v", wake, end)
	}
	if send, _ := h.poll(a, end, false, false); !send {
		t.Error("the release kept for A did not let it go when its Retry-After ended")
	}
}

// TestFirstAnswerAfterAFailureWakesTheLine: a held retry whose step found
// the host down goes once the host answers an attempt sent no later than
// that step (grace), as plain backoff's attempt at the step would have
// been answered; the answer must wake it, on a host that is not down too.
// An answer to an attempt sent after the step puts it in no grace: the
// host may have come back between the two; unless the retry was told a
// Retry-After by a host whose Retry-After names its return, not a wait
// (see host.waits), and the step came after the latest failed attempt
// went (100 ms before the step): the host named that moment, and has
// failed nothing sent since. Nor does an answer to an attempt sent
// before that failed attempt, which tells nothing of its failure.
func TestFirstAnswerAfterAFailureWakesTheLine(t *testing.T) {
	for _, tc := range []struct {
		sent  time.Duration // the answered attempt's send, from A's step
		told  bool          // A was told a Retry-After whose moment came before its step
		waits bool          // the host's Retry-After names a wait, not its return
		after bool          // the latest failed attempt went 5 ms after A's step, not 100 ms before
		grace bool
	}{{-80 * time.Millisecond, false, false, false, true}, {0, false, false, false, true}, {10 * time.Millisecond, false, false, false, false},
		{-120 * time.Millisecond, false, false, false, false}, {10 * time.Millisecond, true, false, false, true}, {-120 * time.Millisecond, true, false, false, false},
		{10 * time.Millisecond, true, true, false, false}, {10 * time.Millisecond, true, false, true, false}} {
		t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
		h := &host{name: "x", share: 0.01, outageStart: t0, backAt: t0.Add(-time.Second), run: 1, downSeen: t0.Add(-100 * time.Millisecond),
			took: attemptTime{avg: time.Millisecond, timed: true}, waits: tc.waits}
		a, b := newMember(), newMember()
		a.h, b.h = h, h
		h.members = []*member{a, b}
		a.downStep = t0
		if tc.after {
			h.downSeen = t0.Add(5 * time.Millisecond)
		}
		if tc.told { // failed a second before its step, told to come back half a second later
			a.told, a.heeded = failure{at: t0.Add(-time.Second), floor: 500 * time.Millisecond}, 500*time.Millisecond
		}
		h.enqueue(a, place{nextAt: t0.Add(time.Second), spare: true})
		if h.down() {
			t.Fatal("setup: the host should not be down")
		}
		at := t0.Add(20 * time.Millisecond) // past a failed attempt's time after the step
		h.answered(at, "", nil, false, 0.25, t0.Add(tc.sent))
		if got := h.inGrace(a, at); got != tc.grace {
			t.Errorf("answer to an attempt sent %v from A's step (told %v, waits %v, failed after %v): in grace %v, want %v", tc.sent, tc.told, tc.waits, tc.after, got, tc.grace)
		}
		if !nudged(a) {
			t.Errorf("sent %v: the answer did not wake A, the first in line", tc.sent)
		}
		if send, _ := h.poll(a, at, false, false); tc.grace && !send {
			t.Errorf("sent %v: A, in grace, did not go", tc.sent)
		}
	}
}

// TestAnswersOnAFlakyHostWakeOnlyWhomTheyConcern: 500 retries held in
// line, none of them in grace, on a host that fails and answers by turns.
// Waking every held retry at each answer after a failure cost 500
// wake-ups per answer, each a poll under the host's lock (a review's
// find); an answer wakes only the retries it lets go, and the first in
// line, whose probe it may bring forward.
func TestAnswersOnAFlakyHostWakeOnlyWhomTheyConcern(t *testing.T) {
	const held, turns = 500, 100
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	s := newHostSet(0.25)
	ms := make([]*member, held)
	for i := range ms {
		ms[i] = newMember()
		s.failed("x", ms[i], failure{at: t0, sent: t0.Add(-10 * time.Millisecond)})
	}
	h := ms[0].h
	h.mu.Lock()
	h.backAt, h.run = t0, 0 // it has answered before: not down
	for _, m := range ms {
		m.waiting, m.place = true, place{nextAt: t0.Add(time.Hour)}
	}
	h.mu.Unlock()
	woken := func() (n int) {
		for _, m := range ms {
			if nudged(m) {
				n++
			}
		}
		return n
	}
	woken()
	wakes, fresh, now := 0, newMember(), t0
	for range turns {
		now = now.Add(time.Millisecond)
		s.failed("x", fresh, failure{first: true, at: now, sent: now.Add(-time.Millisecond)})
		now = now.Add(time.Millisecond)
		h.answered(now, "", nil, true, 0.25, time.Time{})
		wakes += woken()
	}
	if wakes > turns {
		t.Errorf("%d held, %d answers after a failure: %d wake-ups, want at most one per answer", held, turns, wakes)
	}
}

// TestFailuresOnAnotherPathWakeTheLinesProbe: a retry held in line while
// fresh requests come sleeps until they stop; when the host's latest two
// failures are on another path, it may probe for its own at once (see
// besideFailingPath), and is woken to: it slept until the flow ended.
// TestStormStress once reported a line's probe due while every request
// slept, in one of about 17,000 seeds; this is one way there.
func TestFailuresOnAnotherPathWakeTheLinesProbe(t *testing.T) {
	s, ms := failing(3)
	h, a := ms[0].h, ms[0]
	if wake := asleepInLine(t, h, a, at(3)); !wake.After(at(5)) {
		t.Fatalf("while fresh requests come: wake at %v; want held past 5 ms", wake.Sub(t0))
	}
	for i, m := range []*member{newMember(), newMember()} { // retries on another path: no fresh request
		s.failed("h", m, failure{at: at(4 + i), sent: at(4 + i), path: "/other"})
	}
	if !h.besideFailingPath(a) || at(5).Before(h.probeAt(a)) {
		t.Fatalf("beside the failing path %v, probe at %v: want a probe due at 5 ms", h.besideFailingPath(a), h.probeAt(a).Sub(t0))
	}
	wokenAndGoes(t, h, a, at(5), "a retry whose probe is due beside a failing path was not woken")
}

// TestAnEarlierMomentNamedWakesTheLinesProbe: a retry first in line, few
// fresh requests seen, sleeps until the line's next probe; another
// request's failure then names, by its Retry-After, a moment before that
// (see momentCame), at which the line probes: the first in line must be
// woken to look again, or it sleeps through the moment.
func TestAnEarlierMomentNamedWakesTheLinesProbe(t *testing.T) {
	s, ms := failing(3)
	h, a := ms[0].h, ms[0]
	h.gaps, h.nextProbe = 1, at(1000) // few fresh requests; the probe before paced the next far out
	if wake := asleepInLine(t, h, a, at(3)); !wake.Equal(at(1000)) {
		t.Fatalf("wake at %v; want asleep until the probe's time, 1 s", wake.Sub(t0))
	}
	s.failed("h", newMember(), failure{at: at(4), sent: at(4), floor: 100 * time.Millisecond})
	if !h.momentCame(at(104), h.pendingMoment()) {
		t.Fatalf("the moment named (%v) does not make the probe due at 104 ms", h.pendingMoment().Sub(t0))
	}
	if !nudged(a) {
		t.Error("a moment named before the line's next probe did not wake the first in line")
	}
	if send, wake := h.poll(a, at(5), false, false); send || !wake.Equal(at(104)) {
		t.Errorf("woken: send %v, wake at %v; want asleep until the moment named, 104 ms", send, wake.Sub(t0))
	}
}

// wokenAndGoes fails the test, saying what (the event that should have
// woken m), unless m was nudged and, polled at now, goes.
func wokenAndGoes(t *testing.T, h *host, m *member, now time.Time, what string) {
	t.Helper()
	if !nudged(m) {
		t.Error(what)
	} else if send, _ := h.poll(m, now, false, false); !send {
		t.Errorf("woken (%s), it did not go", what)
	}
}

// asleepInLine holds a at now, polls it, and returns when it sleeps
// until, with any nudge the poll sent it taken; it fails the test when a
// is not held or goes at once.
func asleepInLine(t *testing.T, h *host, a *member, now time.Time) time.Time {
	t.Helper()
	if !holdAt(h, a, now) {
		t.Fatal("not held")
	}
	send, wake := h.poll(a, now, false, false)
	if send {
		t.Fatalf("went at once at %v", now.Sub(t0))
	}
	nudged(a)
	return wake
}

// TestAMomentComeWhileTheHostAnsweredWakesTheProbe: B's failure names, by
// its Retry-After, a moment (104 ms) at which the line probes while fresh
// requests are few; the host answers before it, so that at the moment the
// probe is not due, and A, first in line, sleeps on to the line's next
// probe. A failure then comes of an attempt sent before the moment: what
// the host is since the moment is unknown again, the probe is due, and A
// must be woken to go (TestStormStress, 1 run in 10 at 1,000 seeds).
func TestAMomentComeWhileTheHostAnsweredWakesTheProbe(t *testing.T) {
	s, ms := failing(3)
	h, a, b, c := ms[0].h, ms[0], ms[1], ms[2]
	h.gaps, h.nextProbe = 1, at(1000) // few fresh requests; the probe before paced the next far out
	asleepInLine(t, h, a, at(3))
	s.failed("h", b, failure{at: at(4), sent: at(4), floor: 100 * time.Millisecond})
	s.failed("h", c, failure{at: at(6), sent: at(6)}) // the host's latest failure names no wait
	s.answered("h", "", nil, false, at(40))
	nudged(a)
	if send, wake := h.poll(a, at(104), false, false); send || !wake.Equal(at(1000)) {
		t.Fatalf("at the moment, the host answering: send %v, wake at %v; want asleep until 1 s", send, wake.Sub(t0))
	}
	s.failed("h", c, failure{at: at(150), sent: at(60)})
	if !h.momentCame(at(150), h.pendingMoment()) {
		t.Fatalf("the moment named (%v) does not make the probe due at 150 ms", h.pendingMoment().Sub(t0))
	}
	wokenAndGoes(t, h, a, at(150), "a failure that made the line's probe due did not wake the first in line")
}

// probedAtTheEarliestMoment holds A and E (members 0 and 4) in line, on
// a host prepared by prepare; B (1) is told a Retry-After naming 106 ms,
// D (3) one naming 307 ms, and C's failure (2), the host's latest, names
// none; A, first in line, goes as the line's probe at 106 ms.
func probedAtTheEarliestMoment(t *testing.T, prepare func(*host)) (*hostSet, []*member) {
	t.Helper()
	s, ms := failing(5)
	h, a, b, c, d, e := ms[0].h, ms[0], ms[1], ms[2], ms[3], ms[4]
	prepare(h)
	asleepInLine(t, h, a, at(5))
	asleepInLine(t, h, e, at(5))
	s.failed("h", b, failure{at: at(6), sent: at(6), floor: 100 * time.Millisecond})
	s.failed("h", d, failure{at: at(7), sent: at(7), floor: 300 * time.Millisecond})
	s.failed("h", c, failure{at: at(8), sent: at(8)})
	nudged(a)
	nudged(e)
	if send, _ := h.poll(a, at(106), false, false); !send {
		t.Fatal("A did not go as the line's probe at the moment B was told")
	}
	return s, ms
}

// lineProbedAtTheEarliestMoment: as probedAtTheEarliestMoment, with few
// fresh requests and the line's probes before failed, so that the next
// is paced far out; A's request is then canceled (leave): E, now first,
// is woken and sleeps until the probe's pace, 1,006 ms, as the moment
// that pendingMoment reports (106 ms) was probed already.
func lineProbedAtTheEarliestMoment(t *testing.T) (s *hostSet, h *host, b, e *member) {
	t.Helper()
	s, ms := probedAtTheEarliestMoment(t, func(h *host) {
		h.gaps, h.nextProbe = 1, at(1000)
		h.missed, h.pace = 3, 900*time.Millisecond // the line's probes before failed, pacing the next far out
	})
	h, b, e = ms[0].h, ms[1], ms[4]
	s.leave(ms[0]) // the probe's request is canceled
	if !nudged(e) {
		t.Fatal("E, first once the probe ended, was not woken")
	}
	send, wake := h.poll(e, at(110), false, false)
	if send || !wake.Equal(at(1006)) {
		t.Fatalf("E at 110 ms: send %v, wake at %v; want asleep until 1,006 ms", send, wake.Sub(t0))
	}
	if h.momentCame(at(310), h.pendingMoment()) {
		t.Fatal("setup: the probe is due at 310 ms already")
	}
	return s, h, b, e
}

// TestLeavingWithTheEarliestMomentWakesTheProbeForTheNext: B's request
// ends (canceled) at 310 ms: the earliest moment pending is now D's, 307
// ms, after the line's latest probe, and come: the probe is due, and E
// sleeps until 1,006 ms unless woken.
func TestLeavingWithTheEarliestMomentWakesTheProbeForTheNext(t *testing.T) {
	s, h, b, e := lineProbedAtTheEarliestMoment(t)
	s.leave(b)
	if !h.momentCame(at(310), h.pendingMoment()) {
		t.Fatalf("the moment pending (%v) does not make the probe due at 310 ms", h.pendingMoment().Sub(t0))
	}
	wokenAndGoes(t, h, e, at(310), "B's leaving made the line's probe due (D's moment, come) but did not wake E, the first in line")
}

// TestAFailureAfterTheEarliestMomentWakesTheProbeForTheNext: B's own
// retry, sent at 150 ms (after its Retry-After), fails at 200 ms with no
// Retry-After: the host's latest failed attempt went after B's moment,
// which is no longer pending; D's, 307 ms, is, and the line probes then.
// E sleeps until 1,006 ms unless woken to look again.
func TestAFailureAfterTheEarliestMomentWakesTheProbeForTheNext(t *testing.T) {
	s, h, b, e := lineProbedAtTheEarliestMoment(t)
	s.failed("h", b, failure{at: at(200), sent: at(150)})
	if p := h.pendingMoment(); !p.Equal(at(307)) || !h.momentCame(at(307), p) {
		t.Fatalf("pending %v, come at 307 ms %v; want D's moment, due then", p.Sub(t0), h.momentCame(at(307), p))
	}
	if !nudged(e) {
		t.Error("B's failure put the line's probe at D's moment, 307 ms, but E, the first in line, sleeps until 1,006 ms")
	}
	if send, wake := h.poll(e, at(200), false, false); send || !wake.Equal(at(307)) {
		t.Errorf("woken at 200 ms: send %v, wake at %v; want asleep until 307 ms", send, wake.Sub(t0))
	}
}

// TestAnAnsweredProbeThenALaterMomentWakesTheProbe: as above, but no
// pace set by hand and no request canceled: fresh requests 500 ms apart,
// too few to count on (gaps 1). A probes at B's moment (106 ms) and is
// answered at 120 ms; C's attempt sent at 100 ms fails at 130 ms (the
// first failure after the answer: E is woken, and sleeps until the flow
// ends, 504 ms); B's own retry sent at 150 ms fails at 200 ms, no
// Retry-After: D's moment, 307 ms, is now the one pending, after the
// probe, and the line probes then, E asleep until 504 ms unless woken.
func TestAnAnsweredProbeThenALaterMomentWakesTheProbe(t *testing.T) {
	s, ms := probedAtTheEarliestMoment(t, func(h *host) { h.gaps, h.gap, h.gapDev = 1, 500*time.Millisecond, 0 })
	h, a, b, c, e := ms[0].h, ms[0], ms[1], ms[2], ms[4]
	h.answered(at(120), "", a, false, DefaultReleaseShare, at(106))
	nudged(e)
	s.failed("h", c, failure{at: at(130), sent: at(100)})
	if !nudged(e) {
		t.Fatal("the first failure after the answer did not wake E")
	}
	if send, wake := h.poll(e, at(130), false, false); send || !wake.Equal(at(504)) {
		t.Fatalf("E at 130 ms: send %v, wake at %v; want asleep until the flow ends, 504 ms", send, wake.Sub(t0))
	}
	s.failed("h", b, failure{at: at(200), sent: at(150)})
	if p := h.pendingMoment(); !p.Equal(at(307)) || !h.momentCame(at(307), p) {
		t.Fatalf("pending %v, come at 307 ms %v; want D's moment, due then", p.Sub(t0), h.momentCame(at(307), p))
	}
	wokenAndGoes(t, h, e, at(307), "B's failure put the line's probe at D's moment, 307 ms, but E, the first in line, sleeps until 504 ms")
}

// TestAFlowThatRestartsWakesTheProbeBesideAFailingPath:
// B's latest failure is on /b, the host's latest failures on another path
// (B is beside a failing path). Fresh requests, 50 ms apart, stopped: A,
// first in line, sleeps until its probe's time (118 ms), and B, not
// first, until its step. A fresh request fails at 80 ms: fresh requests
// flow again, so that B, beside the failing path, is first in line, and
// its probe (paced from when the path's failures began, 52 ms) is due.
// B must be woken (A's poll at 118 ms, fresh requests flowing, does not
// hand the probe on).
func TestAFlowThatRestartsWakesTheProbeBesideAFailingPath(t *testing.T) {
	s, ms := failing(2)
	h, a, b := ms[0].h, ms[0], ms[1]
	s.failed("h", b, failure{at: at(2), sent: at(2), path: "/b"})
	s.failed("h", newMember(), failure{at: at(3), sent: at(3)})
	x := newMember()
	s.failed("h", x, failure{at: at(4), sent: at(4)})
	h.gap, h.gapDev = 50*time.Millisecond, 0 // fresh requests 50 ms apart, steadily: the flow ends at 63.5 ms
	if h.flowing(at(64)) || !h.besideFailingPath(b) || h.besideFailingPath(a) {
		t.Fatalf("setup: flowing at 64 ms %v, B beside %v, A beside %v", h.flowing(at(64)), h.besideFailingPath(b), h.besideFailingPath(a))
	}
	s.failed("h", x, failure{at: at(68), sent: at(68)})
	if wake := asleepInLine(t, h, a, at(70)); !wake.Equal(at(118)) {
		t.Fatalf("A at 70 ms: wake at %v; want its probe's time, 118 ms", wake.Sub(t0))
	}
	if wake := asleepInLine(t, h, b, at(70)); !wake.IsZero() {
		t.Fatalf("B at 70 ms: wake at %v; want asleep until its step", wake.Sub(t0))
	}
	nudged(a)
	s.failed("h", newMember(), failure{first: true, at: at(80), sent: at(80)})
	f := h.firstWaiting(at(80))
	if f != b || !(h.flowing(at(80)) && h.besideFailingPath(b) && !at(80).Before(h.probeAt(b))) {
		t.Fatalf("at 80 ms: first is B %v, flowing %v, probe at %v; want B first and its probe due", f == b, h.flowing(at(80)), h.probeAt(b).Sub(t0))
	}
	wokenAndGoes(t, h, b, at(80), "the fresh request made B first in line with its probe due, but B was not woken")
}

// TestAShorterRetryAfterUsesAReleaseKept:
// A, held before, waits its own backoff in line (ownWait) until 2 s, told
// a Retry-After of 1 s at 10 ms. The host answers (20-27 ms) before that
// ends: the releases earned are kept (one), as nobody may go. The host
// then fails 16 attempts in a row, each told 1 s: down again. At 1,010 ms
// A looks (its Retry-After over) but may not go: told 1 s again, it would
// end past its step. At 1,100 ms B's attempt fails saying no Retry-After:
// the host no longer says one, A may go between its steps, and the
// release kept must let it go then (a nudge of the first waiting alone
// reached no one: A waits its own backoff), or A sleeps until its step
// at 2 s.
func TestAShorterRetryAfterUsesAReleaseKept(t *testing.T) {
	s, ms := failing(2)
	h, a, b := ms[0].h, ms[0], ms[1]
	s.failed("h", a, failure{at: at(10), sent: at(10), floor: time.Second})
	h.enqueue(a, place{nextAt: at(2000), spare: true, ownWait: true, notBefore: at(1010)})
	for i := range 8 {
		h.answered(at(20+i), "", nil, false, DefaultReleaseShare, time.Time{})
	}
	if h.credit < 1 {
		t.Fatalf("setup: credit %.2f after the answers", h.credit)
	}
	for i := range downAfter {
		s.failed("h", b, failure{at: at(30 + i), sent: at(30 + i), floor: time.Second})
	}
	if !h.down() || h.credit < 1 {
		t.Fatalf("setup: down %v, credit %.2f", h.down(), h.credit)
	}
	nudged(a)
	if send, wake := h.poll(a, at(1010), false, false); send || !wake.IsZero() {
		t.Fatalf("A at 1,010 ms: send %v, wake at %v; want asleep until its step", send, wake.Sub(t0))
	}
	s.failed("h", b, failure{at: at(1100), sent: at(1090)})
	if !a.released || !nudged(a) {
		t.Error("a release kept for A may now let it go, but A sleeps until its step, 2 s")
	}
	if send, _ := h.poll(a, at(1100), false, false); !send {
		t.Error("at 1,100 ms A, polled, was not released")
	}
}

// TestTheFirstInLineHandsTheProbeOnWhenItMayNoLongerGo: fresh requests
// have stopped. A (its attempts take 50 ms, its step at 200 ms) is first
// in line and sleeps until its probe's time, 170 ms (the host's latest
// failure went at 120 ms). B, behind it, is beside a failing path: its
// probe is paced from 61 ms, and would be due at once were it first. At
// 150 ms A's attempt would no longer be back before its step, so B is
// first, its probe due: A must wake then to hand it on, not at 170 ms.
func TestTheFirstInLineHandsTheProbeOnWhenItMayNoLongerGo(t *testing.T) {
	s, ms := failing(2)
	h, a, b := ms[0].h, ms[0], ms[1]
	s.failed("h", a, failure{at: at(60), sent: at(-40)}) // its attempts take 0 and 100 ms: 50 ms on average
	s.failed("h", b, failure{at: at(61), sent: at(61), path: "/b"})
	x := newMember()
	s.failed("h", x, failure{at: at(62), sent: at(62)})
	s.failed("h", x, failure{at: at(63), sent: at(63)})
	h.gap, h.gapDev = 50*time.Millisecond, 0 // fresh requests 50 ms apart: they stopped at 63.5 ms
	s.failed("h", x, failure{at: at(120), sent: at(120)})
	if !h.ask(a, false, at(125)) || !h.ask(b, false, at(125)) {
		t.Fatal("setup: not held")
	}
	h.enqueue(a, place{nextAt: at(200), spare: true})
	h.enqueue(b, place{nextAt: far, spare: true})
	send, wakeA := h.poll(a, at(125), false, false)
	if send || !wakeA.Equal(at(150)) {
		t.Fatalf("A at 125 ms: send %v, wake at %v; want 150 ms, when it may no longer go, before its probe's time, 170 ms", send, wakeA.Sub(t0))
	}
	if send, wake := h.poll(b, at(125), false, false); send || !wake.IsZero() {
		t.Fatalf("B at 125 ms: send %v, wake at %v; want asleep until its step", send, wake.Sub(t0))
	}
	nudged(a)
	nudged(b)
	now := at(150)
	f := h.firstWaiting(now)
	if f != b || h.flowing(now) || now.Before(h.probeAt(b)) {
		t.Fatalf("at 150 ms: first is B %v, flowing %v, B's probe at %v; want B first, its probe due", f == b, h.flowing(now), h.probeAt(b).Sub(t0))
	}
	if send, _ := h.poll(a, now, false, false); send || !nudged(b) {
		t.Errorf("A at 150 ms: send %v; want B, first in line now and its probe due, woken", send)
	}
	if send, _ := h.poll(b, now, false, false); !send {
		t.Error("at 150 ms B did not go as the line's probe")
	}
}

// besideAFailingPath holds A (path "") and B (path "/b") in line, A
// first at p; the host's latest failures are on "", so that B is beside
// a failing path, its probe paced from 2 ms; fresh requests have
// stopped, the line's pace is 200 ms, and A was told Retry-After: 1s. A
// failure at 300 ms says said. A sleeps until its probe's time, 500 ms,
// or sooner when it may no longer go by then; B until its step.
func besideAFailingPath(t *testing.T, said time.Duration, p place) (s *hostSet, h *host, a, b *member, wakeA time.Time) {
	t.Helper()
	s, ms := failing(2)
	h, a, b = ms[0].h, ms[0], ms[1]
	s.failed("h", b, failure{at: at(2), sent: at(2), path: "/b"})
	x := newMember()
	s.failed("h", x, failure{at: at(3), sent: at(3)})
	s.failed("h", x, failure{at: at(4), sent: at(4)})
	s.failed("h", a, failure{at: at(10), sent: at(10), floor: time.Second})
	s.failed("h", x, failure{at: at(11), sent: at(11), floor: time.Second})
	if !h.ask(a, false, at(12)) || !h.ask(b, false, at(12)) {
		t.Fatal("not held")
	}
	h.enqueue(a, p)
	h.enqueue(b, place{nextAt: far, spare: true})
	s.failed("h", x, failure{at: at(300), sent: at(300), floor: said})
	h.pace = 200 * time.Millisecond
	if h.flowing(at(300)) || !h.besideFailingPath(b) || h.besideFailingPath(a) {
		t.Fatalf("flowing %v, B beside %v, A beside %v; want stopped, B alone beside", h.flowing(at(300)), h.besideFailingPath(b), h.besideFailingPath(a))
	}
	send, wakeA := h.poll(a, at(305), false, false)
	if send || h.firstWaiting(at(305)) != a {
		t.Fatalf("A at 305 ms: send %v, first %v; want A first and asleep", send, h.firstWaiting(at(305)) == a)
	}
	if send, wake := h.poll(b, at(305), false, false); send || !wake.IsZero() {
		t.Fatalf("B at 305 ms: send %v, wake at %v; want asleep until its step", send, wake.Sub(t0))
	}
	nudged(a)
	nudged(b)
	return s, h, a, b, wakeA
}

// TestALongerRetryAfterHandsTheProbeOn: at 350 ms a failure says
// Retry-After: 1s where the host said none: A, told 1 s again, would end
// past its step, and may no longer go; B, beside the failing path, is
// first, its probe long due, and must be woken.
func TestALongerRetryAfterHandsTheProbeOn(t *testing.T) {
	s, h, _, b, wakeA := besideAFailingPath(t, 0, place{nextAt: at(800), spare: true})
	if !wakeA.Equal(at(500)) {
		t.Fatalf("A asleep until %v; want its probe's time, 500 ms", wakeA.Sub(t0))
	}
	s.failed("h", newMember(), failure{at: at(350), sent: at(350), floor: time.Second})
	if h.firstWaiting(at(350)) != b {
		t.Fatal("at 350 ms, B is not first in line")
	}
	wokenAndGoes(t, h, b, at(350), "a longer Retry-After made B first in line, its probe due, but did not wake it")
}

// TestAToldWaitPastItsStepHandsTheProbeOn: the host says Retry-After: 1s;
// A, told it again, would end past its step (1,500 ms) from 400 ms on,
// when B, beside the failing path, is first with its probe due: A must
// wake then, not at its probe's time, 500 ms, and hand the probe on.
func TestAToldWaitPastItsStepHandsTheProbeOn(t *testing.T) {
	_, h, a, b, wakeA := besideAFailingPath(t, time.Second, place{nextAt: at(1500), spare: true})
	handsOn(t, h, a, b, wakeA)
}

// TestAToldWaitPastItsLimitHandsTheProbeOn: as above, A's deadline at
// 1,500 ms in place of its step.
func TestAToldWaitPastItsLimitHandsTheProbeOn(t *testing.T) {
	_, h, a, b, wakeA := besideAFailingPath(t, time.Second, place{nextAt: far, limit: at(1500), spare: true})
	handsOn(t, h, a, b, wakeA)
}

// handsOn checks that A wakes at 400 ms (to the spread's rounding), when
// it may no longer go, and there hands the line's probe on to B.
func handsOn(t *testing.T, h *host, a, b *member, wakeA time.Time) {
	t.Helper()
	if d := wakeA.Sub(at(400)).Abs(); d > time.Microsecond {
		t.Fatalf("A asleep until %v; want 400 ms, when told 1 s it would end past its step or limit", wakeA.Sub(t0))
	}
	if h.firstWaiting(wakeA) != b {
		t.Fatal("at 400 ms, B is not first in line")
	}
	if send, _ := h.poll(a, wakeA, false, false); send {
		t.Fatal("A went at 400 ms")
	}
	wokenAndGoes(t, h, b, wakeA, "A, woken at 400 ms, did not hand the line's probe on to B")
}

// TestAFlowBackAfterALongPauseWakesTheProbeBesideAFailingPath: as
// TestAFlowThatRestartsWakesTheProbeBesideAFailingPath, after a pause of
// 450 ms: the fresh request's nudge must go to the first in line as the
// flow stands once it is counted (B), not as it stood before (A).
func TestAFlowBackAfterALongPauseWakesTheProbeBesideAFailingPath(t *testing.T) {
	s, ms := failing(2)
	h, a, b := ms[0].h, ms[0], ms[1]
	s.failed("h", b, failure{at: at(2), sent: at(2), path: "/b"})
	x := newMember()
	s.failed("h", x, failure{at: at(3), sent: at(3)})
	s.failed("h", x, failure{at: at(4), sent: at(4)})
	h.gap, h.gapDev = 50*time.Millisecond, 0 // fresh requests 50 ms apart, steadily: the flow ends at 63.5 ms
	h.pace = 100 * time.Millisecond          // the line's probes before failed
	s.failed("h", x, failure{at: at(450), sent: at(450)})
	if wake := asleepInLine(t, h, a, at(455)); !wake.Equal(at(550)) {
		t.Fatalf("A at 455 ms: wake at %v; want its probe's time, 550 ms", wake.Sub(t0))
	}
	if wake := asleepInLine(t, h, b, at(455)); !wake.IsZero() {
		t.Fatalf("B at 455 ms: wake at %v; want asleep until its step", wake.Sub(t0))
	}
	s.failed("h", newMember(), failure{first: true, at: at(500), sent: at(500)})
	if !h.flowing(at(500)) || h.firstWaiting(at(500)) != b {
		t.Fatal("at 500 ms, fresh requests are not flowing again, or B is not first in line")
	}
	wokenAndGoes(t, h, b, at(500), "the flow back made B first in line, its probe due, but did not wake it")
}

// TestARequestEndingFirstInLineWakesTheNext: A is first in line, asleep
// until the line's next probe (1 s); B, behind it, sleeps until its own
// step. A's request then ends while A still waits in line, as one whose
// Random panics in a held step's draw does (its request's end leaves the
// host without abandoning the line). B is first now, and due to probe at
// 1 s: it must be woken, or it sleeps through the probe to its step.
func TestARequestEndingFirstInLineWakesTheNext(t *testing.T) {
	s, ms := failing(3)
	h, a, b := ms[0].h, ms[0], ms[1]
	h.nextProbe = at(1000)
	if wake := asleepInLine(t, h, a, at(20)); !wake.Equal(at(1000)) {
		t.Fatalf("A at 20 ms: wake at %v; want the probe's time, 1 s", wake.Sub(t0))
	}
	if wake := asleepInLine(t, h, b, at(20)); !wake.IsZero() {
		t.Fatalf("B at 20 ms: wake at %v; want asleep until its step", wake.Sub(t0))
	}
	nudged(a)
	if !a.waiting || h.firstWaiting(at(500)) != a {
		t.Fatal("setup: A is not first in line")
	}
	s.leave(a)
	if h.firstWaiting(at(1000)) != b {
		t.Fatal("B is not first in line after A left")
	}
	if !nudged(b) {
		t.Error("A's request ended while A was first in line, and B, first now, was not woken")
	}
	if send, _ := h.poll(b, at(1000), false, false); !send {
		t.Error("at 1 s B, polled, does not go as the line's probe")
	}
}

// TestAReleaseLeftUnusedByAnEndingRequestGoesToTheNext: the line's credit
// lets A, first in line, go; its request ends (a panic in the hold)
// before A's poll uses the release. The release goes to B, as when a
// hold is abandoned, instead of being lost.
func TestAReleaseLeftUnusedByAnEndingRequestGoesToTheNext(t *testing.T) {
	s, ms := failing(3)
	h, a, b := ms[0].h, ms[0], ms[1]
	h.nextProbe = far // no probe: releases only
	asleepInLine(t, h, a, at(20))
	asleepInLine(t, h, b, at(20))
	nudged(a)
	nudged(b)
	h.mu.Lock()
	h.credit = 1
	h.release(at(30))
	h.mu.Unlock()
	if !a.released || b.released {
		t.Fatalf("setup: A released %v, B released %v; want A alone released", a.released, b.released)
	}
	nudged(a)
	s.leave(a)
	if !b.released || !nudged(b) {
		t.Errorf("the release A left unused was lost: B released %v, credit %.2f", b.released, h.credit)
	}
}
