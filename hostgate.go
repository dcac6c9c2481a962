package httpretry

import (
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of a HostGate whose fields are left at zero.
const (
	// DefaultReleaseShare is the most held retries released per first
	// attempt that succeeds while a host recovers. The host's spare
	// capacity is unknown to a client; 0.25 adds at most a quarter to the
	// load the host served before it failed, which drains held retries
	// fast enough to rescue most of them within their retry horizon and
	// keeps a host at 70% load below its capacity, even when random
	// arrivals bunch (the storm simulator's sweep, in the README, shows
	// the trade-off).
	DefaultReleaseShare = 0.25
	// DefaultGateQuiet is how long a host must go without a retryable
	// failure, and without held retries, before its gate is removed and
	// its requests pay nothing again.
	DefaultGateQuiet = time.Second
)

// Tuning of the gate's slow start, as fractions of the release share.
const (
	gateStartShare = 0.5   // a recovering host starts at half the share...
	gateGrowth     = 0.125 // ...grows by an eighth of it per success...
	gateMinShare   = 0.125 // ...and is never halved below an eighth of it
	gateFailStreak = 3     // this many failures in a row: the host is down again

	gateSmallBacklog = 2 // held retries up to which a recovering host lets each keep about its own backoff
	gateGapSamples   = 8 // the gap between first attempts averages about this many
)

// HostGate configures per-host coordination of retries. Its zero value is
// on with the default numbers.
//
// After a retryable failure from a host, the retries of all the requests
// to that host wait on one shared schedule instead of each probing the host
// on its own. While the host is failing, first attempts still flow (they
// are never gated or delayed) and tell whether it is back; a held retry
// goes as a probe only when the schedule's step has passed since the last
// failure. The step starts at a quarter of the Policy's base delay and
// doubles with every failure up to the Policy's cap, so a lone request
// keeps about its own backoff. Once first attempts have come while retries
// of the host were waiting (demand that does not wait for answers, unlike
// a client whose requests run one at a time), no held retry probes until
// first attempts stop: none for a pause that arrivals at their usual rate
// exceed only one time in fifty, up to the Policy's cap; their failures
// then no longer lengthen the step.
// A Retry-After from the host sets the time before which no held retry
// goes, for every waiter.
//
// Once the host answers, held retries are released oldest first at a pace
// tied to the host's own successes: each first attempt that succeeds
// releases up to ReleaseShare of a held retry. The share starts at half,
// grows with every success and halves with every failure (slow start and
// backoff, as TCP does); three failures in a row close the gate again.
// When no first attempts come at all, the oldest held retry goes on its
// own after a step and four times the usual gap between first attempts,
// or sooner: once one un-jittered backoff step past its own backoff, when
// the host has given no news (no failure while failing, no first attempt
// while recovering with a small backlog, no held retry sent) for that step
// times the number of held retries. A client with a few requests thus keeps
// about their own backoff, while many held retries together send about
// what one would.
// A held retry never waits past its request's deadline, MaxElapsed, or
// its retry horizon (MaxRetries times the Policy's cap); one that would
// returns its last outcome with StopHostGate: the last response, its body
// kept in memory, when that body was at most a few KiB; otherwise an
// *Error that describes it, since a longer body was not kept.
//
// Nothing is held or counted for a host that is not failing: a request to
// such a host pays one atomic load. A waiting retry costs a timer, not a
// goroutine.
type HostGate struct {
	// Off turns per-host coordination off: each request backs off on its
	// own.
	Off bool
	// ReleaseShare is the most held retries released per successful first
	// attempt while the host recovers. Zero or negative means
	// DefaultReleaseShare.
	ReleaseShare float64
}

// share resolves ReleaseShare.
func (c HostGate) share() float64 {
	if c.ReleaseShare <= 0 {
		return DefaultReleaseShare
	}
	return c.ReleaseShare
}

// GateState is a snapshot of one host's gate, for metrics.
type GateState struct {
	// Host is the gated host, as in the request URL (host or host:port).
	Host string
	// Recovering is true once the host answers again and held retries are
	// being released; false while it is failing.
	Recovering bool
	// Held is the number of retries waiting at the gate.
	Held int
	// Failures is the number of retryable failures since the host last
	// answered.
	Failures int
	// Share is the current release share (recovering only).
	Share float64
	// NextProbe is the earliest time a held retry may probe a failing
	// host, Retry-After included.
	NextProbe time.Time
}

// gateWaiter is one held retry.
type gateWaiter struct {
	// ch is nudged (never closed) when the waiter should look at the gate
	// again: it was released, or it became the oldest waiter.
	ch       chan struct{}
	released bool
	queued   bool
	probeAt  time.Time     // the waiter probes a failing host no earlier
	ownAt    time.Time     // a step past the end of its own backoff
	ownStep  time.Duration // its own un-jittered backoff step
}

// nudge wakes w without blocking; one pending nudge is enough.
func (w *gateWaiter) nudge() {
	select {
	case w.ch <- struct{}{}:
	default:
	}
}

// hostGate is the state machine of one failing host. Every method takes
// the time as a value, so tests drive it without a clock. Its mutex is
// taken only by requests to a host that is failing or recovering.
type hostGate struct {
	mu               sync.Mutex
	cfg              HostGate
	minStep, maxStep time.Duration // bounds of step

	recovering bool
	retired    bool          // removed from its gateSet; no longer used
	failures   int           // retryable failures since the host last answered
	step       time.Duration // probe spacing: doubled by failures, halved by successes
	nextProbe  time.Time     // failing: no probe before; recovering: no idle release before
	lastFirst  time.Time     // the latest first attempt's outcome
	lastPop    time.Time     // the latest held retry sent
	pending    time.Time     // a retry cleared at join is sent no later than this
	lastFlow   time.Time     // the latest first attempt that came while a retry was pending
	gap        time.Duration // moving average of the time between first attempts
	gaps       int           // samples in gap, up to gateGapSamples
	firstFails float64       // moving average of first attempts failing (0 to 1)
	reopen     time.Time     // Retry-After: nothing released before
	lastFail   time.Time
	share      float64
	credit     float64
	failStreak int
	waiters    []*gateWaiter // oldest first
}

// newHostGate returns the gate of a host whose first failure is about to
// be recorded at now. The probe step starts at minStep and is doubled by
// each failure up to maxStep: a transport gives half its backoff's base, so
// that a lone request, whose retries are the probes, keeps to about its own
// schedule: after n failures the step is half of that retry's backoff.
func newHostGate(cfg HostGate, minStep, maxStep time.Duration, now time.Time) *hostGate {
	return &hostGate{cfg: cfg, minStep: minStep, maxStep: max(maxStep, minStep), step: minStep, nextProbe: now, lastFail: now}
}

// noteFirst records at now a first attempt's outcome, failed or not.
// g.mu is held.
func (g *hostGate) noteFirst(now time.Time, failed bool) {
	if len(g.waiters) > 0 || now.Before(g.pending) {
		// Demand that does not wait for the host's answers: a client whose
		// requests run one at a time never sends a first attempt while
		// one of its retries is pending.
		g.lastFlow = now
	}
	if !g.lastFirst.IsZero() {
		// The mean of the first samples, then a moving average of the
		// latest ones: a single early sample is as likely short as long.
		g.gaps = min(g.gaps+1, gateGapSamples)
		n := time.Duration(g.gaps)
		g.gap = ((n-1)*g.gap + max(now.Sub(g.lastFirst), 0)) / n
	}
	g.lastFirst = now
	x := 0.0
	if failed {
		x = 1
	}
	g.firstFails += (x - g.firstFails) / 20
}

// perSuccess is the release credit a first attempt's success earns: the
// share, or, on a host that answers but fails a share f of first attempts
// at random, enough to retry each of them once (f/(1-f) retries per
// success, up to two), whatever the backlog. f counts only the first
// attempts since the host answered again (see ok), so that an outage's
// failures do not turn into a burst of releases after it; a recovered host
// that sheds an overload fails first attempts too, but each failure also
// halves the share and three in a row close the gate. g.mu is held.
func (g *hostGate) perSuccess() float64 {
	f := min(g.firstFails, 2.0/3)
	return max(g.share, f/(1-f))
}

// fail records a retryable failure at now; first says whether it was a
// first attempt, retryAfter > 0 is the host's Retry-After. While the host
// is failing every retry sent is a probe, so its failure lengthens the
// schedule; a first attempt's does too until first attempts are seen to
// flow (see flowing), which then holds the probes. A lone request's
// retries thus keep about their own backoff.
func (g *hostGate) fail(now time.Time, first bool, retryAfter time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.lastFail = now
	if first {
		g.noteFirst(now, true)
	}
	g.failures++
	if !first || g.lastFlow.IsZero() {
		// Once first attempts flow, flowing holds the probes while they
		// fail; lengthening the step with each of them too would only
		// space out the probes of the few held retries that remain when
		// they stop.
		g.step = min(2*g.step, g.maxStep)
	}
	if g.recovering {
		g.failStreak++
		g.share = max(g.share/2, gateMinShare*g.cfg.share())
		g.credit = min(g.credit, g.share)
		if g.failStreak >= gateFailStreak || retryAfter > 0 {
			g.recovering, g.credit = false, 0
			g.nextProbe = now.Add(g.step)
		}
	} else {
		// Every failure, a fresh first attempt's too, is news that the
		// host is still down: the next probe moves out by a step.
		g.nextProbe = laterOf(g.nextProbe, now.Add(g.step))
	}
	if retryAfter > 0 {
		g.reopen = laterOf(g.reopen, now.Add(retryAfter))
		g.nextProbe = laterOf(g.nextProbe, g.reopen)
	}
}

// ok records at now that the host answered (a response that is not
// retryable); first says whether it was a first attempt. It reports whether
// the gate may be retired: the host is quiet and nothing is held.
func (g *hostGate) ok(now time.Time, first bool) (retire bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	share := g.cfg.share()
	if first {
		g.noteFirst(now, false)
	}
	g.step = max(g.step/2, g.minStep)
	if !g.recovering {
		g.recovering, g.failStreak, g.failures = true, 0, 0
		g.firstFails = 0 // the outage's failures are not random ones
		g.share = gateStartShare * share
		g.credit = g.share
		g.nextProbe = now.Add(g.step)
	} else {
		g.failStreak = 0
		g.share = min(g.share+gateGrowth*share, share)
		if first {
			// Fresh demand clocks the releases; a released retry's own
			// success grows the share but releases nothing, or releases
			// would feed on themselves.
			g.credit += g.perSuccess()
		}
	}
	g.release(now)
	g.credit = min(g.credit, 1) // no saving up while nothing is held
	return len(g.waiters) == 0 && now.Sub(g.lastFail) >= DefaultGateQuiet
}

// release hands the available credit to the oldest waiters. g.mu is held.
func (g *hostGate) release(now time.Time) {
	if !g.recovering || now.Before(g.reopen) {
		return
	}
	for g.credit >= 1 && len(g.waiters) > 0 {
		g.credit--
		g.pop(now)
	}
}

// pop releases the oldest waiter and nudges the next one, which now keeps
// the gate's clock. g.mu is held.
func (g *hostGate) pop(now time.Time) {
	w := g.waiters[0]
	g.waiters[0] = nil
	g.waiters = g.waiters[1:]
	w.released, w.queued = true, false
	g.lastPop = now
	w.nudge()
	if len(g.waiters) > 0 {
		g.waiters[0].nudge()
	}
	if g.recovering {
		g.nextProbe = now.Add(g.idle())
	}
}

// idle is how long a recovering gate waits without first attempts before it
// releases a held retry on its own: a step, and at least four times the
// usual time between first attempts, so that the ordinary pauses of random
// arrivals (longer than four means one time in fifty) are not mistaken for
// the end of fresh demand; but never longer than the largest step, the
// Policy's cap, so that a lone request to a host that answers again is not
// held past its own backoff. g.mu is held.
func (g *hostGate) idle() time.Duration {
	return min(max(g.step, 4*g.gap), g.maxStep)
}

// flowing is the time before which a failing host needs no probe: first
// attempts still flow, and each tells whether it is back. It applies once
// a first attempt has come while a retry of the host was pending; a client
// whose requests run one at a time never sends one then, and its retries
// keep their own backoff (zero time). It is the latest first attempt plus
// the pause that arrivals at the usual gap exceed one time in fifty (see
// pauseFactor), capped at the largest step. Stricter than idle, which
// trusts four gaps: a probe sent into a host that is down is wasted, while
// a release to a host that answers is not. g.mu is held.
func (g *hostGate) flowing() time.Time {
	if g.lastFlow.IsZero() {
		return time.Time{}
	}
	pause := time.Duration(pauseFactor[g.gaps] * float64(g.gap))
	return g.lastFirst.Add(min(pause, g.maxStep))
}

// pauseFactor[n] is the pause, in mean gaps measured over n gaps, that the
// next gap of random (Poisson) arrivals exceeds one time in fifty:
// n·(50^(1/n) − 1), the predictive tail of a rate estimated from n gaps. It
// falls from 49 for one gap towards ln 50 ≈ 3.9, because a mean of few gaps
// is as likely too short as too long.
var pauseFactor = [gateGapSamples + 1]float64{0, 49, 12.14, 8.05, 6.64, 5.93, 5.52, 5.24, 5.05}

// join asks at now to send a retry at sendAt, after its own backoff. It
// returns nil when the retry may go then; otherwise a waiter to wait with
// (see poll); or refused when the gate cannot reopen by limit (a
// Retry-After past it). own is the retry's un-jittered backoff step (see
// poll). spread, when positive, is the least time the retry
// waits before it probes a host that has failed for long (its step is at
// the cap): a request low on retries then spends them across its horizon
// instead of in the outage's first seconds.
func (g *hostGate) join(now, sendAt, limit time.Time, spread, own time.Duration) (w *gateWaiter, refused bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.recovering || g.step < g.maxStep || g.maxStep <= 0 {
		spread = 0
	}
	if g.retired {
		return nil, false
	}
	if g.reopen.After(limit) {
		return nil, true
	}
	if len(g.waiters) == 0 && !sendAt.Before(g.reopen) {
		switch {
		case g.recovering && g.credit >= 1:
			g.credit--
			g.pending = laterOf(g.pending, sendAt)
			return nil, false
		case !g.recovering && !sendAt.Before(g.nextProbe) && !sendAt.Before(now.Add(spread)) && !sendAt.Before(g.flowing()):
			// The probe of this round; the next round starts after it.
			g.nextProbe = sendAt.Add(g.step)
			g.pending = laterOf(g.pending, sendAt)
			return nil, false
		}
	}
	w = &gateWaiter{ch: make(chan struct{}, 1), queued: true, probeAt: now.Add(spread), ownAt: sendAt.Add(own), ownStep: own}
	g.waiters = append(g.waiters, w)
	return w, false
}

// poll looks at the gate for w at now: go reports that w may be sent;
// otherwise w should look again at wake (zero: only when nudged). Only
// the oldest waiter keeps the clock, so a probe round wakes one goroutine.
func (g *hostGate) poll(now time.Time, w *gateWaiter) (send bool, wake time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if w.released || g.retired {
		return true, time.Time{}
	}
	g.release(now)
	if w.released {
		return true, time.Time{}
	}
	if len(g.waiters) == 0 || g.waiters[0] != w {
		return false, time.Time{}
	}
	due := laterOf(g.nextProbe, g.reopen)
	if !g.recovering {
		due = laterOf(due, w.probeAt)
	} else {
		// Fresh first attempts release held retries; only when none came
		// for a while (see idle) does the oldest go on its own, and then
		// one per such span (see pop).
		due = laterOf(due, g.lastFirst.Add(g.idle()))
	}
	// When nothing tells about the host in this retry's place (no failure
	// while it fails, no first attempt while it recovers, no held retry
	// sent) for the retry's own step times the number held, and a step has
	// passed since its own backoff ended, it goes (Retry-After and the
	// spread still bind). While recovering this holds for a small backlog
	// only, so that the slow start still paces a large one. A quiet client
	// thus keeps about its own backoff; many held retries share one.
	quiet, news := w.ownStep*time.Duration(len(g.waiters)), g.lastFail
	if g.recovering {
		news = g.lastFirst
	}
	own := laterOf(w.ownAt, laterOf(news, g.lastPop).Add(quiet))
	if own = laterOf(own, laterOf(g.reopen, w.probeAt)); (!g.recovering || len(g.waiters) <= gateSmallBacklog+1) && own.Before(due) {
		due = own
	}
	if !g.recovering {
		due = laterOf(due, g.flowing())
	}
	if now.Before(due) {
		return false, due
	}
	// A probe: nothing else tells whether the host is back (failing), or no
	// first attempt has released anyone for a while (recovering).
	g.pop(now)
	if !g.recovering {
		g.nextProbe = now.Add(g.step)
	}
	return true, time.Time{}
}

// leave takes w out of the queue (its wait was cancelled or ran out). A
// release it did not use goes back to the gate.
func (g *hostGate) leave(now time.Time, w *gateWaiter) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !w.queued {
		return
	}
	for i, x := range g.waiters {
		if x == w {
			g.waiters = append(g.waiters[:i], g.waiters[i+1:]...)
			if i == 0 && len(g.waiters) > 0 {
				g.waiters[0].nudge()
			}
			break
		}
	}
	w.queued = false
	g.release(now)
}

// state returns a snapshot of the gate.
func (g *hostGate) state(host string) GateState {
	g.mu.Lock()
	defer g.mu.Unlock()
	return GateState{Host: host, Recovering: g.recovering, Held: len(g.waiters),
		Failures: g.failures, Share: g.share, NextProbe: laterOf(g.nextProbe, g.reopen)}
}

// laterOf returns the later of a and b.
func laterOf(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// gateSet holds the gates of a Transport's failing hosts. active counts
// them, so that while no host fails a request reads one atomic and nothing
// else.
type gateSet struct {
	cfg              HostGate
	minStep, maxStep time.Duration
	active           atomic.Int32
	mu               sync.RWMutex
	m                map[string]*hostGate
}

// newGateSet returns an empty set whose gates space probes by steps
// between minStep and maxStep (see newHostGate).
func newGateSet(cfg HostGate, minStep, maxStep time.Duration) *gateSet {
	return &gateSet{cfg: cfg, minStep: minStep, maxStep: maxStep, m: map[string]*hostGate{}}
}

// fail records a retryable failure of host at now and returns its gate.
func (s *gateSet) fail(host string, now time.Time, first bool, retryAfter time.Duration) *hostGate {
	s.mu.Lock()
	g := s.m[host]
	if g == nil {
		g = newHostGate(s.cfg, s.minStep, s.maxStep, now)
		s.m[host] = g
		s.active.Add(1)
	}
	s.mu.Unlock()
	g.fail(now, first, retryAfter)
	return g
}

// ok records that host answered, when it has a gate; first attempts to
// healthy hosts cost one atomic load.
func (s *gateSet) ok(host string, first bool) {
	if s.active.Load() == 0 {
		return
	}
	s.mu.RLock()
	g := s.m[host]
	s.mu.RUnlock()
	if g == nil {
		return
	}
	now := time.Now()
	if g.ok(now, first) {
		s.retire(host, g, now)
	}
}

// retire removes host's gate g once it is quiet and holds nothing.
func (s *gateSet) retire(host string, g *hostGate, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g.mu.Lock()
	defer g.mu.Unlock()
	if s.m[host] != g || len(g.waiters) > 0 || now.Sub(g.lastFail) < DefaultGateQuiet {
		return
	}
	g.retired = true
	delete(s.m, host)
	s.active.Add(-1)
}

// states returns a snapshot of every gate.
func (s *gateSet) states() []GateState {
	s.mu.RLock()
	gates := make(map[string]*hostGate, len(s.m))
	for h, g := range s.m {
		gates[h] = g
	}
	s.mu.RUnlock()
	out := make([]GateState, 0, len(gates))
	for h, g := range gates {
		out = append(out, g.state(h))
	}
	return out
}
