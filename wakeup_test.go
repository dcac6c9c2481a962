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

// TestProbeGoesToTheNextWhenTheFirstCannot: A, first in line, sleeps
// until the probe's time; by then its attempt would not be back before its
// next step, so B is first. A, woken, must hand the probe on.
func TestProbeGoesToTheNextWhenTheFirstCannot(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	h := &host{name: "x", share: 0.25, releasedSinceHalved: true, outageStart: t0, downSeen: t0, nextProbe: t0.Add(60 * time.Millisecond)}
	a, b := newMember(), newMember()
	a.h, b.h = h, h
	h.members = []*member{a, b}
	a.took = attemptTime{avg: 50 * time.Millisecond, timed: true} // A may go between steps until t0+50ms
	h.enqueue(a, place{nextAt: t0.Add(100 * time.Millisecond), spare: true})
	h.enqueue(b, place{nextAt: t0.Add(time.Second), spare: true})
	if send, wake := h.poll(a, t0, false, false); send || !wake.Equal(t0.Add(60*time.Millisecond)) {
		t.Fatalf("A at t0: send %v, wake %v; want a wait for the probe's time", send, wake)
	}
	if send, wake := h.poll(b, t0, false, false); send || !wake.IsZero() {
		t.Fatalf("B at t0: send %v, wake %v; want to sleep to its step", send, wake)
	}
	nudged(b)
	at := t0.Add(60 * time.Millisecond)
	if send, _ := h.poll(a, at, false, false); send {
		t.Fatal("A went as the probe though its attempt would not be back before its step")
	}
	if !nudged(b) {
		t.Fatal("B, now first in line, was not woken")
	}
	if send, _ := h.poll(b, at, false, false); !send {
		t.Error("B, woken, did not go as the line's probe")
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
	if !nudged(a) {
		t.Error("a retry whose probe is due beside a failing path was not woken")
	}
	if send, _ := h.poll(a, at(5), false, false); !send {
		t.Error("woken, the retry beside a failing path did not go as the line's probe")
	}
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
	if !nudged(a) {
		t.Error("a failure that made the line's probe due did not wake the first in line")
	}
	if send, _ := h.poll(a, at(150), false, false); !send {
		t.Error("woken, the first in line did not go as the line's probe")
	}
}
