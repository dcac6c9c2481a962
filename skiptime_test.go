package httpretry

import (
	"testing"
	"time"
)

// What a held request's skipped step stands for (skipTimes), with the
// time passed in.

// TestSkippedStepDrainsAsTheOthersLatestResponse: a skipped step counts in
// its time the drain of the latest failed response of another request to
// the host, no more than the request's own average, and the rest of its
// own in its drift only.
func TestSkippedStepDrainsAsTheOthersLatestResponse(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		name            string
		own, other, its time.Duration // m's drain, then another's, then m's again
		step            time.Duration
	}{
		{"the others drain as long", 70 * ms, 70 * ms, 70 * ms, 70 * ms},
		{"the others drain faster", 100 * ms, 0, 100 * ms, 0}, // its own slow drain puts no later step late
		{"the others drain slower", 20 * ms, 90 * ms, 20 * ms, 20 * ms},
		{"its own latest is not the others'", 60 * ms, 40 * ms, 100 * ms, 40 * ms},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, ms := failing(2)
			st, m, other := &stormState{hosts: s}, ms[0], ms[1]
			st.drained(m, c.own)
			st.drained(other, c.other)
			st.drained(m, c.its)
			skip := m.h.skipTime(m)
			if skip.stepDrain != c.step || skip.drain != m.drains.avg {
				t.Errorf("step drains %v, drift %v; want %v and its own average %v", skip.stepDrain, skip.drain, c.step, m.drains.avg)
			}
		})
	}
}

// TestSkippedStepWaitsARetryAfterOnlyWhileTheHostSaysOne: a skipped step
// stands for a retry that would be told what the host's latest failure
// was told: the next step waits the request's Retry-After while the host
// says one, its own backoff once it stops.
func TestSkippedStepWaitsARetryAfterOnlyWhileTheHostSaysOne(t *testing.T) {
	s, ms := failing(2)
	m, other := ms[0], ms[1]
	s.failed("h", m, failure{at: at(10), sent: at(5), floor: time.Second})
	if got := m.h.skipTime(m).floor; got != time.Second {
		t.Fatalf("the host says Retry-After: the step waits %v, want 1s", got)
	}
	s.failed("h", other, failure{at: at(20), sent: at(15)})
	if got := m.h.skipTime(m).floor; got != 0 {
		t.Errorf("the host's latest failure says none: the step waits %v, want its own backoff", got)
	}
}

// TestSkippedStepOfARequestWithoutADrainDrainsAsTheOthers: a request whose
// failures had no body (resets) has no drain of its own to stand for; its
// skipped steps drain as the others' latest, in its time and its drift.
func TestSkippedStepOfARequestWithoutADrainDrainsAsTheOthers(t *testing.T) {
	s, ms := failing(2)
	st, m, other := &stormState{hosts: s}, ms[0], ms[1]
	st.drained(other, 70*time.Millisecond)
	if skip := m.h.skipTime(m); skip.stepDrain != 70*time.Millisecond || skip.drain != 70*time.Millisecond {
		t.Errorf("step drains %v, drift %v; want the others' 70ms in both", skip.stepDrain, skip.drain)
	}
}

// TestSkippedStepWaitsTheLongestRetryAfterItsPathWasTold: a skipped step
// of a request told a Retry-After waits the longest that the retrying
// requests to its path were told last, as plain backoff's attempt there
// may be told a rate limit's next window, not the rest of the one it was
// told: one told since it was, or before with the same end (the window
// it was told too). One told before that ends elsewhere (a long one its
// request may still be waiting), another path's, one over MaxRetryAfter
// (never heeded), and, for a request never told one, any, count for
// nothing.
func TestSkippedStepWaitsTheLongestRetryAfterItsPathWasTold(t *testing.T) {
	ms := time.Millisecond
	s, members := failing(6)
	a, b, c, d, e, g := members[0], members[1], members[2], members[3], members[4], members[5]
	floor := func(m *member) time.Duration { return m.h.skipTime(m).floor }
	s.failed("h", e, failure{at: at(5), sent: at(4), floor: 20 * time.Second})
	s.failed("h", a, failure{at: at(10), sent: at(5), floor: 30 * ms})
	s.failed("h", b, failure{at: at(20), sent: at(15), floor: 2 * time.Second})
	s.failed("h", c, failure{at: at(22), sent: at(16), floor: time.Hour, overCap: true})
	s.failed("h", d, failure{at: at(24), sent: at(17), floor: 20 * time.Second, path: "/slow"})
	if got := floor(a); got != 2*time.Second {
		t.Errorf("told 30ms, another request to its path 2s since: the step waits %v, want 2s", got)
	}
	s.failed("h", b, failure{at: at(2100), sent: at(2095), floor: 500 * ms})
	if got := floor(a); got != 500*ms {
		t.Errorf("the other was told 500ms since: the step waits %v, want 500ms", got)
	}
	s.failed("h", a, failure{at: at(4000), sent: at(3995), floor: 30 * ms})
	if got := floor(a); got != 30*ms {
		t.Errorf("told 30ms after the others' ended: the step waits %v, want 30ms", got)
	}
	s.failed("h", g, failure{at: at(3050), sent: at(3045), floor: time.Second}) // told before a, ending with a's
	if got := floor(a); got != time.Second {
		t.Errorf("another told 1s of the window a was told the end of: the step waits %v, want 1s", got)
	}
	s.failed("h", c, failure{at: at(4100), sent: at(4095)})
	if got := floor(c); got != 0 {
		t.Errorf("never told one: the step waits %v, want none", got)
	}
}

// TestSkippedStepWaitsItsRetryAfterWhileTheHostBackSheds: a held request
// told a Retry-After through an outage, whose step is skipped once the
// host, back, sheds attempts sent since (a fleet told one date coming back
// to a host at its capacity), waits that Retry-After again before its
// next step, though the sheds say none (as a failure saying one would
// make it wait), but no longer than its policy's MaxDelay, the longest
// plain backoff's own wait there; not once the host is down again, an
// outage that said none, nor once it answers downAfter in a row.
func TestSkippedStepWaitsItsRetryAfterWhileTheHostBackSheds(t *testing.T) {
	s, ms := failing(2)
	m, other := ms[0], ms[1]
	s.failed("h", m, failure{at: at(10), sent: at(5), floor: time.Second})
	s.failed("h", other, failure{at: at(20), sent: at(15), floor: time.Second})
	answerAt(s, m.h, 2000, 1)                // back
	failAt(s, other, 2010, time.Millisecond) // a shed, saying no Retry-After
	if got := m.h.skipTime(m).floor; got != time.Second {
		t.Errorf("back and shedding: the step waits %v, want the 1s it was told", got)
	}
	m.policy = Policy{MaxDelay: 300 * time.Millisecond}
	if got := m.h.skipTime(m).floor; got != 300*time.Millisecond {
		t.Errorf("back and shedding, MaxDelay 300ms: the step waits %v, want 300ms", got)
	}
	m.policy = Policy{}
	for i := range downAfter {
		failAt(s, other, 2020+i, time.Millisecond)
	}
	if got := m.h.skipTime(m).floor; got != 0 {
		t.Errorf("down again, saying no Retry-After: the step waits %v, want its own backoff", got)
	}
	answerAt(s, m.h, 3000, downAfter+1) // back, and calm
	if got := m.h.skipTime(m).floor; got != 0 {
		t.Errorf("back and answering %d in a row: the step waits %v, want its own backoff", downAfter, got)
	}
}
