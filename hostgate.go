package httpretry

import (
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Tuning of the host gate: what each number is, then the measured reason
// for it (docs/storm-control.md has the sweeps).
const (
	// downAfter: attempts in a row unanswered that make a host down.
	// 60% random failures reach 16 once in 3,500: 4,942 requests, as off; 3,697 at 8.
	downAfter = 16
	// flowGaps: their usual gaps without one that make fresh requests stopped.
	// Retry-After herd: peak after 1.56x of capacity; 4.27x at 4.
	flowGaps = 8
	// gapWeight: samples in the moving average of the gap between fresh requests.
	// Tuned together with flowGaps, whose figures it gives; not swept alone.
	gapWeight = 8
	// tookWeight: a failed attempt's time weighs 1/tookWeight in the host's running average.
	// 500 ms answers: 14,271-14,314 of 14,794 rescued, off 14,325 (14,117 at 1); 8 lags a speedup.
	tookWeight = 2
	// shareStep: the least share, in parts of ReleaseShare, and an answer's growth of it.
	// 12% spare capacity: peak after 4.16x; 4.28x with a fixed share.
	shareStep = 1.0 / 8
	// upAfter: attempts in a row answered that make a host up, for a held retry's step.
	// Default fleet: peak after 3.23x; 4.41x at 1 (off 5.44x).
	upAfter = 16
	// provenAfter: an outage's age, in attempts' time, before it is proven (until one is).
	// Burst against a 500 ms server: median 1.28 s as off's (1.72 s at 0 and 1).
	provenAfter = 2
)

// hostSet holds the state of the hosts that have requests retrying now;
// while none has, a request pays one atomic load (active) and no more.
type hostSet struct {
	share  float64 // ReleaseShare
	active atomic.Int32
	mu     sync.RWMutex
	m      map[string]*host
}

// host is one host's state, kept only while requests to it are retrying,
// so that a finished request's history never reaches a later one. Its
// methods take the time as a value, so tests drive it without a clock.
type host struct {
	mu         sync.Mutex
	name       string
	members    []*member     // the retrying requests, oldest first
	silent     int           // attempts failed since the latest answer
	streak     int           // attempts answered since the latest failure
	lastFresh  time.Time     // the latest first attempt
	gap        time.Duration // the usual time between first attempts
	gaps       int           // samples in gap, up to gapWeight
	share      float64       // releases each answer earns
	credit     float64       // releases earned, not yet used
	cut        bool          // a release happened since share was last halved
	notBefore  time.Time     // Retry-After: nothing held goes earlier
	nextProbe  time.Time     // fresh requests stopped: the next probe goes no earlier
	probing    *member       // the line's probe whose outcome is awaited
	took       time.Duration // how long its failed attempts take, on average
	timed      bool          // took has been measured
	answerTook time.Duration // how long its latest timed answered attempt took
	backAt     time.Time     // when it last answered after being down
	since      time.Time     // the first failure of its outage under way
	run        int           // failures since its latest answer (silent starts at downAfter; this at 0)
	proven     bool          // an outage of it has been proven (see provenDown)
	missed     int           // the line's probes failed in a row
	pace       time.Duration // the wait after the latest failed probe
}

// member is one retrying request of a host.
type member struct {
	h                 *host
	toldWait          bool          // its latest failure came with a Retry-After
	waiting, released bool          // held in line; let go by the line's credit
	askBudget         bool          // its retry goes on its own into a host proven down: the budget is asked again
	policy            Policy        // its own: after the line's k-th probe in a row fails, the next goes its k-th step (at its mean) later
	wake              chan struct{} // nudged when it should look at the host again
	spent             int           // retries charged to the budget
	fromLine          bool          // its latest retry went from the line (released, probing, or at a step of its own): an answer to it earns its place back
	// Its life (see stormState.hold), drawn at its first hold: when, the
	// steps its own backoff would take from then, the next of them to
	// come, the latest that found the host down (see stepCame), and the
	// Retry-After wait it was drawn with. giveUp is when that backoff would
	// send its last retry (see live). These, askBudget and toldWait are
	// written only by its request's goroutine; waiting, released, last and
	// downStep are read by others, under h.mu.
	drawn    time.Time
	own      ownSteps
	step     int
	downStep time.Time
	floor    time.Duration
	hard     time.Time // the deadline or MaxElapsed; zero when neither
	giveUp   time.Time
	last     bool // its retry held now is its last: kept for giveUp, never a probe
}

func newMember() *member { return &member{wake: make(chan struct{}, 1)} }

// outlived reports whether at now m's request has outlived the life its
// own backoff gave it when it was first held (see stormState.hold).
func (m *member) outlived(now time.Time) bool {
	return !m.giveUp.IsZero() && !now.Before(m.giveUp)
}

// stepCame reports whether one of the steps m's own backoff would take
// before its last retry has come by now since it was last asked, each
// after attempts that take h.took, and notes the latest of them when it
// found the host down, as the host was until it came back (backAt), however
// late m looks; nextStep is when the next step comes (zero: none but the
// last). Steps are in time order, so the first to come is found by
// bisection, however many there are. h.mu is held.
func (h *host) stepCame(m *member, now time.Time) (came bool, nextStep time.Time) {
	stepAt := func(k int) time.Time { return addCapped(m.drawn, m.own.at(k, h.took)) }
	k := m.step + sort.Search(max(m.own.count-m.step, 0), func(i int) bool { return now.Before(stepAt(m.step + i)) })
	if came = k > m.step; came {
		if last := stepAt(k - 1); h.silent >= downAfter || last.Before(h.backAt) {
			m.downStep = last
		}
	}
	if m.step = k; k < m.own.count {
		nextStep = stepAt(k)
	}
	return came, nextStep
}

// inGrace reports whether at now m's latest step into a host that was down
// came no more than grace ago: news of the host's return within the time
// an attempt takes is what an attempt sent at the step would have met.
func (m *member) inGrace(now time.Time, grace time.Duration) bool {
	return !m.downStep.IsZero() && !now.After(m.downStep.Add(grace))
}

// lifeLeft fits a wait of d at now into m's life: it ends no later than the
// life does, when the last retry goes; over reports that the life is over.
func (m *member) lifeLeft(now time.Time, d time.Duration) (wait time.Duration, over bool) {
	if m.giveUp.IsZero() {
		return d, false
	}
	return min(d, m.giveUp.Sub(now)), m.outlived(now)
}

// nudge wakes m without blocking; one pending nudge is enough.
func (m *member) nudge() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

func newHostSet(share float64) *hostSet { return &hostSet{share: share, m: map[string]*host{}} }

// failed records f, a retryable failure of m's request to the named host,
// m joining its retrying requests on the first.
func (s *hostSet) failed(name string, m *member, f failure) {
	if m.h == nil {
		s.mu.Lock()
		if m.h = s.m[name]; m.h == nil {
			m.h = &host{name: name, share: s.share, cut: true, silent: downAfter, since: f.at}
			s.m[name] = m.h
			s.active.Add(1)
		}
		m.h.mu.Lock()
		m.h.members = append(m.h.members, m)
		m.h.mu.Unlock()
		s.mu.Unlock()
	}
	h := m.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if !f.sent.IsZero() {
		h.noteTook(max(f.at.Sub(f.sent), 0))
	}
	h.live(m)
	m.toldWait, m.fromLine = !f.notBefore.IsZero(), false
	if h.silent == 0 && !h.proven { // the first failure after an answer: an outage begins
		h.since = f.at
	}
	h.silent, h.run, h.streak = h.silent+1, h.run+1, 0
	h.heard(m, f.at, true)
	if f.first {
		h.noteFresh(f.at)
	}
	if h.cut { // once per release, as TCP halves once per round trip: random failures do not starve the line
		h.share, h.cut = max(h.share/2, shareStep*s.share), false
		h.credit = min(h.credit, h.share)
	}
	h.notBefore = laterOf(h.notBefore, f.notBefore)
}

// answered records that the named host answered a request (m is nil when
// it never failed) whose attempt went at sent (zero when not known): the
// answer earns the line share of a release, and the share grows back. A
// host without state costs one atomic load.
func (s *hostSet) answered(name string, m *member, first bool, sent time.Time) {
	if (m == nil || m.h == nil) && s.active.Load() == 0 {
		return
	}
	s.answeredBy(name, m, first, sent)
}

func (s *hostSet) answeredBy(name string, m *member, first bool, sent time.Time) {
	var h *host
	if m != nil {
		h = m.h
	}
	if h == nil {
		s.mu.RLock()
		h = s.m[name]
		s.mu.RUnlock()
	}
	if h != nil {
		now, took := time.Now(), time.Duration(0)
		if !sent.IsZero() {
			took = max(now.Sub(sent), 0)
		}
		h.answered(now, m, first, s.share, took)
	}
}

// answered records at now an answer to an attempt that took took (zero
// when not timed).
func (h *host) answered(now time.Time, m *member, first bool, full float64, took time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if took > 0 {
		h.answerTook = took
	}
	if h.silent >= downAfter { // the host is back: every held retry looks whether a step of its own found it down
		h.backAt = now
		h.nudgeWaiting()
	}
	h.silent, h.run, h.missed, h.pace, h.streak = 0, 0, 0, 0, h.streak+1
	if first {
		h.noteFresh(now)
	}
	h.heard(m, now, false)
	if m != nil && m.fromLine && !h.flowing(now) {
		h.credit += 2 // the line alone probes the host: it keeps its place
	}
	h.share = min(h.share+shareStep*full, full)
	h.notBefore = time.Time{} // the host answers: a Retry-After told to one request no longer holds the others
	h.credit += h.share
	h.release(now)
}

// noteFresh records a first attempt at now. h.mu is held.
func (h *host) noteFresh(now time.Time) {
	if !h.lastFresh.IsZero() {
		gap := max(now.Sub(h.lastFresh), 0)
		if h.gaps > 0 && !now.Before(h.flowEnd()) {
			gap = h.gap // fresh requests had stopped: the pause is not a gap between them
		}
		h.gaps = min(h.gaps+1, gapWeight)
		h.gap += (gap - h.gap) / time.Duration(h.gaps)
	}
	h.lastFresh = now
}

// flowEnd is when fresh requests will count as stopped. h.mu is held.
func (h *host) flowEnd() time.Time { return h.lastFresh.Add(flowGaps * h.gap) }

// flowing reports whether fresh requests keep coming at now. h.mu is held.
func (h *host) flowing(now time.Time) bool { return h.gaps > 0 && now.Before(h.flowEnd()) }

// heard records at now the outcome of m's attempt: when m was the line's
// probe, the next goes a usual gap later, taking the fresh requests' place
// at their pace (one client sending 700 requests/s peaked at 1.5-1.9x of
// capacity when its line followed each answer at once, 1.2x so); after k
// failures in a row, the prober's k-th backoff step (at its mean) later
// when that is longer, so that the line backs off as one request would,
// however many wait. h.mu is held.
func (h *host) heard(m *member, now time.Time, failed bool) {
	if m == nil || h.probing != m {
		return
	}
	if failed {
		h.missed++
		h.pace = m.policy.Delay(h.missed, h.pace, 0.5)
	}
	h.probing, h.nextProbe = nil, now.Add(max(h.gap, h.pace))
	h.nudgeFirst()
}

// live updates m's giveUp to the host's latest attempt time. h.mu is held.
func (h *host) live(m *member) {
	if !m.drawn.IsZero() {
		m.giveUp = addCapped(m.drawn, m.own.at(m.own.count, h.took))
	}
	if !m.hard.IsZero() { // its last retry goes in time to fail before the deadline, as it would without a hold
		m.giveUp = earlierOf(m.giveUp, m.hard.Add(-h.took))
	}
}

// firstWaiting returns the oldest retry held in line that may probe, or
// nil: a request's last retry waits for its life's end, not to probe.
// h.mu is held.
func (h *host) firstWaiting() *member {
	for _, m := range h.members {
		if m.waiting && !m.last {
			return m
		}
	}
	return nil
}

// grace is the time an attempt to the host takes, answered or failed: news
// that comes within it after a step is what the step's attempt would have
// met. h.mu is held.
func (h *host) grace() time.Duration { return max(h.took, h.answerTook) }

// nudgeWaiting nudges every retry held in line. h.mu is held.
func (h *host) nudgeWaiting() {
	for _, m := range h.members {
		if m.waiting {
			m.nudge()
		}
	}
}

// nudgeFirst nudges the oldest retry held in line. h.mu is held.
func (h *host) nudgeFirst() {
	if m := h.firstWaiting(); m != nil {
		m.nudge()
	}
}

// release lets the oldest held retries go, one per unit of credit; credit
// is not saved up while nobody waits. h.mu is held.
func (h *host) release(now time.Time) {
	freed := false
	for i := 0; i < len(h.members) && h.credit >= 1 && !now.Before(h.notBefore); i++ {
		if m := h.members[i]; m.waiting {
			h.credit--
			m.waiting, m.released, h.cut, freed = false, true, true, true
			m.nudge()
		}
	}
	h.credit = min(h.credit, 1)
	if freed {
		h.nudgeFirst() // a new oldest in line may probe
	}
}

// attemptTime returns how long the host's failed attempts take.
func (h *host) attemptTime() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.took
}

// noteTook adds a failed attempt's time to the host's average (took).
// h.mu is held.
func (h *host) noteTook(took time.Duration) {
	if !h.timed {
		h.took, h.timed = took, true
		return
	}
	h.took += (took - h.took) / tookWeight
}

// budgetView reports at now whether a retry into the host is charged to
// the budget, and whether the budget is asked about it (see asksBudget).
// A retry into a host that is down is charged only when the budget is
// asked about it: charged but never refused, retries ran the budget into
// a debt that refused every asked retry after, on any host, for minutes
// (50 goroutines on dead hosts of their own for 20 s: 5,104 tokens below
// empty; 100 dead hosts called two requests at a time: 1,470). A retry to
// a host that answers is charged, never asked (see docs/storm-control.md),
// unless its request is alone on the host.
func (h *host) budgetView(now time.Time) (charged, asks bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	asks = h.asksBudget(h.provenDown(now))
	return asks || h.silent < downAfter && len(h.members) > 1, asks
}

// asksBudget reports whether the budget is asked about retries into the
// host, proven down or not (proven): only while another request to it is
// retrying too, since storm control stays out of the way of a request
// alone on its host, and once downAfter of its attempts in a row have
// been seen to fail. A state starts down, so that a burst's first
// failures are held at once; counted as failures seen, that start made
// the budget, drained by a dead host elsewhere, refuse 36 retries in 5 s
// of a goroutine calling a host that answered each call's third attempt
// (TestBudgetSparesALoneSequentialClient). So a Transport calling many
// dead hosts one request at a time each is bounded by MaxRetries alone,
// as without storm control. h.mu is held.
func (h *host) asksBudget(proven bool) bool {
	return proven && h.run >= downAfter && len(h.members) > 1
}

// ask decides, once m's retry has waited its own backoff, whether it is
// held: only on evidence (see StormControl). last reports that the retry
// is its request's last, and p is the request's Policy. A request that was
// held before and goes on its own into a host proven down has its retry
// asked of the budget (see asksBudget).
func (h *host) ask(m *member, last bool, p Policy, now time.Time) (held bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	m.last, m.policy = last, p
	down := h.provenDown(now)
	if len(h.members) == 1 || !down && !m.toldWait {
		m.askBudget = h.asksBudget(down) && !m.drawn.IsZero()
		return false // alone, or the host answers: its own backoff, exactly
	}
	m.waiting, m.askBudget = true, false
	return true
}

// provenDown reports whether at now the host is down and proven so. An
// outage is proven once an attempt has been timed and the outage, counted
// from its first failure, is at least provenAfter times as old as failed
// attempts take on average: an outage that has lasted D is as likely as
// not to last D more, so before that a retry still has fair odds of
// finding the host back by the time it is answered. Once an outage of 16
// failures or more is proven, the host's state stays proven, and any
// later outage of it, such as the host shedding after its return, holds
// at once: counted anew, a shared client's retries went into the
// shedding host unheld (real runs: peak after 6.8-7.9x of capacity in 3
// of 6, 3.4-4.6x before), and late failures of hung attempts could
// unprove an outage under way. Two failures that create the state, which
// starts down, prove nothing for later. h.mu is held.
func (h *host) provenDown(now time.Time) bool {
	if h.silent < downAfter {
		return false
	}
	old := h.timed && now.Sub(h.since) >= provenAfter*h.took
	h.proven = h.proven || old && h.run >= downAfter
	return h.proven || old
}

// poll looks at the host for the held m at now: send reports that it may
// go; otherwise it looks again when nudged or at wake (zero: only when
// nudged).
func (h *host) poll(m *member, now time.Time) (send bool, wake time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.next(m, now)
}

// refused puts back in line the held m, whose retry the budget refused as
// the line's probe; the next probe goes a pace later.
func (h *host) refused(m *member, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	m.waiting, m.fromLine = true, false
	if h.probing == m {
		h.probing, h.nextProbe = nil, now.Add(max(h.gap, h.pace, m.policy.Delay(1, 0, 0.5)))
	}
}

// next decides whether the held m goes at now: released by the line's
// credit; at a step of its own backoff, when the host answers then; as its
// own backoff's last retry, its life over, whatever the host's state; or
// as the line's probe, the oldest held, once fresh requests have stopped,
// no other probe is out and the pace allows. Otherwise it says when to
// look again (zero: when nudged). h.mu is held.
func (h *host) next(m *member, now time.Time) (send bool, wake time.Time) {
	h.live(m)
	h.release(now)
	if !m.hard.IsZero() && !now.Before(m.hard) {
		return false, time.Time{} // the deadline or MaxElapsed has come: the hold ends there
	}
	down, flowing := h.provenDown(now), h.flowing(now)
	stepCame, nextStep := h.stepCame(m, now)
	// At its step the retry goes while the host is up; a step that found
	// the host down goes once the host answers within an attempt's time. A
	// life drawn with a Retry-After keeps to the line: the date is a herd
	// the server set, which its own steps would all meet (peak after the
	// storm simulator's Retry-After herd 1.50x of capacity, 3.16x so).
	back := stepCame && h.streak >= upAfter || h.streak > 0 && m.inGrace(now, h.grace())
	answers := back && !now.Before(h.notBefore) && m.floor == 0
	switch {
	case m.released:
		m.released, m.askBudget, m.fromLine = false, false, true
		return true, time.Time{}
	case answers, m.outlived(now): // when its own backoff would send it: the host answers, or it is the last
		m.waiting, m.askBudget, m.fromLine = false, h.asksBudget(down), true
		h.nudgeFirst()
		return true, time.Time{}
	}
	wake = earlierOf(nextStep, m.giveUp)
	switch {
	case now.Before(h.notBefore):
		return false, earlierOf(h.notBefore, wake)
	case flowing:
		return false, earlierOf(h.flowEnd(), wake) // fresh requests keep coming: they probe for the line
	case h.probing != nil, m != h.firstWaiting():
		return false, wake
	case now.Before(h.nextProbe):
		return false, earlierOf(h.nextProbe, wake)
	}
	m.waiting, m.askBudget, m.fromLine = false, h.asksBudget(down), true
	h.probing = m
	return true, time.Time{}
}

// abandon takes the held m out of line: its hold ran out or was cancelled.
// A release it did not use goes to the next in line.
func (h *host) abandon(m *member, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if m.released {
		h.credit++
	}
	m.waiting, m.released = false, false
	h.release(now)
	h.nudgeFirst()
}

// leave ends m's membership: its request is over. When it was the line's
// probe, the next may go; a host with no request retrying is forgotten.
func (s *hostSet) leave(m *member) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := m.h
	h.mu.Lock()
	defer h.mu.Unlock()
	i := slices.Index(h.members, m)
	if h.members = slices.Delete(h.members, i, i+1); len(h.members) == 0 {
		delete(s.m, h.name)
		s.active.Add(-1)
	}
	h.heard(m, time.Now(), false)
}

// earlierOf returns the earlier of a and b, a zero time counting as none.
func earlierOf(a, b time.Time) time.Time {
	if b.IsZero() || !a.IsZero() && a.Before(b) {
		return a
	}
	return b
}

// laterOf returns the later of a and b.
func laterOf(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
