package httpretry

import (
	"strconv"
	"testing"
	"time"
)

// The host gate's state machine, driven with the time passed in.

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// failing returns a host set and n members of host "h" that have each
// failed once, the first at 0 ms and the others one ms apart, as first
// attempts; the host's health is then nil, as it is in an outage. Fresh
// requests have come 1 ms apart for long enough that they count as
// flowing for flowGaps gaps after the last (see host.flowEnd), and
// requests now gone failed before them, so that downAfter attempts in a
// row have failed.
func failing(n int) (*hostSet, []*member) {
	s := newHostSet(DefaultReleaseShare)
	ms := make([]*member, n)
	for i := range ms {
		ms[i] = newMember()
		s.failed("h", ms[i], failure{first: true, at: at(i), sent: at(i)})
	}
	ms[0].h.gaps, ms[0].h.run = flowGaps, max(ms[0].h.run, downAfter)
	ms[0].h.gapDev = ms[0].h.gap // gaps as irregular as their mean: the flow ends after flowGaps of them
	return s, ms
}

// far is a step time no test reaches, the host's clock-less methods
// (leave) reading the wall clock included.
var far = time.Now().Add(100 * 365 * 24 * time.Hour)

// holdAt asks the gate about m's retry at now and, when it is held, puts
// it in line, as retrier.hold does, its next step far off.
func holdAt(h *host, m *member, now time.Time) bool {
	if !h.ask(m, false, now) {
		return false
	}
	h.enqueue(m, place{nextAt: far, last: m.last, spare: true})
	return true
}

// held asks the gate about m's retry at now, as stormState.hold does:
// whether the retry waits rather than going at once.
func held(h *host, m *member, now time.Time) bool {
	if !h.ask(m, false, now) {
		return false
	}
	h.enqueue(m, place{nextAt: far, last: m.last, spare: true})
	send, _ := h.poll(m, now, false, false)
	return !send
}

func TestGateLetsALoneRequestGo(t *testing.T) {
	_, ms := failing(1)
	if held(ms[0].h, ms[0], at(50)) {
		t.Fatal("a request alone on its host was held")
	}
}

func TestGateHoldsOnlyOnEvidence(t *testing.T) {
	for _, tc := range []struct {
		name string
		prep func(s *hostSet, ms []*member)
		at   int
		want bool // goes
	}{
		{"others fail, host silent, fresh requests coming: held", func(*hostSet, []*member) {}, 5, false},
		{"the host answered since: its failures are noise", func(s *hostSet, ms []*member) {
			ms[0].h.answered(at(5), "", nil, true, s.share, time.Time{})
		}, 5, true},
		{"fresh requests stopped: the oldest held probes", func(*hostSet, []*member) {}, 10_000, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, ms := failing(3) // first attempts 1 ms apart: fresh requests stop 8 ms after the last
			tc.prep(s, ms)
			if got := !held(ms[1].h, ms[1], at(tc.at)); got != tc.want {
				t.Errorf("goes = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestGateLineProbesOneAtATimeOnceFreshRequestsStop(t *testing.T) {
	s, ms := failing(4) // first attempts at 0, 1, 2, 3 ms: the usual gap is 1 ms
	h := ms[0].h
	for _, m := range ms[:3] {
		if !held(h, m, at(5)) {
			t.Fatal("a retry probed while fresh requests were still coming (5 ms after the last)")
		}
		m.policy = Policy{BaseDelay: 100 * time.Millisecond} // a first step of 50 ms at its mean
	}
	stopped := at(3 + flowGaps) // eight gaps of 1 ms after the last
	if send, wake := h.poll(ms[0], at(5), false, false); send || !wake.Equal(stopped) {
		t.Errorf("poll = %v, wake at %v; want a wake once fresh requests count as stopped, at %v", send, wake.Sub(t0), stopped.Sub(t0))
	}
	if send, _ := h.poll(ms[1], stopped, false, false); send {
		t.Error("a retry that is not the oldest held probed")
	}
	if send, _ := h.poll(ms[0], stopped, false, false); !send {
		t.Fatal("the oldest held did not probe once fresh requests stopped")
	}
	if send, _ := h.poll(ms[1], stopped.Add(time.Second), false, false); send {
		t.Error("a second probe went while the first one's outcome was awaited")
	}
	// The probe failed: the next held goes one of its own first backoffs
	// later (50 ms), as the host is down, not the usual gap.
	s.failed("h", ms[0], failure{first: false, at: stopped})
	next := stopped.Add(50 * time.Millisecond)
	if send, wake := h.poll(ms[1], stopped, false, false); send || !wake.Equal(next) {
		t.Errorf("the next held: send %v, wake %v; want a wake at %v", send, wake.Sub(t0), next.Sub(t0))
	}
	if send, _ := h.poll(ms[1], next, false, false); !send {
		t.Fatal("the next held did not probe its pace after the last")
	}
	// It answered: the host is up, and the answer to a retry from the
	// line earns its place back, so the next held goes at once.
	h.answered(next, "", ms[1], false, s.share, time.Time{})
	if send, _ := h.poll(ms[2], next, false, false); !send || !ms[2].fromLine {
		t.Errorf("after the probe's answer: send %v; want the next held released in its place", send)
	}
}

// TestGateProbeWaitsAPaceAfterTheHostsLatestFailure: any request's failed
// attempt tells what a probe would, so the line's next probe goes its pace
// after the host's latest failure, not after its own latest probe.
func TestGateProbeWaitsAPaceAfterTheHostsLatestFailure(t *testing.T) {
	s, ms := failing(4)
	h := ms[0].h
	for _, m := range ms[:3] {
		if !held(h, m, at(5)) {
			t.Fatal("setup: a retry went while fresh requests were still coming")
		}
		m.policy = Policy{BaseDelay: 100 * time.Millisecond} // a pace of 50 ms after a failed probe
	}
	stopped := at(3 + flowGaps)
	if send, _ := h.poll(ms[0], stopped, false, false); !send {
		t.Fatal("setup: the oldest held did not probe once fresh requests stopped")
	}
	s.failed("h", ms[0], failure{at: stopped})
	later := stopped.Add(30 * time.Millisecond)
	s.failed("h", ms[3], failure{at: later}) // a retry that was not held fails 30 ms after the probe
	next := later.Add(50 * time.Millisecond)
	if send, wake := h.poll(ms[1], stopped.Add(50*time.Millisecond), false, false); send || !wake.Equal(next) {
		t.Errorf("a pace after the probe: send %v, wake at %v; want a wake a pace after the latest failure, at %v", send, wake.Sub(t0), next.Sub(t0))
	}
	if send, _ := h.poll(ms[1], next, false, false); !send || h.probing != ms[1] {
		t.Errorf("a pace after the latest failure: send %v; want the next held to probe", send)
	}
}

func TestGateReleasesAShareOfSuccessesOldestFirst(t *testing.T) {
	s, ms := failing(5)
	h := ms[0].h
	for _, m := range ms[1:] {
		if !held(h, m, at(10)) {
			t.Fatal("held retry went")
		}
	}
	// The outage's first failure halved the share to 1/8; each success
	// grows it by 1/32 and then earns it: 5/32, 6/32, 7/32, 8/32, 8/32...
	// so the line is released at the 5th, 9th and 13th success.
	released := func() (n int) {
		for _, m := range ms[1:] {
			if m.released {
				n++
			}
		}
		return n
	}
	var got []int
	for i := range 13 {
		h.answered(at(20+i), "", nil, true, s.share, time.Time{})
		got = append(got, released())
	}
	want := []int{0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("released after each success: %v, want %v", got, want)
		}
	}
	for i, m := range ms[1:4] {
		if !m.released {
			t.Errorf("member %d, among the oldest three, was not released", i+1)
		}
	}
	if ms[4].released {
		t.Error("the youngest was released before an older one")
	}
}

// TestGateHoldsARetryToldToWaitWhileDown: a retry whose failure came with
// a Retry-After while the host was down is held, though no outage is
// proven yet, and goes with the line once the host answers; without the
// Retry-After, the same failures hold no one.
func TestGateHoldsARetryToldToWaitWhileDown(t *testing.T) {
	for _, floor := range []time.Duration{time.Second, 0} {
		says := floor > 0
		s := newHostSet(1)
		a, b := newMember(), newMember()
		s.failed("h", a, failure{first: true, at: at(0), floor: floor})
		s.failed("h", b, failure{first: true, at: at(0), floor: floor})
		h := a.h
		if holdAt(h, a, at(1000)) != says {
			t.Fatalf("Retry-After %v: held %v", says, !says)
		}
		if !says {
			continue
		}
		h.answered(at(1100), "", nil, true, s.share, time.Time{})
		h.answered(at(1101), "", nil, true, s.share, time.Time{})
		if !a.released {
			t.Error("the host answered twice at full share: the oldest held was not released")
		}
	}
}

// TestGateLetsARetryTheServerSingledOutGo: a request told a Retry-After
// of its own while the others' latest failures named none is not held,
// though the host is proven down: the server named its time, and it waits
// that (StormControl's "singled out"). Told the same among others told
// one too, it is held.
func TestGateLetsARetryTheServerSingledOutGo(t *testing.T) {
	for _, othersTold := range []bool{false, true} {
		s := newHostSet(DefaultReleaseShare)
		a, b := newMember(), newMember()
		var floor time.Duration
		if othersTold {
			floor = time.Second
		}
		for i := range downAfter { // a proven outage: 16 failures of b's, attempts taking 100 ms
			s.failed("h", b, failure{first: i == 0, at: at(i), sent: at(i).Add(-100 * time.Millisecond), floor: floor})
		}
		s.failed("h", a, failure{first: true, at: at(300), sent: at(200), floor: time.Second})
		if got := a.h.ask(a, false, at(400)); got != othersTold {
			t.Errorf("others told a Retry-After %v: held %v, want %v", othersTold, got, othersTold)
		}
	}
}

// TestGateNudgesTheHeldAnEventMayLetGo: a held retry sleeps until its
// next step or wake unless nudged, so each event that may let a held
// retry go between its steps nudges it: without the nudge, it waits out
// its timer (a screen that switched each nudge off found no other test
// that failed).
func TestGateNudgesTheHeldAnEventMayLetGo(t *testing.T) {
	for _, tc := range []struct {
		name  string
		prep  func(s *hostSet, h *host, ms []*member)
		event func(s *hostSet, h *host, ms []*member)
		want  []bool // ms[1], ms[2] nudged
	}{
		{"an answer that ends an outage: every held retry", nil, func(s *hostSet, h *host, _ []*member) {
			h.answered(at(6), "", nil, true, s.share, time.Time{})
		}, []bool{true, true}},
		{"a release: the next oldest, which may now probe", nil, func(_ *hostSet, h *host, _ []*member) {
			h.credit = 1
			h.release(at(6))
		}, []bool{true, true}},
		{"an abandon: the next oldest", nil, func(_ *hostSet, h *host, ms []*member) {
			h.abandon(ms[1], at(6))
		}, []bool{false, true}},
		{"a failure without Retry-After after one with: the oldest", func(s *hostSet, _ *host, ms []*member) {
			s.failed("h", ms[0], failure{at: at(4), floor: time.Second})
		}, func(s *hostSet, _ *host, ms []*member) {
			s.failed("h", ms[0], failure{at: at(6)})
		}, []bool{true, false}},
		{"fresh requests coming closer together: the oldest", func(_ *hostSet, h *host, _ []*member) {
			h.gap, h.lastFresh = 10*time.Millisecond, at(5)
		}, func(_ *hostSet, h *host, _ []*member) {
			h.noteFresh(at(7))
		}, []bool{true, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, ms := failing(3)
			h := ms[0].h
			if tc.prep != nil {
				tc.prep(s, h, ms)
			}
			for _, m := range ms[1:] {
				if !held(h, m, at(5)) {
					t.Fatal("setup: not held")
				}
				nudged(m)
			}
			tc.event(s, h, ms)
			for i, m := range ms[1:] {
				if got := nudged(m); got != tc.want[i] {
					t.Errorf("ms[%d] nudged %v, want %v", i+1, got, tc.want[i])
				}
			}
		})
	}
}

func TestGateAbandonGivesAnUnusedReleaseBack(t *testing.T) {
	s, ms := failing(3)
	h := ms[0].h
	held(h, ms[1], at(5))
	held(h, ms[2], at(5))
	h.credit = 1
	h.release(at(11))
	if !ms[1].released {
		t.Fatal("the oldest waiting was not released")
	}
	h.abandon(ms[1], at(12)) // its wait ran out just as it was released
	if !ms[2].released {
		t.Error("the release ms[1] did not use did not go to the next in line")
	}
	_ = s
}

func TestGateForgetsAHostWhenItsRequestsEnd(t *testing.T) {
	s, ms := failing(3)
	if s.active.Load() != 1 || len(s.snapshot()) != 1 {
		t.Fatalf("active %d, map %d", s.active.Load(), len(s.snapshot()))
	}
	h := ms[0].h
	held(h, ms[0], at(10_000)) // the line's probe
	held(h, ms[1], at(10_000))
	select {
	case <-ms[1].wake:
	default:
	}
	s.leave(ms[0])
	select {
	case <-ms[1].wake:
	default:
		t.Error("the next held was not nudged when the line's probe left")
	}
	s.leave(ms[1])
	s.leave(ms[2])
	if s.active.Load() != 0 || len(s.snapshot()) != 0 {
		t.Errorf("after every request left: active %d, map %d; want nothing kept", s.active.Load(), len(s.snapshot()))
	}
	// A request to the host that never failed finds nothing to update.
	s.answered("h", "", nil, true, time.Time{})
	if len(s.snapshot()) != 0 {
		t.Error("an answer created state")
	}
}

func TestGateLineBacksOffAsOneRequestWould(t *testing.T) {
	s, ms := failing(3) // fresh requests count as stopped from 10 ms on
	h := ms[0].h
	for _, m := range ms {
		m.policy = Policy{BaseDelay: 100 * time.Millisecond} // steps of 50, 100, 200 ms at their mean
		held(h, m, at(100))
	}
	now := at(100) // ms[0] went as the probe
	for k, want := range []time.Duration{50, 100, 200} {
		prober := h.probing
		s.failed("h", prober, failure{at: now})
		next := now.Add(want * time.Millisecond)
		if !h.nextProbe.Equal(next) {
			t.Fatalf("after %d failed probes in a row the next goes at %v, want %v", k+1, h.nextProbe.Sub(t0), next.Sub(t0))
		}
		holdAt(h, prober, at(100000)) // back in line after its own wait
		for _, m := range ms {
			if send, _ := h.poll(m, next, false, false); send {
				break
			}
		}
		now = next
	}
	h.answered(now, "", h.probing, false, s.share, time.Time{})
	if h.missed != 0 {
		t.Errorf("after an answer, %d failed probes still counted", h.missed)
	}
}

// TestGateLinePaceCountsFromWhenTheProbeWent: a probe that took 200 ms to
// fail told of the host when it went; the next goes the line's pace after
// that, not after the failure came back (TestEverydayGroupsEndNoLaterOnAverage's
// burst against a 200 ms server: 1.04x of plain backoff's mean when it did).
func TestGateLinePaceCountsFromWhenTheProbeWent(t *testing.T) {
	s, ms := failing(3) // fresh requests count as stopped from 10 ms on
	h := ms[0].h
	for _, m := range ms {
		m.policy = Policy{BaseDelay: 100 * time.Millisecond} // a first pace of 50 ms at the mean
		held(h, m, at(100))
	}
	if h.probing == nil || !h.probedAt.Equal(at(100)) {
		t.Fatalf("no probe went at 100 ms: probing %v at %v", h.probing, h.probedAt.Sub(t0))
	}
	s.failed("h", h.probing, failure{at: at(300), sent: at(100)})
	if want := at(150); !h.nextProbe.Equal(want) {
		t.Errorf("after a probe sent at 100 ms failed at 300 ms, the next goes at %v; want %v", h.nextProbe.Sub(t0), want.Sub(t0))
	}
}

func TestGatePauseOfFreshRequestsIsNotAGap(t *testing.T) {
	_, ms := failing(3) // first attempts 1 ms apart
	h := ms[0].h
	gap := h.gap
	h.noteFresh(at(20_000)) // the next one comes 20 s later
	if h.gap != gap || h.flowing(at(20_000+9*int(gap/time.Millisecond))) {
		t.Errorf("after a 20 s pause the usual gap is %v (was %v): fresh requests would count as coming for eight times that", h.gap, gap)
	}
}

func TestGateLineGrowsOnItsOwnAnswersOnlyWhenFreshRequestsStopped(t *testing.T) {
	for _, tc := range []struct {
		name     string
		at       int
		released bool // the next in line, by the answer to the line's retry
	}{
		{"fresh requests coming: the share only", 5, false},
		{"the line alone: two places and the share", 100, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, ms := failing(2)
			h := ms[0].h
			h.share = DefaultReleaseShare/2 - shareStep*DefaultReleaseShare // the answer grows it to an eighth
			ms[0].fromLine, ms[1].waiting, ms[1].spare, ms[1].nextAt = true, true, true, far
			h.answered(at(tc.at), "", ms[0], false, s.share, time.Time{})
			if ms[1].released != tc.released || !tc.released && h.credit != DefaultReleaseShare/2 {
				t.Errorf("next in line released %v, credit %v; want released %v", ms[1].released, h.credit, tc.released)
			}
		})
	}
}

func TestGateLineBacksOffWithDecorrelatedJitterToo(t *testing.T) {
	s, ms := failing(2)
	h := ms[0].h
	for _, m := range ms {
		m.policy = Policy{BaseDelay: 100 * time.Millisecond, Jitter: JitterDecorrelated}
		held(h, m, at(100))
	}
	var paces []time.Duration
	now := at(100)
	for range 3 {
		prober := h.probing
		s.failed("h", prober, failure{at: now})
		paces = append(paces, h.nextProbe.Sub(now))
		holdAt(h, prober, at(100000))
		now = h.nextProbe
		for _, m := range ms {
			if send, _ := h.poll(m, now, false, false); send {
				break
			}
		}
	}
	if !(paces[0] < paces[1] && paces[1] < paces[2]) {
		t.Errorf("paces after failed probes %v: want them to grow", paces)
	}
}

func TestGateHoldsOnlyOnceTheOutageIsProven(t *testing.T) {
	for _, tc := range []struct {
		name  string
		took  time.Duration // how long the failed attempts took; zero: not timed
		askAt int           // ms after the host went down
		fails int           // attempts failed in a row
		want  bool
	}{
		{"no attempt timed", 0, 10_000, downAfter, false},
		{"down for less than two attempts' time", 100 * time.Millisecond, 199, downAfter, false},
		{"down for two attempts' time", 100 * time.Millisecond, 200, downAfter, true},
		{"attempts that take next to no time", time.Microsecond, 1, downAfter, true},
		{"fewer than downAfter attempts failed in a row", 100 * time.Millisecond, 10_000, downAfter - 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newHostSet(DefaultReleaseShare)
			ms := []*member{newMember(), newMember()}
			for i := range tc.fails {
				f := failure{first: i < 2, at: at(0)}
				if tc.took > 0 {
					f.sent = at(0).Add(-tc.took)
				}
				s.failed("h", ms[i%2], f)
			}
			if got := holdAt(ms[0].h, ms[1], at(tc.askAt)); got != tc.want {
				t.Errorf("waits in line %v, want %v", got, tc.want)
			}
		})
	}
}

func TestGateOutageIsProvenByTheAverageAttemptTime(t *testing.T) {
	s := newHostSet(DefaultReleaseShare)
	ms := []*member{newMember(), newMember()}
	s.failed("h", ms[0], failure{first: true, at: at(0), sent: at(-400)})
	s.failed("h", ms[1], failure{first: true, at: at(1), sent: at(0)}) // one short attempt among long ones
	h := ms[0].h
	if want := 400*time.Millisecond - 399*time.Millisecond/tookWeight; h.took.avg != want {
		t.Errorf("attempts take %v, want the moving average %v", h.took, want)
	}
	if holdAt(h, ms[1], at(300)) {
		t.Error("held 300 ms into an outage of attempts that take about 200 ms on average: one short attempt proved it")
	}
}

// failAt records a failure of m's request to host "h" at ms, its attempt
// having taken took.
func failAt(s *hostSet, m *member, ms int, took time.Duration) {
	s.failed("h", m, failure{at: at(ms), sent: at(ms).Add(-took)})
}

// answerAt records n answers of host "h", one ms apart from ms.
func answerAt(s *hostSet, h *host, ms, n int) {
	for i := range n {
		h.answered(at(ms+i), "", nil, true, s.share, time.Time{})
	}
}

// TestGateHoldsAtOnceWhenAProvenHostFailsAgain: an outage of 16 failures
// that lasts two attempts' time is proven, whether a retry asked the gate
// during it or the host only went on failing (when only an ask marked it,
// the next outage was young or proven by who had asked when).
func TestGateHoldsAtOnceWhenAProvenHostFailsAgain(t *testing.T) {
	for _, asked := range []bool{true, false} {
		s := newHostSet(DefaultReleaseShare)
		ms := []*member{newMember(), newMember()}
		for i := range downAfter { // an outage of 16 failures, attempts taking 100 ms
			failAt(s, ms[i%2], i, 100*time.Millisecond)
		}
		h := ms[0].h
		if asked && !holdAt(h, ms[1], at(250)) {
			t.Fatal("not held 250 ms into an outage of 100 ms attempts")
		}
		if !asked {
			failAt(s, ms[0], 250, 100*time.Millisecond) // still failing, 250 ms in
		}
		answerAt(s, h, 300, 16)    // back
		for i := range downAfter { // shedding now
			failAt(s, ms[0], 400+i, 100*time.Millisecond)
		}
		if !holdAt(h, ms[1], at(420)) {
			t.Errorf("asked in the first outage %v: a retry into a host that fails again after a proven outage went unheld", asked)
		}
	}
}

func TestGateFirstOutageAfterAnswersIsYoung(t *testing.T) {
	for _, tc := range []struct {
		name  string
		askAt int
		want  bool
	}{
		{"16 ms into it", 10_016, false},
		{"two attempts' time into it", 10_200, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newHostSet(DefaultReleaseShare)
			ms := []*member{newMember(), newMember()}
			for i := range downAfter - 1 { // failures at random create the state, which starts down
				failAt(s, ms[i%2], 0, 100*time.Millisecond)
			}
			h := ms[0].h
			if holdAt(h, ms[1], at(300)) {
				t.Fatal("held by a state 300 ms old with fewer than downAfter failures in a row")
			}
			answerAt(s, h, 1000, 50) // the host answers while both still retry
			for i := range downAfter {
				failAt(s, ms[0], 10_000+i, 100*time.Millisecond)
			}
			if got := holdAt(h, ms[1], at(tc.askAt)); got != tc.want {
				t.Errorf("held %v, want %v: the first real outage counts from its own first failure", got, tc.want)
			}
		})
	}
}

func TestGateOutageStaysProvenWhenHungAttemptsFailLate(t *testing.T) {
	s := newHostSet(DefaultReleaseShare)
	ms := []*member{newMember(), newMember(), newMember()}
	for i := range downAfter { // fast 503s
		failAt(s, ms[i%3], i, time.Millisecond)
	}
	h := ms[0].h
	if !h.ask(ms[1], false, at(100)) {
		t.Fatal("not held 100 ms into an outage of 1 ms failures")
	}
	for range 8 { // attempts sent a minute before, hung until now
		failAt(s, ms[0], 2000, time.Minute)
	}
	if !h.ask(ms[2], false, at(10_000)) {
		t.Errorf("not held once late failures made attempts look a minute long (%v): once proven, a host state stays proven", h.took.avg)
	}
}

// TestToldStepGoesOnTheHostsAnswer: a held step told a Retry-After goes
// once the host's latest outcome is an answer, as any held step does,
// whether the Retry-After named the host's return or the host went on
// failing attempts sent after it ended: plain backoff's retry there would
// find the host back. Kept for the line's releases when the Retry-After
// may have named the return (as a herd's does), a client told the
// outage's end, at 2 to 30 requests a second, ended its calls 0.37-1.19 s
// later than plain backoff on average and up to 4.2 s (the hunt's small
// clients, seeds 1-4); now 0 to 19 ms per row.
func TestToldStepGoesOnTheHostsAnswer(t *testing.T) {
	for _, tc := range []struct {
		name     string
		failedAt int // when the host's last failed attempt before its return went
	}{
		{"the host failed past the Retry-After's end", 1500},
		{"the host back when the Retry-After ended", 900},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, ms := failing(3)
			h := ms[0].h
			s.failed("h", ms[1], failure{at: at(10), sent: at(9), floor: time.Second})  // told to wait until 1,010 ms
			s.failed("h", ms[2], failure{at: at(11), sent: at(10), floor: time.Second}) // as the others are
			if !holdAt(h, ms[1], at(20)) {
				t.Fatal("not held in an outage with others retrying")
			}
			for i := range downAfter {
				failAt(s, ms[2], tc.failedAt-downAfter+i+1, time.Millisecond)
			}
			answerAt(s, h, 2000, 1)                                     // one answer: not yet a release's worth of credit
			if send, _ := h.poll(ms[1], at(2001), true, false); !send { // fresh requests still coming: no probe
				t.Error("a told step did not go on the host's answer")
			}
		})
	}
}

func TestHeldStepGoesWhenTheHostsLatestOutcomeIsAnAnswer(t *testing.T) {
	for _, tc := range []struct {
		name     string
		answered bool // the host answered after the failure newer than the step's news
		goes     bool
	}{
		{"latest outcome a failure newer than its news", false, false},
		{"an answer after it", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, ms := failing(3) // fresh requests flowing, the host down
			h := ms[0].h
			if !holdAt(h, ms[1], at(3)) {
				t.Fatal("not held in an outage with others retrying")
			}
			s.failed("h", ms[2], failure{first: true, at: at(5), sent: at(5)}) // newer than ms[1]'s news
			if tc.answered {
				answerAt(s, h, 6, 1)
			}
			// On a flapping host, plain backoff's retry at this step finds
			// the host as its latest outcome left it: 1,662 small groups'
			// requests of 61,449 failed that plain backoff rescued when a
			// step needed 16 answers in a row, 1,213 now.
			if send, _ := h.poll(ms[1], at(7), true, false); send != tc.goes {
				t.Errorf("step went %v, want %v", send, tc.goes)
			}
		})
	}
}

// TestGateHoldsALimitedRetryOnlyOnceAnAttemptIsTimed: with a deadline or
// MaxElapsed, a skipped step stands for an attempt as long as the host's,
// so a retry is held only once an attempt to the host has been timed;
// without a limit, it is held on the same evidence untimed (a review's
// drawn groups: 618 of 20,176 rescues lost without the rule, 579 with).
func TestGateHoldsALimitedRetryOnlyOnceAnAttemptIsTimed(t *testing.T) {
	s := newHostSet(DefaultReleaseShare)
	a, b := newMember(), newMember()
	told := failure{at: at(0), floor: time.Second} // no send time: the attempt is not timed
	s.failed("h", b, told)
	s.failed("h", a, told)
	if !a.h.ask(a, false, at(10)) {
		t.Fatal("told a Retry-After in an outage beside another told one, without a limit: not held")
	}
	if a.h.ask(a, true, at(10)) {
		t.Error("limited, no attempt to the host timed: held")
	}
	told.sent, told.at = at(20), at(30)
	s.failed("h", b, told)
	if !a.h.ask(a, true, at(40)) {
		t.Error("limited, an attempt to the host timed: not held")
	}
}

// TestGateRetryAfterToldWhileTheHostAnswersHoldsNothing: a Retry-After
// holds a retry only when it was told while the host was down: told
// while the host still answers others (a rate limit on a few), it names
// no outage, and the retry waits it at its own step (a review's drawn
// groups: 625 of 20,176 rescues lost without the rule, 579 with).
func TestGateRetryAfterToldWhileTheHostAnswersHoldsNothing(t *testing.T) {
	s := newHostSet(DefaultReleaseShare)
	a, b := newMember(), newMember()
	s.failed("h", b, failure{first: true, at: at(0), sent: at(0)})
	b.h.answered(at(10), "", nil, true, DefaultReleaseShare, time.Time{}) // the host is back
	told := failure{first: true, at: at(30), sent: at(20), floor: time.Second}
	s.failed("h", b, told)
	s.failed("h", a, told)
	if a.h.ask(a, false, at(40)) {
		t.Error("told a Retry-After while the host answered: held")
	}
}

// TestFlowOfFreshRequestsEndsByHowRegularItWas: fresh requests as regular
// as a ticker's count as stopped once a beat is missed (a gap and a
// quarter), where the same mean gap drawn at random, or a ticker that has
// paused before, counts as coming for up to flowGaps gaps (see flowEnd).
func TestFlowOfFreshRequestsEndsByHowRegularItWas(t *testing.T) {
	for _, tc := range []struct {
		name      string
		at        []int // ms of the fresh requests
		flowingAt []int // ms after the last: still coming
		stoppedAt []int // ms after the last: stopped
	}{
		{"a ticker", []int{0, 100, 200, 300, 400, 500, 600, 700, 800}, []int{100, 124}, []int{126, 300}},
		{"the same mean gap, uneven", []int{0, 50, 200, 250, 400, 450, 600, 650, 800}, []int{126, 300, 500}, []int{801}},
		{"a ticker that paused", []int{0, 100, 200, 300, 2300, 2400, 2500, 2600, 2700}, []int{126, 300}, []int{801}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &host{}
			for _, ms := range tc.at {
				h.noteFresh(at(ms))
			}
			last := tc.at[len(tc.at)-1]
			for _, d := range tc.flowingAt {
				if !h.flowing(at(last + d)) {
					t.Errorf("stopped %d ms after the last (gap %v, deviation %v)", d, h.gap, h.gapDev)
				}
			}
			for _, d := range tc.stoppedAt {
				if h.flowing(at(last + d)) {
					t.Errorf("still coming %d ms after the last (gap %v, deviation %v)", d, h.gap, h.gapDev)
				}
			}
		})
	}
}

// TestAPathThatAnswersIsNotDownForItsRequests: one endpoint of a host is
// down, another answers. The dead one's failures make the host look down;
// a request to the other is held only until its path has answered (a
// held one's step then goes), and again once that path has failed
// downAfter attempts in a row, or once
// pathsKept other paths have answered since. A host with one path is down
// for it as before (see pathFailed).
func TestAPathThatAnswersIsNotDownForItsRequests(t *testing.T) {
	s := newHostSet(DefaultReleaseShare)
	live, dead := newMember(), newMember()
	failRun(s, live, "/live", 0, 1)
	failRun(s, dead, "/dead", 1, downAfter)
	h := live.h
	if !h.ask(live, false, at(40)) {
		t.Fatal("a request whose path never answered went while the host was down")
	}
	h.enqueue(live, place{nextAt: far, spare: true})
	h.answered(at(41), "/live", nil, true, s.share, time.Time{})
	failRun(s, dead, "/dead", 42, downAfter)
	freshComing(h, at(79)) // no probe
	if send, _ := h.poll(live, at(80), true, false); !send {
		t.Error("a held request's step did not go once its path answered, the host down")
	}
	if h.ask(live, false, at(80)) {
		t.Error("a request to a path that answered since was held for another path's outage")
	}
	if !h.ask(dead, false, at(80)) {
		t.Error("a request to the dead path went while the host was down")
	}
	failRun(s, live, "/live", 81, downAfter)
	if !h.ask(live, false, at(120)) {
		t.Errorf("a path that failed %d attempts in a row since its answer was not down", downAfter)
	}

	// Kept newest first: a path that answers again goes first, so that
	// pathsKept-1 others answering since (and one more before) keep it.
	h.answered(at(121), "/live", nil, true, s.share, time.Time{})
	for i := range pathsKept - 1 {
		h.answered(at(122+i), "/other"+strconv.Itoa(i), nil, true, s.share, time.Time{})
	}
	h.answered(at(126), "/live", nil, true, s.share, time.Time{})
	h.answered(at(127), "/next", nil, true, s.share, time.Time{})
	failRun(s, dead, "/dead", 130, downAfter)
	if h.ask(live, false, at(150)) {
		t.Errorf("a path that answered again was dropped before %d older ones", pathsKept-1)
	}
	for i := range pathsKept - 1 {
		h.answered(at(151+i), "/later"+strconv.Itoa(i), nil, true, s.share, time.Time{})
	}
	failRun(s, dead, "/dead", 160, downAfter)
	if !h.ask(live, false, at(180)) {
		t.Errorf("a path that %d others answered after was still taken for answering", pathsKept)
	}

	h.answered(at(171), "/dead", nil, true, s.share, time.Time{}) // one path: its answer is the host's
	failRun(s, dead, "/dead", 172, downAfter)
	if !h.ask(dead, false, at(210)) {
		t.Error("a path that answered and then failed as the whole host did was not down")
	}
}

// TestAStepBesideAFailingPathReadsItsOwnPathsNews: one endpoint of a host
// keeps failing, another, which has never answered, is down for a while.
// A held request to the second goes at a step when every failure since
// its news was the first endpoint's, fresh requests coming or not; it
// skips the step once a request to its own path has failed since. On a
// host with one path, the same failures skip the step as before.
func TestAStepBesideAFailingPathReadsItsOwnPathsNews(t *testing.T) {
	s := newHostSet(DefaultReleaseShare)
	blip, other, dead := newMember(), newMember(), newMember()
	failRun(s, other, "/blip", 0, 1)
	failRun(s, blip, "/blip", 1, 1)
	failRun(s, dead, "/dead", 2, downAfter)
	h := blip.h
	freshComing(h, at(39))
	h.nextProbe = far // steps only: no probe
	if !h.ask(blip, false, at(40)) {
		t.Fatal("arrangement: a request whose path never answered went while the host was down")
	}
	h.enqueue(blip, place{nextAt: far, spare: true})
	if send, _ := h.poll(blip, at(40), true, false); !send {
		t.Error("a held step skipped for failures of another path only")
	}
	failRun(s, blip, "/blip", 41, 1)
	h.enqueue(blip, place{nextAt: far, spare: true})
	failRun(s, other, "/blip", 42, 1)
	failRun(s, dead, "/dead", 43, 3)
	if send, _ := h.poll(blip, at(60), true, false); send {
		t.Error("a held step went though another request to its path failed since its news")
	}
	if send, _ := h.poll(blip, at(80), true, false); !send {
		t.Error("a held step skipped for failures of another path only, a step after one of its own path")
	}

	one := newHostSet(DefaultReleaseShare)
	a, b := newMember(), newMember()
	failRun(one, a, "/x", 0, 1)
	failRun(one, b, "/x", 1, downAfter)
	ha := a.h
	freshComing(ha, at(39))
	ha.enqueue(a, place{nextAt: far, spare: true})
	if send, _ := ha.poll(a, at(40), true, false); send {
		t.Error("on a host with one path, a held step went though others failed since its news")
	}
}

// TestTheLineProbesForAPathBesideAFailingOne: a request to a path beside
// one that keeps failing waits in line behind an older request to the
// failing path, fresh requests coming. They probe for the older one but
// not for it, so it is the one that may probe: first in line for that,
// it was left asleep behind the older one until its next step.
func TestTheLineProbesForAPathBesideAFailingOne(t *testing.T) {
	s := newHostSet(DefaultReleaseShare)
	blip, dead := newMember(), newMember()
	failRun(s, blip, "/blip", 0, 1)
	failRun(s, dead, "/dead", 1, downAfter)
	h := blip.h
	freshComing(h, at(39))
	h.members[0], h.members[1] = dead, blip // the failing path's request is the older
	h.enqueue(dead, place{nextAt: far, spare: true})
	h.enqueue(blip, place{nextAt: far, spare: true})
	if send, _ := h.poll(dead, at(40), false, false); send {
		t.Error("the failing path's request probed while fresh requests to it came")
	}
	if send, _ := h.poll(blip, at(40), false, false); !send {
		t.Error("the request beside the failing path did not probe, fresh requests to the other path coming")
	}
	if h.probing != blip {
		t.Error("the request beside the failing path went, but not as the line's probe")
	}
}

// TestAStepReadsARetryAfterAsNewsUntilTheMomentItNamed: a held request
// told Retry-After: 1 at 1 s reaches its step at 2 s, the moment named,
// fresh requests stopped. Another's failure sent at 1.7 s, before that
// moment, tells nothing newer: the step goes, as plain backoff's would.
// One sent at 2.1 s, after it, is news: the step at 2.2 s is skipped.
func TestAStepReadsARetryAfterAsNewsUntilTheMomentItNamed(t *testing.T) {
	s := newHostSet(DefaultReleaseShare)
	told, other := newMember(), newMember()
	failRun(s, other, "/", 0, downAfter)
	s.failed("h", told, failure{first: true, at: at(1000), sent: at(999), floor: time.Second, path: "/"})
	failRun(s, other, "/", 1700, 1)
	h := told.h
	freshComing(h, at(1700)) // many fresh requests, stopped: no moment asks at once (see momentCame)
	h.nextProbe = far        // steps only: no probe
	h.enqueue(told, place{nextAt: far, spare: true})
	if send, _ := h.poll(told, at(2000), true, false); !send {
		t.Error("a step at the moment its Retry-After named was skipped for a failure sent before that moment")
	}
	failRun(s, other, "/", 2100, 1)
	freshComing(h, at(2100))
	h.enqueue(told, place{nextAt: far, spare: true})
	if send, _ := h.poll(told, at(2200), true, false); send {
		t.Error("a step went though another request failed after the moment its Retry-After named")
	}
}

// failRun records n failed attempts of m's request to path on host "h",
// the first a first attempt, one a tick from at(from).
func failRun(s *hostSet, m *member, path string, from, n int) {
	for i := range n {
		s.failed("h", m, failure{first: i == 0, at: at(from + i), sent: at(from + i), path: path})
	}
}

// freshComing makes h see fresh requests coming, 10 ms apart, the latest
// at last: the line leaves probing to them.
func freshComing(h *host, last time.Time) {
	h.gaps, h.gap, h.gapDev, h.lastFresh = flowGaps, 10*time.Millisecond, 10*time.Millisecond, last
}

// TestGateLetsAnOwnStepGoEarlyOnceTheHostAnswers: a held request that
// spent its skipped steps on the line's probes waits its own next step in
// line, with none left for a release to stand for; the host's answers now
// let it go as that step, sent early, rather than leave it waiting for a
// step that may come a second after the host is back (a burst of 200
// against a 200 ms server on loopback: the last call 1.39-1.67 s after the
// return in 3 of 13 runs, against plain backoff's 0.91-1.15 s). Alone,
// before the end of a Retry-After it was told, or for its last step, which
// plain backoff sends later, it still waits.
func TestGateLetsAnOwnStepGoEarlyOnceTheHostAnswers(t *testing.T) {
	for _, tc := range []struct {
		name      string
		alone     bool
		notBefore time.Time
		last      bool
		released  bool
	}{
		{"beside another", false, time.Time{}, false, true},
		{"alone", true, time.Time{}, false, false},
		{"told a Retry-After", false, far, false, false},
		{"its last step", false, time.Time{}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, ms := failing(2)
			h, m := ms[0].h, ms[1]
			if tc.alone {
				s.leave(ms[0])
			}
			h.enqueue(m, place{nextAt: far, ownWait: true, notBefore: tc.notBefore, last: tc.last}) // no skipped step to spare
			for i := range 20 {
				if m.released {
					break
				}
				h.answered(at(100+i), "", nil, false, s.share, time.Time{})
			}
			if m.released != tc.released {
				t.Errorf("after 20 answers, released %v; want %v", m.released, tc.released)
			}
		})
	}
}

// TestHeldStepGoesOnAnAnswerOnlyWhileTheHostShedsNothing: back from an
// outage, a host that fails attempts while it answers others is at its
// capacity, as a fleet's backlog finds it: a held step that finds an
// answer its latest outcome then waits for the line's releases, which
// pace the backlog, rather than go with every other such step (see
// host.sheds for the figures). A host that has answered everything since
// its return, or since its latest such failure for downAfter answers in a
// row, lets the step go; so do failures of attempts sent before its
// return, which tell of it down, and failures on another path, which tell
// nothing of the step's.
func TestHeldStepGoesOnAnAnswerOnlyWhileTheHostShedsNothing(t *testing.T) {
	for _, tc := range []struct {
		name    string
		shed    bool   // two failures between two answers
		path    string // theirs; the step's is ""
		sent    int    // when their attempts went, in ms
		answers int    // answers after them
		goes    bool
	}{
		{"nothing shed since the return", false, "", 0, 1, true},
		{"a shed on its path", true, "", 7, 1, false},
		{"a shed, then answers in a row", true, "", 7, downAfter, true},
		{"failures of attempts sent before the return", true, "", 4, 1, true},
		{"sheds on another path", true, "/other", 7, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, ms := failing(3) // fresh requests flowing, the host down
			h := ms[0].h
			if !holdAt(h, ms[1], at(3)) {
				t.Fatal("not held in an outage with others retrying")
			}
			h.enqueue(ms[1], place{nextAt: far}) // no skipped step to spare: only its step lets it go
			answerAt(s, h, 6, 1)                 // back
			if tc.shed {
				s.failed("h", ms[2], failure{at: at(7), sent: at(tc.sent), path: tc.path})
				s.failed("h", ms[2], failure{at: at(8), sent: at(tc.sent + 1), path: tc.path})
			}
			for i := range tc.answers {
				h.answered(at(9).Add(time.Duration(i)*time.Microsecond), ms[1].told.path, nil, false, s.share, time.Time{})
			}
			if send, _ := h.poll(ms[1], at(10), true, false); send != tc.goes {
				t.Errorf("step went %v, want %v", send, tc.goes)
			}
		})
	}
}

// TestRandomRunsOfAMostlyFailingHostAreNotAnOutage: a host failing about
// 90% of its attempts at random has runs of 16 failures in a row nearly
// one time in five. Taken for outages, they held retries that plain
// backoff would have sent, and had answered: 300 drawn groups on hosts
// failing 70-95% at random lost 2,156 of 23,640 rescues (120 now; see
// TestHostsFailingMostAttemptsAtRandomKeepTheirRescues). The runs that
// answers end tell the host's rate, and a run is an outage, down and
// proven, only once it is as rare at that rate as downAfter is at
// downAfterRate; a run that made the host down does not count in its
// rate. A young state, without answered runs, is down at downAfter; a
// short outage counts as random runs, but raises the run needed no
// higher than mostRandomRate's.
func TestRandomRunsOfAMostlyFailingHostAreNotAnOutage(t *testing.T) {
	s := newHostSet(DefaultReleaseShare)
	a, b := newMember(), newMember()
	now := 0
	fail := func(m *member, n int) {
		for range n {
			failAt(s, m, now, time.Millisecond)
			now++
		}
	}
	answer := func(h *host) {
		answerAt(s, h, now, 1)
		now++
	}
	fail(a, 1)
	fail(b, 8)
	h := a.h
	for range 2 * runWeight { // runs of 9 failures between answers: a host failing 90% of attempts
		answer(h)
		fail(a, 9)
	}
	if need := h.downRun(); need != 78 {
		t.Fatalf("runs of 9 between answers: %d failures in a row make the host down, want 78", need)
	}
	fail(b, 78-9-1)
	if h.down() || h.ask(b, false, at(now)) || h.proven {
		t.Errorf("77 failures in a row of a host failing 90%% at random were taken for an outage")
	}
	fail(b, 1)
	if !h.down() || !h.ask(b, false, at(now)) {
		t.Errorf("78 failures in a row, as rare at 90%% as %d at 60%%, were not an outage", downAfter)
	}
	answer(h) // the outage ends: its run is not one of the host's random ones
	if need := h.downRun(); need != 78 {
		t.Errorf("after an outage, %d failures in a row make the host down, want 78 as before it", need)
	}

	s = newHostSet(DefaultReleaseShare)
	a, b = newMember(), newMember()
	fail(a, 1)
	fail(b, downAfter-1)
	if !a.h.ask(b, false, at(now)) {
		t.Errorf("a state without answered runs: %d failures in a row are not an outage", downAfter)
	}
	s = newHostSet(DefaultReleaseShare)
	a, b = newMember(), newMember()
	fail(a, 1)
	fail(b, downAfter-2)
	answer(a.h)
	fail(b, 120) // a short outage in a young state, read as random runs
	answer(a.h)
	fail(b, 160)
	if !a.h.down() {
		t.Errorf("after two short outages, 160 failures in a row are not down")
	}
}

// TestRetriesRefusedAgainAfterAnOutageAreHeld: a host back from an outage
// of shedAfterRun attempts on its one path (youngShedAfterRun for a state
// that has seen no answer), that refuses retries again (a backlog coming
// back, as at a herd's date), holds them as in an outage for as long
// again as the outage lasted, while it sheds, an answer between refusals
// or not; not a request's first failure, one that said Retry-After, one
// after the window, nor after an outage one attempt shorter (random
// failures reach downAfter: see shedAfterRun).
func TestRetriesRefusedAgainAfterAnOutageAreHeld(t *testing.T) {
	for _, c := range []struct {
		young bool
		run   int
	}{{true, youngShedAfterRun - 1}, {true, youngShedAfterRun}, {false, shedAfterRun - 1}, {false, shedAfterRun}} {
		run, long := c.run, c.run == youngShedAfterRun || c.run == shedAfterRun
		s := newHostSet(DefaultReleaseShare)
		a, b := newMember(), newMember()
		o := 0        // when the outage begins, in ms
		if !c.young { // a failure and an answer before it
			failAt(s, a, 0, time.Millisecond)
			answerAt(s, a.h, 1, 1)
			o = 2
		}
		for i := range run { // the outage, o to o+run-1 ms
			failAt(s, []*member{a, b}[i%2], o+i, time.Millisecond)
		}
		h := a.h
		answerAt(s, h, o+run, 1) // back at o+run ms: the window ends at o+2*run ms
		a.n, b.n = 2, 1
		failAt(s, b, o+run+1, time.Millisecond)
		if h.ask(b, false, at(o+run+1)) {
			t.Errorf("after %d failures in a row (young %v): a request's first failure held", run, c.young)
		}
		failAt(s, a, o+run+2, time.Millisecond) // refused again
		if got := h.ask(a, false, at(o+run+2)); got != long {
			t.Errorf("after %d failures in a row (young %v): a retry refused again held %v, want %v", run, c.young, got, long)
		}
		answerAt(s, h, o+run+3, 1) // an answer between refusals: it still sheds
		if got := h.ask(a, false, at(o+run+4)); got != long {
			t.Errorf("after %d failures in a row (young %v): a retry refused again, the host's latest outcome an answer, held %v, want %v", run, c.young, got, long)
		}
		failAt(s, a, o+2*run-2, time.Millisecond)
		if got := h.ask(a, false, at(o+2*run-2)); got != long {
			t.Errorf("after %d failures in a row (young %v): a retry refused again just within the window held %v, want %v", run, c.young, got, long)
		}
		for _, m := range []*member{b, a} { // both told, so that a is not singled out either
			s.failed("h", m, failure{at: at(o + 2*run - 1), sent: at(o + 2*run - 1), floor: time.Second})
		}
		if h.ask(a, false, at(o+2*run-1)) {
			t.Errorf("after %d failures in a row (young %v): a retry told Retry-After held as refused", run, c.young)
		}
		failAt(s, a, o+2*run+1, time.Millisecond)
		if h.ask(a, false, at(o+2*run+1)) {
			t.Errorf("after %d failures in a row (young %v): a retry held after the outage's length", run, c.young)
		}
	}
}

// TestFailuresOfAttemptsSentBeforeTheReturnAreNotRefusals: a host back
// from an outage refuses again (see host.sheds) only by failing an
// attempt sent since its return. A slow attempt sent before it, or one
// not timed, which went before the host had state, fails after it
// without making the host shed.
func TestFailuresOfAttemptsSentBeforeTheReturnAreNotRefusals(t *testing.T) {
	for _, sent := range []time.Time{at(30), {}, at(33)} {
		s := newHostSet(DefaultReleaseShare)
		a, b := newMember(), newMember()
		for i := range shedAfterRun {
			failAt(s, []*member{a, b}[i%2], i, time.Millisecond)
		}
		h := a.h
		answerAt(s, h, shedAfterRun, 1)
		a.n = 2
		s.failed("h", a, failure{at: at(shedAfterRun + 2), sent: sent})
		if got, want := h.sheds(a), sent.After(h.backAt); got != want {
			t.Errorf("a failure of an attempt sent at %v, the host back at %v: sheds %v, want %v", sent, h.backAt, got, want)
		}
		if got, want := h.ask(a, false, at(shedAfterRun+2)), sent.After(h.backAt); got != want {
			t.Errorf("a failure of an attempt sent at %v, the host back at %v: held %v, want %v", sent, h.backAt, got, want)
		}
	}
}

// TestBacklogOfAToldOutageIsHeldWhileTheHostSheds: a host back from an
// outage that told Retry-After opens a shed window though the failure
// just before its first answer, a refusal, said none; while it then
// refuses attempts sent since, the retry of a request that failed before
// the return (the backlog) is held, though it was told a Retry-After and
// it is its first retry, and a fresh request's first retry is not; an
// answer between refusals keeps it held, downAfter answers in a row end
// the hold.
func TestBacklogOfAToldOutageIsHeldWhileTheHostSheds(t *testing.T) {
	s := newHostSet(DefaultReleaseShare)
	a, b, c, d := newMember(), newMember(), newMember(), newMember()
	for i, m := range []*member{a, b} { // the outage, told to come back at 1 s
		s.failed("h", m, failure{first: true, at: at(i), sent: at(i), floor: time.Second})
	}
	h := a.h
	failAt(s, c, 1000, time.Millisecond) // a refusal among the first answers, which says none
	answerAt(s, h, 1001, 1)              // back: the window lasts as long as the outage, to 2002 ms
	if !h.shedUntil.Equal(at(2002)) {
		t.Fatalf("back from an outage that told Retry-After: may shed until %v, want %v", h.shedUntil, at(2002))
	}
	a.n, b.n, d.n = 1, 1, 1
	s.failed("h", d, failure{first: true, at: at(1003), sent: at(1002)}) // refused again: sent since the return
	if !h.ask(a, false, at(1004)) {
		t.Error("a retry of the backlog, told Retry-After before the return, not held while the host sheds")
	}
	if h.ask(d, false, at(1004)) {
		t.Error("a fresh request's first retry held")
	}
	answerAt(s, h, 1005, 1)
	if !h.ask(b, false, at(1006)) {
		t.Error("a retry of the backlog not held after an answer between refusals")
	}
	answerAt(s, h, 1006, downAfter-1) // downAfter answers in a row since the refusal: it sheds no more
	if h.ask(b, false, at(1006+downAfter)) {
		t.Errorf("a retry of the backlog held after %d answers in a row", downAfter)
	}
	s.failed("h", d, failure{at: at(2002), sent: at(2001)})
	if h.ask(a, false, at(2002)) {
		t.Error("a retry of the backlog held after the outage's length")
	}
}

// TestShedWindowIsTheOutageUnderWays: the shed window opens for the
// outage just ended alone (a Retry-After told in an earlier one opens
// none after a short one that told none), and a request told a
// Retry-After since the host's return, while the others' latest failures
// say none, is singled out and not held when the host is down again.
func TestShedWindowIsTheOutageUnderWays(t *testing.T) {
	s, h, a, b := toldOutage()
	answerAt(s, h, 1001, 1)           // back: a window, to 2002 ms
	for i := range shedAfterRun - 2 { // after it, a second outage, shorter than shedAfterRun, that tells none
		failAt(s, b, 2100+10*i, 5*time.Millisecond)
	}
	answerAt(s, h, 2500, 1)
	if h.shedUntil.After(at(2500)) {
		t.Errorf("back from a short outage that told none: may shed until %v", h.shedUntil)
	}
	for i := range shedAfterRun - 2 { // a third
		failAt(s, b, 2600+10*i, 5*time.Millisecond)
	}
	s.failed("h", a, failure{at: at(3000), sent: at(2995), floor: time.Second})
	failAt(s, b, 3010, 5*time.Millisecond)
	if !h.provenDown(at(4000)) {
		t.Fatal("the third outage is not proven")
	}
	if h.ask(a, false, at(4000)) {
		t.Error("a retry told Retry-After since the return, the others' latest failures none, held")
	}
}

// TestStepsSkippedWhileTheHostShedsAreOwed: within the shed window a
// return opens, a held step skipped while the host is not down and the
// request's path answers is owed; not before the return, not once the
// host is down again, not for a path that has not answered, and not
// after the window.
func TestStepsSkippedWhileTheHostShedsAreOwed(t *testing.T) {
	s := newHostSet(DefaultReleaseShare)
	a, b, other := newMember(), newMember(), newMember()
	for i, m := range []*member{a, b} { // an outage told to come back at 1 s
		s.failed("h", m, failure{first: true, at: at(i), sent: at(i), floor: time.Second})
	}
	h := a.h
	if h.owes(a, at(500)) {
		t.Error("a step skipped in the outage owed")
	}
	answerAt(s, h, 1001, 1) // back: the window lasts to 2002 ms
	s.failed("h", other, failure{first: true, at: at(1002), sent: at(1002), path: "/dead"})
	failAt(s, b, 1003, time.Millisecond)
	for _, c := range []struct {
		m    *member
		ms   int
		want bool
	}{
		{a, 1004, true},      // the host sheds: its latest failure is newer than its answer
		{other, 1004, false}, // its path has not answered
		{a, 2002, false},     // the window is over
	} {
		if got := h.owes(c.m, at(c.ms)); got != c.want {
			t.Errorf("path %q at %d ms: owed %v, want %v", c.m.told.path, c.ms, got, c.want)
		}
	}
	for i := range 2 * downAfter { // down again (its short first run raises downRun), on another path: a's has not failed since it answered
		s.failed("h", b, failure{at: at(1100 + i), sent: at(1099 + i), path: "/other"})
	}
	if h.owes(a, at(1200)) {
		t.Error("a step skipped while the host is down again owed")
	}
}

// TestShedWindowOutlastsARelapse: a host back from an outage that, at
// its capacity, goes down again for a moment, and answers again, keeps
// the shed window its return opened: the backlog is still coming back.
// The window its second return opened, as long as that short relapse,
// took the first's place, and the held requests' steps were spent again
// (one shared Transport on loopback, seeds 1-4: 71-80% rescued, the
// lower when it relapsed; 79-80% since).
func TestShedWindowOutlastsARelapse(t *testing.T) {
	s, h, a, b := toldOutage()
	answerAt(s, h, 1001, 1)        // back: the window lasts to 2002 ms
	for i := range 3 * downAfter { // down again, long enough to open a window of its own (its short first run raised downRun)
		failAt(s, b, 1100+i, time.Millisecond)
	}
	if !h.down() {
		t.Fatal("the host is not down again")
	}
	if own := h.shedWindow(at(1200), ""); !own.Equal(at(1300)) {
		t.Fatalf("the relapse's own window ends at %v, want 1.3s", own.Sub(t0))
	}
	answerAt(s, h, 1200, 1) // back again
	for _, c := range []struct {
		ms   int
		want bool
	}{{1500, true}, {2002, false}} {
		if got := h.owes(a, at(c.ms)); got != c.want {
			t.Errorf("at %d ms: owed %v, want %v", c.ms, got, c.want)
		}
	}
}

// TestShedWindowOfAHostFailingMostAttemptsAtRandom: a host known to fail
// about 80% of attempts at random is down after 38 failures in a row, not
// 16 (see downRun), and its return opens a shed window only after twice
// that, as a host failing less does after twice 16: its runs of 32 are
// random, and the windows they opened held retries that plain backoff
// sent and had answered (300 drawn groups failing 70-95% at random: 186
// of 23,640 rescues lost, 155 now).
func TestShedWindowOfAHostFailingMostAttemptsAtRandom(t *testing.T) {
	s := newHostSet(DefaultReleaseShare)
	a, b := newMember(), newMember()
	ms := 0
	fails := func(n int) {
		for range n {
			ms++
			failAt(s, b, ms, time.Millisecond)
		}
	}
	s.failed("h", a, failure{first: true, at: at(0), sent: at(0)})
	h := a.h
	for range runWeight { // runs of 4 failures, each ended by an answer: 80%
		fails(4)
		ms++
		answerAt(s, h, ms, 1)
	}
	d := h.downRun()
	if d < 2*downAfter {
		t.Fatalf("downRun %d, want twice downAfter or more", d)
	}
	for _, c := range []struct {
		run   int
		opens bool
	}{{2*d - 1, false}, {2 * d, true}} {
		fails(c.run)
		ms++
		answerAt(s, h, ms, 1)
		if opens := h.shedUntil.After(at(ms)); opens != c.opens {
			t.Errorf("back after %d failures in a row: a shed window %v, want %v", c.run, opens, c.opens)
		}
	}
}

// toldOutage returns a host set whose host "h" has two requests, a and b,
// that failed at 0 and 1 ms as first attempts, told to come back at 1 s:
// an outage told a Retry-After, whose return opens a shed window.
func toldOutage() (s *hostSet, h *host, a, b *member) {
	s = newHostSet(DefaultReleaseShare)
	a, b = newMember(), newMember()
	for i, m := range []*member{a, b} {
		s.failed("h", m, failure{first: true, at: at(i), sent: at(i), floor: time.Second})
	}
	return s, a.h, a, b
}

// TestARandomFailureAfterAReturnIsNotAShed: a host back from an outage
// that opened a shed window sheds while one in shedOneIn or more of the
// attempts sent since its return failed, by more than chance (see
// failsAShare), not at any failure: one failure among six is a random
// one, and holds no backlog, nor do three in eight (a third, within a
// standard deviation of chance); five in ten do. So too back from an
// outage told a Retry-After, whose small clients come back as few.
func TestARandomFailureAfterAReturnIsNotAShed(t *testing.T) {
	for _, told := range []bool{false, true} {
		s := newHostSet(DefaultReleaseShare)
		a, b := newMember(), newMember()
		for i := range youngShedAfterRun { // the outage, 0 to 23 ms
			f := failure{at: at(i), sent: at(i).Add(-time.Millisecond)}
			if told {
				f.floor = time.Second
			}
			s.failed("h", []*member{a, b}[i%2], f)
		}
		h := a.h
		answerAt(s, h, youngShedAfterRun, 1) // back at 24 ms, the window open until 48 ms
		a.n = 2
		for ms := 25; ms < 30; ms++ { // five attempts sent since the return, answered
			h.answered(at(ms), "", nil, true, s.share, at(ms-1))
		}
		failAt(s, a, 30, time.Millisecond) // one in six failed
		if h.sheds(a) || h.ask(a, false, at(30)) {
			t.Errorf("told %v, one failure in six since the return: sheds %v, held %v; want neither", told, h.sheds(a), h.ask(a, false, at(30)))
		}
		failAt(s, a, 31, time.Millisecond)
		failAt(s, a, 32, time.Millisecond) // three in eight
		if h.sheds(a) || h.ask(a, false, at(32)) {
			t.Errorf("told %v, three failures in eight since the return: sheds %v, held %v; want neither", told, h.sheds(a), h.ask(a, false, at(32)))
		}
		failAt(s, a, 33, time.Millisecond)
		failAt(s, a, 34, time.Millisecond) // five in ten
		if !h.sheds(a) || !h.ask(a, false, at(34)) {
			t.Errorf("told %v, five failures in ten since the return: sheds %v, held %v; want both", told, h.sheds(a), h.ask(a, false, at(34)))
		}
	}
}
