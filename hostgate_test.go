package httpretry

import (
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
// flowing for flowGaps gaps after the last (see host.flowEnd).
func failing(n int) (*hostSet, []*member) {
	s := newHostSet(DefaultReleaseShare)
	ms := make([]*member, n)
	for i := range ms {
		ms[i] = newMember()
		s.failed("h", ms[i], failure{first: true, at: at(i), sent: at(i)})
	}
	ms[0].h.gaps = flowGaps
	return s, ms
}

// held asks the gate about m's retry at now, as stormState.hold does:
// whether the retry waits rather than going at once.
func held(h *host, m *member, now time.Time) bool {
	if !h.ask(m, m.last, now) {
		m.goes(now)
		return false
	}
	send, _ := h.poll(m, now)
	if send {
		m.goes(now)
	}
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
			ms[0].h.answered(at(5), nil, true, s.share, time.Time{})
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
	if send, wake := h.poll(ms[0], at(5)); send || !wake.Equal(stopped) {
		t.Errorf("poll = %v, wake at %v; want a wake once fresh requests count as stopped, at %v", send, wake.Sub(t0), stopped.Sub(t0))
	}
	if send, _ := h.poll(ms[1], stopped); send {
		t.Error("a retry that is not the oldest held probed")
	}
	if send, _ := h.poll(ms[0], stopped); !send {
		t.Fatal("the oldest held did not probe once fresh requests stopped")
	}
	if send, _ := h.poll(ms[1], stopped.Add(time.Second)); send {
		t.Error("a second probe went while the first one's outcome was awaited")
	}
	// The probe failed: the next held goes one of its own first backoffs
	// later (50 ms), as the host is down, not the usual gap.
	s.failed("h", ms[0], failure{first: false, at: stopped})
	next := stopped.Add(50 * time.Millisecond)
	if send, wake := h.poll(ms[1], stopped); send || !wake.Equal(next) {
		t.Errorf("the next held: send %v, wake %v; want a wake at %v", send, wake.Sub(t0), next.Sub(t0))
	}
	if send, _ := h.poll(ms[1], next); !send {
		t.Fatal("the next held did not probe its pace after the last")
	}
	// It answered: the host is up, and the answer to a retry from the
	// line earns its place back, so the next held goes at once.
	h.answered(next, ms[1], false, s.share, time.Time{})
	if send, _ := h.poll(ms[2], next); !send || !ms[2].fromLine {
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
	if send, _ := h.poll(ms[0], stopped); !send {
		t.Fatal("setup: the oldest held did not probe once fresh requests stopped")
	}
	s.failed("h", ms[0], failure{at: stopped})
	later := stopped.Add(30 * time.Millisecond)
	s.failed("h", ms[3], failure{at: later}) // a retry that was not held fails 30 ms after the probe
	next := later.Add(50 * time.Millisecond)
	if send, wake := h.poll(ms[1], stopped.Add(50*time.Millisecond)); send || !wake.Equal(next) {
		t.Errorf("a pace after the probe: send %v, wake at %v; want a wake a pace after the latest failure, at %v", send, wake.Sub(t0), next.Sub(t0))
	}
	if send, _ := h.poll(ms[1], next); !send || h.probing != ms[1] {
		t.Errorf("a pace after the latest failure: send %v; want the next held to probe", send)
	}
}

func TestGateSendsAHeldRequestsLastRetryWhenItsBackoffWould(t *testing.T) {
	s, ms := failing(3)
	h := ms[0].h
	for i := range downAfter { // failures seen in a row: the budget is asked about retries into the host
		failAt(s, ms[2], 3+i, 0)
	}
	held(h, ms[0], at(10_000)) // the line's probe, its outcome awaited
	last := ms[1]
	// Drawn at 10 s, its own waits end at 19 s; its backoff would send two
	// attempts meanwhile, each failing after 500 ms as its own did: one at
	// 15 s, into a host still down, the last at 20 s.
	last.drawn, last.own, last.step, last.took = at(10_000), ownSteps{count: 2, cum: []time.Duration{4500 * time.Millisecond, 9 * time.Second}}, 1, attemptTime{avg: 500 * time.Millisecond, timed: true}
	if !held(h, last, at(10_001)) {
		t.Fatal("a retry went before its backoff's end while a probe was out")
	}
	if send, wake := h.poll(last, at(10_002)); send || !wake.Equal(at(15_000)) {
		t.Errorf("send %v, wake at %v; want it held and looking again at its own next step, 15 s", send, wake.Sub(t0))
	}
	if send, _ := h.poll(last, at(15_000)); send {
		t.Error("its own step into a host that is down went")
	}
	if send, _ := h.poll(last, at(19_999)); send {
		t.Error("its last retry went before the time of its attempts was counted")
	}
	if send, _ := h.poll(last, at(20_000)); !send || last.askBudget {
		t.Errorf("at its backoff's end, with the host down: send %v, budget asked %v; want its last retry sent, as plain backoff's, the budget not asked", send, last.askBudget)
	}
	if !last.outlived(at(20_000)) || last.outlived(at(19_999)) {
		t.Error("outlived does not turn at the end of the request's own backoff")
	}
}

// TestGateLifeIsOverOnceItsLastRetryWent: a held request's last retry,
// sent at the end of its life, is its last however long its attempt takes
// to fail. The life's end was computed again from the request's attempt
// times after that failure, and a slow one moved it past the failure: a
// retry more, and requests on a host whose failures slowed from 10 ms to
// 2 s ended up to 3.5 s after plain backoff's end.
func TestGateLifeIsOverOnceItsLastRetryWent(t *testing.T) {
	s, ms := failing(2)
	h, m := ms[0].h, ms[1]
	secs := func(n int) time.Duration { return time.Duration(n) * time.Second }
	m.drawn, m.own, m.took = at(0), ownSteps{count: 6, cum: []time.Duration{secs(1), secs(2), secs(3), secs(4), secs(5), secs(6)}}, attemptTime{avg: 100 * time.Millisecond, timed: true}
	if held(h, m, at(6600)) { // 6 s of waits and six attempts of 100 ms
		t.Fatal("its last retry did not go at the end of its life")
	}
	failAt(s, m, 8600, 2*time.Second)
	if !m.outlived(at(8600)) {
		t.Errorf("its last attempt, 2 s long, moved the end of its life to %v", m.giveUp.Sub(t0))
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
		h.answered(at(20+i), nil, true, s.share, time.Time{})
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

func TestGateFailuresHalveTheShareOncePerRelease(t *testing.T) {
	s, ms := failing(4)
	h := ms[0].h
	if h.share != DefaultReleaseShare/2 {
		t.Fatalf("share %v after an outage's failures with no release, want halved once: %v", h.share, DefaultReleaseShare/2)
	}
	for _, m := range ms[1:] {
		held(h, m, at(10))
	}
	for i := range 5 { // 5/32 + 6/32 + 7/32 + 8/32 + 8/32: one release
		h.answered(at(20+i), nil, true, s.share, time.Time{})
	}
	if h.share != DefaultReleaseShare || !ms[1].released {
		t.Fatalf("share %v, released %v: the setup did not reach a release at full share", h.share, ms[1].released)
	}
	s.failed("h", ms[0], failure{first: false, at: at(60)})
	if h.share != DefaultReleaseShare/2 {
		t.Errorf("share %v after a failure that followed a release, want halved", h.share)
	}
	s.failed("h", ms[0], failure{first: false, at: at(61)})
	if h.share != DefaultReleaseShare/2 {
		t.Errorf("share %v after a second failure with no release between, want it halved once only", h.share)
	}
}

// TestGateHoldsARetryToldToWaitWhileDown: a retry whose failure came with
// a Retry-After while the host was down is held, though no outage is
// proven yet, and goes with the line once the host answers; without the
// Retry-After, the same failures hold no one.
func TestGateHoldsARetryToldToWaitWhileDown(t *testing.T) {
	for _, says := range []bool{true, false} {
		s := newHostSet(1)
		a, b := newMember(), newMember()
		s.failed("h", a, failure{first: true, saysWait: says, at: at(0)})
		s.failed("h", b, failure{first: true, saysWait: says, at: at(0)})
		h := a.h
		if h.ask(a, false, at(1000)) != says {
			t.Fatalf("Retry-After %v: held %v", says, !says)
		}
		if !says {
			continue
		}
		h.answered(at(1100), nil, true, s.share, time.Time{})
		h.answered(at(1101), nil, true, s.share, time.Time{})
		if !a.released {
			t.Error("the host answered twice at full share: the oldest held was not released")
		}
	}
}

// TestGateHeldStepGoesOnStaleNews: once fresh requests have stopped, a
// held retry's step goes unless an attempt sent after its own latest has
// failed since: the host being down is then old news, which alone it would
// not have. A probe that hung on a dead connection held two requests, whose
// host was back at 1 s, to their lives' end (200 at 6.2 s, off 1.4 s).
func TestGateHeldStepGoesOnStaleNews(t *testing.T) {
	for _, tc := range []struct {
		name     string
		failSent []int  // when other attempts that failed went, ms, each failing 1 ms later
		fresh    bool   // fresh requests came every 100 ms, and failed, before its attempt
		answered int    // when a fresh request was answered, ms; 0: none
		want     []bool // whether its steps at 1,010 and 1,450 ms go
	}{
		{"no failure sent after its own attempt: it goes", nil, false, 0, []bool{true}},
		{"another attempt sent after its own failed: it skips the step, and goes at the next", []int{980}, false, 0, []bool{false, true}},
		{"another failed after the step it skipped: it skips the next too", []int{980, 1200}, false, 0, []bool{false, false}},
		{"fresh requests keep coming: they probe, and it skips the steps", nil, true, 0, []bool{false, false}},
		{"fresh requests keep coming, answered since the latest failure: it goes", nil, true, 1000, []bool{true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newHostSet(DefaultReleaseShare)
			a, b, m := newMember(), newMember(), newMember()
			s.failed("h", a, failure{first: true, at: at(0), sent: at(0)})
			s.failed("h", b, failure{first: true, at: at(100), sent: at(100)}) // fresh requests 100 ms apart
			h := a.h
			if !held(h, a, at(120)) { // ahead of m in line: the line's probe would be a
				t.Fatal("the oldest went")
			}
			for ms := 200; tc.fresh && ms <= 900; ms += 100 {
				s.failed("h", newMember(), failure{first: true, at: at(ms), sent: at(ms)})
			}
			s.failed("h", m, failure{at: at(950), sent: at(950)}) // a retry of a request whose first attempt went long ago
			m.drawn, m.own, m.step = at(950), ownSteps{count: 3, cum: []time.Duration{60 * time.Millisecond, 500 * time.Millisecond, time.Second}}, 1
			if !held(h, m, at(950)) {
				t.Fatal("held retry went")
			}
			if tc.answered > 0 {
				h.answered(at(tc.answered), nil, true, s.share, time.Time{})
			}
			fails := tc.failSent
			for i, step := range []int{1010, 1450}[:len(tc.want)] {
				for len(fails) > 0 && fails[0] < step {
					s.failed("h", b, failure{at: at(fails[0] + 1), sent: at(fails[0])})
					fails = fails[1:]
				}
				if send, _ := h.poll(m, at(step)); send != tc.want[i] {
					t.Fatalf("at its step at %d ms: send %v, want %v", step, send, tc.want[i])
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
	if s.active.Load() != 1 || len(s.m) != 1 {
		t.Fatalf("active %d, map %d", s.active.Load(), len(s.m))
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
	if s.active.Load() != 0 || len(s.m) != 0 {
		t.Errorf("after every request left: active %d, map %d; want nothing kept", s.active.Load(), len(s.m))
	}
	// A request to the host that never failed finds nothing to update.
	s.answered("h", nil, true, time.Time{})
	if len(s.m) != 0 {
		t.Error("an answer created state")
	}
}

func TestGateLastRetryNudgesTheNextInLine(t *testing.T) {
	s, ms := failing(3)
	h := ms[0].h
	for _, m := range ms {
		m.policy = Policy{BaseDelay: 100 * time.Millisecond} // a first step of 50 ms at its mean
	}
	if held(h, ms[0], at(100)) {
		t.Fatal("the oldest did not probe once fresh requests stopped")
	}
	if !held(h, ms[1], at(101)) || !held(h, ms[2], at(101)) {
		t.Fatal("a retry went while the probe was out")
	}
	ms[1].giveUp, ms[2].giveUp = at(120), at(10_000)
	s.failed("h", ms[0], failure{first: false, at: at(110)}) // the next probe is due at 160 ms
	h.poll(ms[2], at(110))
	select {
	case <-ms[2].wake:
	default:
	}
	if send, _ := h.poll(ms[1], at(120)); !send {
		t.Fatal("ms[1]'s last retry was not sent at the end of its own backoff")
	}
	select {
	case <-ms[2].wake:
	default:
		t.Error("the next in line was not nudged when the one before it left for its last retry")
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
		h.ask(prober, false, at(100000)) // back in line after its own wait
		for _, m := range ms {
			if send, _ := h.poll(m, next); send {
				break
			}
		}
		now = next
	}
	h.answered(now, h.probing, false, s.share, time.Time{})
	if h.missed != 0 {
		t.Errorf("after an answer, %d failed probes still counted", h.missed)
	}
}

func TestGateKeepsALastRetryForItsLifesEnd(t *testing.T) {
	_, ms := failing(3)
	h := ms[0].h
	ms[0].last, ms[0].drawn = true, at(5_000) // the oldest: its held retry is its last
	if !held(h, ms[0], at(100)) {
		t.Fatal("a request's last retry went as the line's probe")
	}
	if held(h, ms[1], at(100)) {
		t.Error("the next held did not probe in place of a last retry")
	}
	if send, _ := h.poll(ms[0], at(4_999)); send {
		t.Error("the last retry went before its life's end")
	}
	if send, _ := h.poll(ms[0], at(5_000)); !send {
		t.Error("the last retry did not go at its life's end")
	}
}

func TestGateBudgetRefusalKeepsTheProbeInLine(t *testing.T) {
	_, ms := failing(3)
	h := ms[0].h
	ms[0].policy = Policy{BaseDelay: 100 * time.Millisecond}
	if held(h, ms[0], at(100)) || h.probing != ms[0] {
		t.Fatal("setup: the oldest did not probe")
	}
	h.refused(ms[0], at(100))
	if !ms[0].waiting || h.probing != nil || !h.nextProbe.Equal(at(150)) {
		t.Errorf("after a refusal: waiting %v, probe out %v, next probe at %v; want it in line, none out, the next a pace later (150 ms)",
			ms[0].waiting, h.probing != nil, h.nextProbe.Sub(t0))
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
			ms[0].fromLine, ms[1].waiting = true, true
			h.answered(at(tc.at), ms[0], false, s.share, time.Time{})
			if ms[1].released != tc.released || !tc.released && h.credit != DefaultReleaseShare/2 {
				t.Errorf("next in line released %v, credit %v; want released %v", ms[1].released, h.credit, tc.released)
			}
		})
	}
}

func TestGateNeverSendsAtOrPastTheDeadline(t *testing.T) {
	_, ms := failing(3)
	h := ms[0].h
	m := ms[1]
	m.drawn, m.hard = at(2_000), at(2_000) // no attempt timed: its life ends at the deadline itself
	held(h, m, at(100))
	if send, _ := h.poll(m, at(2_000)); send {
		t.Error("a held retry went at its deadline")
	}
	if send, _ := h.poll(m, at(1_999)); send {
		t.Error("a held retry went before its life's end")
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
		h.ask(prober, false, at(100000))
		now = h.nextProbe
		for _, m := range ms {
			if send, _ := h.poll(m, now); send {
				break
			}
		}
	}
	if !(paces[0] < paces[1] && paces[1] < paces[2]) {
		t.Errorf("paces after failed probes %v: want them to grow", paces)
	}
}

// inARow returns the times, in ms, of upAfter answers 10 ms apart
// from ms.
func inARow(ms int) []int {
	times := make([]int, upAfter)
	for i := range times {
		times[i] = ms + 10*i
	}
	return times
}

func TestGateHeldRetryGoesAtItsOwnStepsWhileTheHostAnswers(t *testing.T) {
	for _, tc := range []struct {
		name     string
		took     int   // ms an attempt takes
		shedding bool  // the host answered, then failed, before the polls: it sheds, it is not down
		answers  []int // when the host answers, ms
		floor    time.Duration
		polls    []int // when the held retry looks at the host, ms
		want     int   // the poll at which it goes; -1: none
	}{
		{"the host down at its step: it skips the step", 0, false, nil, 0, []int{11_000, 12_999}, -1},
		{"the host answered every attempt in a row before its step: it goes at the step", 0, false, inARow(10_300), 0, []int{10_999, 11_000}, 1},
		{"one answer fewer is not enough", 0, false, inARow(10_300)[1:], 0, []int{11_000}, -1},
		{"an answer within an attempt's time after its step into a host that was down: it goes then", 300, false, []int{11_400}, 0, []int{11_300, 11_400}, 1},
		{"answers later than that: it waits for its next step", 300, false, inARow(11_700), 0, []int{11_300, 11_800, 13_599, 13_600}, 3},
		{"a host that sheds gives no such time: it waits for its next step", 300, true, inARow(11_400), 0, []int{11_300, 11_500, 13_600}, 2},
		{"a life drawn with a Retry-After keeps to the line", 0, false, inARow(10_300), time.Second, []int{11_000}, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, ms := failing(6)
			h, m := ms[0].h, ms[5]
			held(h, ms[0], at(10_000))  // the line's probe, its outcome awaited
			for _, o := range ms[1:5] { // ahead of m in line: the releases the answers earn go to them
				held(h, o, at(10_000))
			}
			s.failed("h", newMember(), failure{at: at(10_000), sent: at(9_999)}) // news since m's attempt: the host is down
			h.took = attemptTime{avg: time.Duration(tc.took) * time.Millisecond, timed: true}
			m.took = h.took
			// Drawn at 10 s: its own steps come 1 s, 3 s and 6 s of waits later.
			m.drawn, m.own, m.step, m.floor = at(10_000), ownSteps{count: 3, cum: []time.Duration{time.Second, 3 * time.Second, 6 * time.Second}}, 1, tc.floor
			if !held(h, m, at(10_001)) {
				t.Fatal("held retry went")
			}
			if tc.shedding {
				h.answered(at(10_100), nil, true, s.share, time.Time{})
				s.failed("h", ms[1], failure{at: at(10_200)})
			}
			answers := tc.answers
			for i, p := range tc.polls {
				for len(answers) > 0 && answers[0] <= p {
					select {
					case <-m.wake:
					default:
					}
					h.answered(at(answers[0]), nil, true, s.share, time.Time{})
					answers = answers[1:]
				}
				if send, _ := h.poll(m, at(p)); send != (i == tc.want) {
					t.Fatalf("poll at %d ms: send %v, want %v", p, send, i == tc.want)
				}
				if i == tc.want {
					return
				}
			}
		})
	}
}

func TestGateNudgesEveryHeldRetryWhenTheHostIsBack(t *testing.T) {
	for _, tc := range []struct {
		name     string
		answerAt int
		want     bool // sent
	}{
		{"the host's first answer within an attempt's time of a step that found it down: it goes", 11_400, true},
		{"an answer later than that: it waits for its next step", 11_700, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, ms := failing(3)
			h, m := ms[0].h, ms[1]
			held(h, ms[0], at(10_000))
			h.took = attemptTime{avg: 300 * time.Millisecond, timed: true}
			m.took = h.took
			m.drawn, m.own, m.step = at(10_000), ownSteps{count: 2, cum: []time.Duration{time.Second, 2 * time.Second}}, 1
			held(h, m, at(11_300)) // its step, into a host that is down
			for len(m.wake) > 0 {
				<-m.wake
			}
			h.answered(at(tc.answerAt), nil, true, s.share, time.Time{})
			if len(m.wake) != 1 {
				t.Fatal("not nudged when the host came back")
			}
			if send, _ := h.poll(m, at(tc.answerAt)); send != tc.want {
				t.Errorf("sent %v, want %v", send, tc.want)
			}
		})
	}
}

func TestGateStepThatFoundTheHostDownCountsHoweverLateTheRetryLooks(t *testing.T) {
	s, ms := failing(3)
	h, m := ms[0].h, ms[1]
	held(h, ms[0], at(10_000)) // the line's probe, out
	h.took = attemptTime{avg: 100 * time.Millisecond, timed: true}
	m.took = h.took
	m.drawn, m.own, m.step = at(10_000), ownSteps{count: 3, cum: []time.Duration{time.Second, 3 * time.Second, 6 * time.Second}}, 1
	if !held(h, m, at(10_001)) {
		t.Fatal("held retry went")
	}
	// Its timer fires after the host's first answer.
	h.answered(at(11_150), nil, true, s.share, time.Time{}) // the host is back, 50 ms after its step at 11.1 s
	if send, _ := h.poll(m, at(11_151)); !send {
		t.Error("a step that found the host down 51 ms before it looked, within an attempt's 100 ms, did not go")
	}
}

func TestGateGraceIsAnAnsweredAttemptsTimeToo(t *testing.T) {
	s, ms := failing(3)
	h, m := ms[0].h, ms[1]
	held(h, ms[0], at(10_000))
	m.drawn, m.own, m.step = at(10_000), ownSteps{count: 2, cum: []time.Duration{time.Second, 2 * time.Second}}, 1
	held(h, m, at(11_000)) // its step, into a host that is down, whose failed attempts take no time
	h.answered(at(11_400), nil, true, s.share, at(10_900))
	if send, _ := h.poll(m, at(11_400)); !send {
		t.Error("a step 400 ms before an answer that took 500 ms did not go")
	}
}

func TestGateFindsTheNextStepAmongAHugeNumber(t *testing.T) {
	_, ms := failing(3)
	h, m := ms[0].h, ms[1]
	cum := make([]time.Duration, 64)
	for i := range cum {
		cum[i] = time.Duration(i + 1) // 1 ns apart, then as many more at the tail's 1 ns
	}
	m.drawn, m.own, m.step = at(10_000), ownSteps{count: 1 << 60, cum: cum, tail: 1}, 1
	came, next := h.stepCame(m, at(10_050))
	if !came || m.step != 50_000_001 || !next.Equal(at(10_050).Add(1)) {
		t.Errorf("came %v, next step %d at %v; want step 50,000,001 at 50 ms + 1 ns", came, m.step, next.Sub(at(10_000)))
	}
}

func TestGateHoldsOnlyOnceTheOutageIsProven(t *testing.T) {
	for _, tc := range []struct {
		name  string
		took  time.Duration // how long the failed attempts took; zero: not timed
		askAt int           // ms after the host went down
		want  bool
	}{
		{"no attempt timed", 0, 10_000, false},
		{"down for less than two attempts' time", 100 * time.Millisecond, 199, false},
		{"down for two attempts' time", 100 * time.Millisecond, 200, true},
		{"attempts that take next to no time", time.Microsecond, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newHostSet(DefaultReleaseShare)
			ms := []*member{newMember(), newMember()}
			for _, m := range ms {
				f := failure{first: true, at: at(0)}
				if tc.took > 0 {
					f.sent = at(0).Add(-tc.took)
				}
				s.failed("h", m, f)
			}
			if got := ms[0].h.ask(ms[1], false, at(tc.askAt)); got != tc.want {
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
	if h.ask(ms[1], false, at(300)) {
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
		h.answered(at(ms+i), nil, true, s.share, time.Time{})
	}
}

func TestGateHoldsAtOnceWhenAProvenHostFailsAgain(t *testing.T) {
	s := newHostSet(DefaultReleaseShare)
	ms := []*member{newMember(), newMember()}
	for i := range downAfter { // an outage of 16 failures, attempts taking 100 ms
		failAt(s, ms[i%2], i, 100*time.Millisecond)
	}
	h := ms[0].h
	if !h.ask(ms[1], false, at(250)) {
		t.Fatal("not held 250 ms into an outage of 100 ms attempts")
	}
	answerAt(s, h, 300, upAfter) // back, and up
	for i := range downAfter {   // shedding now
		failAt(s, ms[0], 400+i, 100*time.Millisecond)
	}
	if !h.ask(ms[1], false, at(420)) {
		t.Error("a retry into a host that fails again after a proven outage went unheld")
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
			failAt(s, ms[0], 0, 100*time.Millisecond) // two failures at random create the state,
			failAt(s, ms[1], 0, 100*time.Millisecond) // which starts down
			h := ms[0].h
			if !h.ask(ms[1], false, at(300)) {
				t.Fatal("not held by a state that starts down, 300 ms old")
			}
			answerAt(s, h, 1000, 50) // the host answers while both still retry
			for i := range downAfter {
				failAt(s, ms[0], 10_000+i, 100*time.Millisecond)
			}
			if got := h.ask(ms[1], false, at(tc.askAt)); got != tc.want {
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

// TestGateProbesPastARetryThatMayNotGoBetweenSteps: the oldest held retry,
// whose Retry-After, told again, would outlast its life, may not go
// between its steps; the next in line probes in its place, rather than
// none until the oldest's next step.
func TestGateProbesPastARetryThatMayNotGoBetweenSteps(t *testing.T) {
	s, ms := failing(3)
	h := ms[0].h
	s.failed("h", ms[2], failure{saysWait: true, at: at(3)}) // the host says Retry-After while down
	ms[0].floor, ms[0].drawn, ms[0].step = time.Second, at(5_000), 1
	ms[0].own = ownSteps{count: 1, cum: []time.Duration{5_500 * time.Millisecond}} // its last step at 10.5 s
	if !held(h, ms[0], at(10_000)) {
		t.Fatal("the oldest went between its steps, its Retry-After outlasting its life")
	}
	if held(h, ms[1], at(10_000)) || h.probing != ms[1] {
		t.Error("the next in line did not probe in the oldest's place")
	}
}

// TestGateFailureWithoutRetryAfterNudgesTheRetryItKept: once the host's
// latest failure no longer says Retry-After, the held retry that its
// Retry-After kept from going between its steps is nudged, and probes.
func TestGateFailureWithoutRetryAfterNudgesTheRetryItKept(t *testing.T) {
	s, ms := failing(3)
	h, m := ms[0].h, ms[0]
	s.failed("h", ms[2], failure{saysWait: true, at: at(3)})
	m.floor, m.drawn, m.step = time.Second, at(5_000), 1
	m.own = ownSteps{count: 1, cum: []time.Duration{5_500 * time.Millisecond}} // its last step at 10.5 s
	if !held(h, m, at(10_000)) {
		t.Fatal("setup: the retry went between its steps, its Retry-After outlasting its life")
	}
	for len(m.wake) > 0 {
		<-m.wake
	}
	s.failed("h", ms[2], failure{at: at(10_010)}) // a failure without Retry-After
	if len(m.wake) != 1 {
		t.Fatal("the held retry was not nudged")
	}
	if send, _ := h.poll(m, at(10_011)); !send || h.probing != m { // the usual gap after that failure
		t.Errorf("send %v, probing %v: want it to probe", send, h.probing == m)
	}
}

// TestRetryAfterWaitEndsAtTheLifesNextStep: a Retry-After's wait, its
// spread drawn again, ends at the held life's next step when that step
// comes first and no earlier than the server's wait; otherwise it stands.
func TestRetryAfterWaitEndsAtTheLifesNextStep(t *testing.T) {
	s := time.Second
	for _, tc := range []struct {
		name              string
		now, sent         time.Time
		between           bool
		wait, floor, want time.Duration
	}{
		{"the step first", at(0), time.Time{}, false, 2 * s, s / 2, s},
		{"the wait first", at(0), time.Time{}, false, s * 8 / 10, s / 2, s * 8 / 10},
		{"the step before the server's wait", at(0), time.Time{}, false, 2 * s, s * 3 / 2, 2 * s},
		{"no step left", at(3_000), time.Time{}, false, 2 * s, s / 2, 2 * s},
		{"off its steps", at(0), time.Time{}, true, 2 * s, s / 2, 2 * s},
		// Sent alone just before step 1, it stood for it: the next is step 2.
		{"after the step it stood for", at(958), at(954), false, s * 12 / 10, s, 1042 * time.Millisecond},
	} {
		m := &member{between: tc.between, life: life{drawn: t0, own: ownSteps{count: 2, cum: []time.Duration{s, 2 * s}}}}
		if got := m.toStepAfter(tc.now, tc.sent, tc.wait, tc.floor); got != tc.want {
			t.Errorf("%s: wait %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestRetryStandsForItsNearestStep: a retry at its own backoff's time
// stands for the step of its life nearest to when it went, so that a
// Retry-After it brings back puts off only the steps after that one.
func TestRetryStandsForItsNearestStep(t *testing.T) {
	s := time.Second
	m := &member{life: life{drawn: t0, own: ownSteps{count: 3, cum: []time.Duration{s, 2 * s, 3 * s}}}}
	for _, tc := range []struct {
		sent time.Time
		want int
	}{
		{at(0), 1}, {at(1_000), 1}, {at(1_200), 1}, {at(1_954), 2}, {at(2_000), 2},
		{at(2_600), 3}, {at(3_000), 3}, {at(3_500), 3},
	} {
		if got := m.stoodFor(tc.sent); got != tc.want {
			t.Errorf("sent at %v: step %d, want %d", tc.sent.Sub(t0), got, tc.want)
		}
	}
}

// TestRetrySentAtAStepStandsForThatStep: a retry the line sent at a step
// stands for that step, however its life is re-timed after (a review's
// hunt: a retry sent at step 3, judged by steps its first timed attempt
// moved later, was taken for step 2, and its Retry-After put the life off
// 330 ms past plain backoff's end); and it stands for the last only if
// that step is the last (one sent at the step but one was taken for the
// last, and its Retry-After's wait, 1.2 ms past the life's end, ended the
// life before the retry plain backoff sent there and got its 200 with).
func TestRetrySentAtAStepStandsForThatStep(t *testing.T) {
	s := time.Second
	m := &member{life: life{drawn: t0, own: ownSteps{count: 3, cum: []time.Duration{s, 2 * s, 3 * s}}, giveUp: at(3_000)}}
	m.sentAt = 3
	if got := m.stoodFor(at(1_900)); got != 3 {
		t.Errorf("sent at step 3, judged at 1.9 s: step %d, want 3", got)
	}
	m.sentAt = 2
	if m.standsForLast(at(2_600)) {
		t.Error("sent at step 2 of 3, taken for the last")
	}
	m.sentAt = 3
	if !m.standsForLast(at(2_600)) {
		t.Error("sent at the last step, not taken for it")
	}
	m.sentAt = 0
	if !m.standsForLast(at(2_600)) || m.stoodFor(at(1_900)) != 2 {
		t.Error("sent at its own backoff's time: judged by time as before")
	}
}
