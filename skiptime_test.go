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

// TestSkippedStepWaitsTheLongestRetryAfterTheHostSays: a skipped step of a
// request told a Retry-After waits the longest the host has said since it
// last answered, as plain backoff's attempt there may be told the next
// window of a rate limit, not the rest of the one it was told (a review's
// drawn windows: 535 of 2,864 rescues lost when steps waited the 30 ms
// left of A's window, 194 now); a request never told one waits none of
// the others', as its own backoff bounds it.
func TestSkippedStepWaitsTheLongestRetryAfterTheHostSays(t *testing.T) {
	s, ms := failing(3)
	a, b, c := ms[0], ms[1], ms[2]
	s.failed("h", b, failure{at: at(10), sent: at(5), floor: 2 * time.Second})
	s.failed("h", a, failure{at: at(20), sent: at(15), floor: 30 * time.Millisecond})
	if got := a.h.skipTime(a).floor; got != 2*time.Second {
		t.Errorf("told 30ms after the host said 2s: the step waits %v, want 2s", got)
	}
	if got := a.h.skipTime(c).floor; got != 0 {
		t.Errorf("never told one: the step waits %v, want none", got)
	}
	a.h.answered(at(30), nil, true, DefaultReleaseShare, time.Time{})
	s.failed("h", b, failure{at: at(40), sent: at(35), floor: 50 * time.Millisecond})
	s.failed("h", a, failure{at: at(50), sent: at(45), floor: 30 * time.Millisecond})
	if got := a.h.skipTime(a).floor; got != 50*time.Millisecond {
		t.Errorf("after an answer the host said 50ms: the step waits %v, want 50ms", got)
	}
}
