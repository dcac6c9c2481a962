package httpretry

import (
	"math"
	"testing"
	"time"
)

// newTestGate returns a gate whose host failed at t0, with a probe step
// from 25 ms (50 ms after that failure) to 1 s.
func newTestGate(share float64) *hostGate {
	g := newHostGate(HostGate{ReleaseShare: share}, 25*time.Millisecond, time.Second, t0)
	g.fail(t0, true, 0)
	return g
}

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

var farLimit = t0.Add(time.Hour)

// noOwn is a held retry's own step long enough that its own bound never
// comes in these tests, which drive the shared schedule alone.
const noOwn = time.Hour

func TestGateLoneRequestProbesOnItsOwnSchedule(t *testing.T) {
	g := newTestGate(0)
	// The first failure made the next probe due 50 ms later; a retry
	// whose own backoff ends then goes without waiting.
	if w, refused := g.join(at(0), at(50), farLimit, 0, noOwn); w != nil || refused {
		t.Fatalf("first retry held: w=%v refused=%v", w, refused)
	}
	// Its failure doubles the step: the next probe is due 100 ms on.
	g.fail(at(50), false, 0)
	if st := g.state("h"); st.Failures != 2 || !st.NextProbe.Equal(at(150)) {
		t.Fatalf("after a failed probe: %+v", st)
	}
	if w, _ := g.join(at(50), at(150), farLimit, 0, noOwn); w != nil {
		t.Fatal("a retry whose backoff ends at the due time was held")
	}
}

func TestGateHoldsConcurrentRetriesAndProbesOnce(t *testing.T) {
	g := newTestGate(0)
	probe, _ := g.join(at(0), at(50), farLimit, 0, noOwn)
	if probe != nil {
		t.Fatal("the round's probe was held")
	}
	var held []*gateWaiter
	for range 5 {
		w, refused := g.join(at(10), at(75), farLimit, 0, noOwn)
		if w == nil || refused {
			t.Fatalf("a second retry in the same round was not held")
		}
		held = append(held, w)
	}
	// The oldest keeps the clock; the others sleep until nudged.
	send, wake := g.poll(at(75), held[0])
	if send || !wake.Equal(at(100)) {
		t.Fatalf("oldest: send=%v wake=%v, want a wake at the next round", send, wake)
	}
	if send, wake := g.poll(at(75), held[1]); send || !wake.IsZero() {
		t.Fatalf("second: send=%v wake=%v, want to sleep until nudged", send, wake)
	}
	// Fresh first attempts keep failing after the round is due: they stand
	// in for the probe and push the schedule out. This one came while
	// retries were held, so first attempts flow: no probe goes before a
	// pause that one gap of 100 ms makes unlikely, capped at the 1 s cap.
	g.fail(at(100), true, 0)
	if send, wake := g.poll(at(100), held[0]); send || !wake.Equal(at(1100)) {
		t.Fatalf("a failing first attempt did not stand in for the probe: send=%v wake=%v", send, wake)
	}
	// No first attempt at the next due time: the oldest goes as the probe,
	// the next one takes over the clock.
	_, wake = g.poll(at(100), held[0])
	if send, _ := g.poll(wake, held[0]); !send {
		t.Fatal("no probe went when none stood in")
	}
	select {
	case <-held[1].ch:
	default:
		t.Fatal("the new oldest waiter was not nudged")
	}
	if send, _ := g.poll(wake, held[1]); send {
		t.Fatal("two probes in one round")
	}
}

func TestGateReleasesAtTheShareOfFirstSuccesses(t *testing.T) {
	g := newTestGate(0.4)
	var held []*gateWaiter
	g.join(at(0), at(50), farLimit, 0, noOwn) // the first round's probe
	for range 20 {
		w, _ := g.join(at(1), at(1), farLimit, 0, noOwn)
		held = append(held, w)
	}
	released := func() (n int) {
		for _, w := range held {
			if w.released {
				n++
			}
		}
		return n
	}
	// The host answers: the share starts at half (0.2) and grows by 0.05
	// per success up to 0.4.
	g.ok(at(10), true)
	if n := released(); n != 0 {
		t.Fatalf("%d released at once on recovery, want 0: never all at once", n)
	}
	for i := range 10 {
		g.ok(at(11+i), true)
	}
	// credit: 0.2, then +0.25 +0.3 +0.35 +0.4×7 = 3.9: 3 released.
	if n := released(); n != 3 {
		t.Fatalf("released %d after 11 first successes, want 3", n)
	}
	for i, w := range held {
		if w.released != (i < 3) {
			t.Fatalf("release out of order at %d", i)
		}
	}
	// A released retry's own success releases nothing more.
	g.ok(at(30), false)
	if n := released(); n != 3 {
		t.Fatalf("a retry's success released another: %d", n)
	}
	// A failure halves the share (0.4 → 0.2).
	g.fail(at(31), false, 0)
	if st := g.state("h"); st.Share != 0.2 || !st.Recovering {
		t.Fatalf("after one failure while recovering: %+v", st)
	}
	// Three in a row: the host is down again.
	g.fail(at(32), true, 0)
	g.fail(at(33), true, 0)
	if st := g.state("h"); st.Recovering {
		t.Fatalf("three failures in a row did not close the gate: %+v", st)
	}
	g.ok(at(40), true)
	g.ok(at(41), true)
	if n := released(); n != 3 {
		t.Fatalf("%d released right after the gate closed and reopened, want 3", n)
	}
}

func TestGateRetryAfterSetsTheReopeningForEveryone(t *testing.T) {
	g := newTestGate(0)
	g.join(at(0), at(50), farLimit, 0, noOwn) // probe
	w, _ := g.join(at(0), at(10), farLimit, 0, noOwn)
	g.fail(at(0), false, 2*time.Second)
	// A retry whose limit comes before the reopening is refused at once.
	if w2, refused := g.join(at(1), at(10), at(1500), 0, noOwn); w2 != nil || !refused {
		t.Fatalf("a retry that cannot outlast the Retry-After was not refused")
	}
	if send, wake := g.poll(at(100), w); send || !wake.Equal(at(2000)) {
		t.Fatalf("oldest before Retry-After: send=%v wake=%v, want 2s", send, wake)
	}
	// A first attempt succeeding early does not release anyone before it.
	for i := range 10 {
		g.ok(at(500+i), true)
	}
	if w.released {
		t.Fatal("released before the Retry-After time")
	}
	if send, _ := g.poll(at(2000), w); !send {
		t.Fatal("not released at the Retry-After time")
	}
}

func TestGateLeaveNudgesTheNextAndKeepsOrder(t *testing.T) {
	g := newTestGate(0)
	g.join(at(0), at(50), farLimit, 0, noOwn) // probe
	a, _ := g.join(at(0), at(0), farLimit, 0, noOwn)
	b, _ := g.join(at(0), at(0), farLimit, 0, noOwn)
	g.leave(at(5), a)
	select {
	case <-b.ch:
	default:
		t.Fatal("the new oldest waiter was not nudged")
	}
	if st := g.state("h"); st.Held != 1 {
		t.Fatalf("held %d, want 1", st.Held)
	}
	g.leave(at(6), a) // twice: no effect
	if st := g.state("h"); st.Held != 1 {
		t.Fatalf("held %d after a second leave, want 1", st.Held)
	}
}

func TestGateRetiresWhenQuiet(t *testing.T) {
	g := newTestGate(0)
	if g.ok(at(10), true) {
		t.Fatal("retired right after a failure")
	}
	if !g.ok(t0.Add(DefaultGateQuiet), true) {
		t.Fatal("not retired after a quiet period with nothing held")
	}
}

func TestGateSetCostsNothingWhileNoHostFails(t *testing.T) {
	s := newGateSet(HostGate{}, 25*time.Millisecond, time.Second)
	s.ok("a", true) // no gate: nothing to do
	if s.active.Load() != 0 {
		t.Fatal("a gate appeared without a failure")
	}
	g := s.fail("a", t0, true, 0)
	if s.active.Load() != 1 || len(s.states()) != 1 {
		t.Fatal("the failing host has no gate")
	}
	g.ok(t0.Add(DefaultGateQuiet), true)
	s.retire("a", g, t0.Add(DefaultGateQuiet))
	if s.active.Load() != 0 || len(s.states()) != 0 {
		t.Fatal("the quiet gate was not removed")
	}
	if w, _ := g.join(t0, t0, farLimit, 0, noOwn); w != nil {
		t.Fatal("a retired gate held a retry")
	}
}

func TestGateHoldsProbesWhileFirstAttemptsFlow(t *testing.T) {
	// A step that stays short and a cap of 10 s, so that the pause rules.
	g := newHostGate(HostGate{}, time.Millisecond, 10*time.Second, t0)
	g.fail(t0, true, 0)
	// A lone request probes on its own schedule: nothing has shown yet
	// that first attempts come while it waits.
	if w, _ := g.join(at(0), at(50), farLimit, 0, noOwn); w != nil {
		t.Fatal("a lone request's probe was held")
	}
	g.fail(at(50), false, 0)
	if w, _ := g.join(at(50), at(150), farLimit, 0, noOwn); w != nil {
		t.Fatal("the second probe was held before any first attempt came")
	}
	// A first attempt comes while that retry is pending (cleared, not yet
	// sent): demand flows without waiting for answers.
	g.fail(at(100), true, 0)
	g.fail(at(150), false, 0)
	// A probe now waits for a pause that one gap of 100 ms makes unlikely:
	// 49 gaps. The next retry is held though its backoff and step passed.
	w, _ := g.join(at(150), at(300), farLimit, 0, noOwn)
	if w == nil {
		t.Fatal("a probe went while first attempts flow")
	}
	if send, wake := g.poll(at(300), w); send || !wake.Equal(at(5000)) {
		t.Fatalf("send=%v wake=%v, want a wake 4.9 s after the latest first attempt", send, wake)
	}
	// More gaps, better known: after four (mean 150 ms) the pause is 6.64
	// of them, about 996 ms. Failing first attempts no longer lengthen the
	// step: they hold the probes instead.
	step := g.step
	g.fail(at(400), true, 0)
	g.fail(at(500), true, 0)
	g.fail(at(600), true, 0)
	if g.step != step {
		t.Fatalf("first attempts that flow lengthened the step from %v to %v", step, g.step)
	}
	send, wake := g.poll(at(600), w)
	if want := at(1596); send || wake.Sub(want).Abs() > time.Millisecond {
		t.Fatalf("send=%v wake=%v, want a wake at about %v", send, wake, want)
	}
	// Once first attempts stop for that long, the probe goes.
	if send, _ := g.poll(wake, w); !send {
		t.Fatal("no probe went once first attempts stopped")
	}
}

func TestGateLoneRequestsNeverShowFlow(t *testing.T) {
	g := newTestGate(0)
	// Requests one at a time: each first attempt comes after the previous
	// request ended, so they never show demand that does not wait.
	for ms := 0; ms < 500; ms += 100 {
		if w, _ := g.join(at(ms), at(ms+60), farLimit, 0, noOwn); w != nil {
			g.leave(at(ms+60), w)
		} else {
			g.fail(at(ms+60), false, 0)
		}
		g.fail(at(ms+100), true, 0)
	}
	if !g.flowing().IsZero() {
		t.Fatalf("requests one at a time were taken for flowing demand")
	}
	// Two at once do show it.
	if w, _ := g.join(at(500), at(560), farLimit, 0, noOwn); w == nil {
		g.fail(at(530), true, 0)
	} else {
		g.fail(at(530), true, 0)
		g.leave(at(560), w)
	}
	if g.flowing().IsZero() {
		t.Fatal("a first attempt while a retry was pending did not show flow")
	}
}

func TestPauseFactorIsThePredictiveTail(t *testing.T) {
	for n := 1; n < len(pauseFactor); n++ {
		want := float64(n) * (math.Pow(50, 1/float64(n)) - 1)
		if math.Abs(pauseFactor[n]-want) > 0.006 {
			t.Errorf("pauseFactor[%d] = %v, want %.3f", n, pauseFactor[n], want)
		}
	}
}

func TestGateRetriesRandomFailuresAtTheirRate(t *testing.T) {
	g := newTestGate(0.25)
	// An outage: first attempts fail for a while...
	for ms := 10; ms <= 500; ms += 10 {
		g.fail(at(ms), true, 0)
	}
	// ...then the host answers. Those failures are not random ones: the
	// first release credit is the slow start's alone.
	g.ok(at(510), true)
	if got := g.perSuccess(); got != 0.125 {
		t.Fatalf("credit per success right after an outage = %v, want the start share 0.125", got)
	}
	// A host that fails about 30% of first attempts at random: each success
	// earns enough to retry each failure once, with many held too.
	for i := range 400 {
		now := at(520 + i)
		if i%10 < 3 {
			g.fail(now, true, 0)
			g.ok(now, false) // its retry went through: the gate stays open
		} else {
			g.ok(now, true)
		}
	}
	for range 6 {
		g.join(at(920), at(930), farLimit, 0, noOwn)
	}
	if len(g.waiters) <= gateSmallBacklog {
		t.Fatalf("%d held, want a backlog", len(g.waiters))
	}
	f := g.firstFails
	if f < 0.2 || f > 0.4 {
		t.Fatalf("first-attempt failure share %v, want about 0.3", f)
	}
	if got, want := g.perSuccess(), f/(1-f); math.Abs(got-want) > 1e-9 || got <= g.cfg.share() {
		t.Fatalf("credit per success %v, want f/(1-f) = %v, above the share", got, want)
	}
}
