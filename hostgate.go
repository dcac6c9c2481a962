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
	silent     int           // attempts failed since the latest answer; starts at downAfter
	run        int           // the same, starting at 0: failures seen
	streak     int           // attempts answered since the latest failure
	since      time.Time     // the first failure of the outage under way
	proven     bool          // an outage of it has been proven (see provenDown)
	took       time.Duration // how long its failed attempts take, on average
	timed      bool          // took has been measured
	answerTook time.Duration // how long its latest timed answer took
	backAt     time.Time     // when it last answered after being down
	lastFresh  time.Time     // the latest first attempt
	gap        time.Duration // the usual time between first attempts
	gaps       int           // samples in gap, up to gapWeight
	share      float64       // releases each answer earns
	credit     float64       // releases earned, not yet used
	cut        bool          // a release happened since share was last halved
	notBefore  time.Time     // Retry-After: nothing held goes earlier
	probing    *member       // the line's probe whose outcome is awaited
	nextProbe  time.Time     // the next probe goes no earlier
	missed     int           // the line's probes failed in a row
	pace       time.Duration // the wait after the latest failed probe
}

// member is one retrying request of a host. Its life (drawn, own, step,
// downStep, floor, hard, giveUp; see docs/storm-control.md rule 5) is
// drawn at its first hold and written only by its request's goroutine,
// as are askBudget and toldWait; the rest is shared under h.mu.
type member struct {
	h                 *host
	wake              chan struct{} // nudged when it should look at the host again
	policy            Policy        // its own, whose steps pace the line's probes
	spent             int           // retries charged to the budget
	toldWait          bool          // its latest failure came with a Retry-After
	waiting, released bool          // held in line; let go by the line's credit
	last              bool          // its retry held now is its last: never a probe
	askBudget         bool          // its retry goes on its own into a host proven down
	fromLine          bool          // its latest retry went from the line: an answer earns its place back

	drawn    time.Time     // when its life was drawn
	own      ownSteps      // the steps its own backoff takes from drawn
	step     int           // the next of them to come
	downStep time.Time     // the latest that found the host down
	floor    time.Duration // the Retry-After wait it was drawn with
	hard     time.Time     // the deadline or MaxElapsed; zero when neither
	giveUp   time.Time     // when its own backoff sends its last retry
}

func newMember() *member { return &member{wake: make(chan struct{}, 1)} }

// outlived reports whether at now m's life is over.
func (m *member) outlived(now time.Time) bool {
	return !m.giveUp.IsZero() && !now.Before(m.giveUp)
}

// lifeLeft fits a wait of d at now into m's life; over reports that the
// life is over.
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

// stepCame reports whether a step of m's own backoff before its last has
// come by now since it was last asked, and when the next comes (zero: none
// but the last). It notes the latest step come as downStep when it found
// the host down, or down until backAt, however late m looks. Steps are in
// time order: the first to come is found by bisection. h.mu is held.
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

func newHostSet(share float64) *hostSet { return &hostSet{share: share, m: map[string]*host{}} }

// failed records f, a retryable failure of m's request to the named host,
// m joining its retrying requests on the first.
func (s *hostSet) failed(name string, m *member, f failure) {
	if m.h == nil {
		s.join(name, m, f.at)
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
	if h.cut { // halved once per release, as TCP once per round trip (rule 4)
		h.share, h.cut = max(h.share/2, shareStep*s.share), false
		h.credit = min(h.credit, h.share)
	}
	h.notBefore = laterOf(h.notBefore, f.notBefore)
}

// join adds m to the named host's retrying requests, creating its state,
// down from the start so that a burst's first failures are held at once.
func (s *hostSet) join(name string, m *member, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m.h = s.m[name]; m.h == nil {
		m.h = &host{name: name, share: s.share, cut: true, silent: downAfter, since: at}
		s.m[name] = m.h
		s.active.Add(1)
	}
	m.h.mu.Lock()
	m.h.members = append(m.h.members, m)
	m.h.mu.Unlock()
}

// answered records that the named host answered a request (m is nil when
// it never failed) whose attempt went at sent (zero when not known). A
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
// when not timed): it earns the line share of a release, and the share,
// up to full, grows back (rule 4).
func (h *host) answered(now time.Time, m *member, first bool, full float64, took time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if took > 0 {
		h.answerTook = took
	}
	if h.silent >= downAfter { // back: every held retry looks whether a step of its found it down
		h.backAt = now
		for _, w := range h.members {
			if w.waiting {
				w.nudge()
			}
		}
	}
	h.silent, h.run, h.missed, h.pace, h.streak = 0, 0, 0, 0, h.streak+1
	if first {
		h.noteFresh(now)
	}
	h.heard(m, now, false)
	if m != nil && m.fromLine && !h.flowing(now) {
		h.credit += 2 // the line alone probes the host: slow start
	}
	h.share = min(h.share+shareStep*full, full)
	h.notBefore = time.Time{} // a Retry-After told to one request no longer holds the others
	h.credit += h.share
	h.release(now)
}

// noteFresh records a first attempt at now; a pause after fresh requests
// stopped is not a gap between them. h.mu is held.
func (h *host) noteFresh(now time.Time) {
	if !h.lastFresh.IsZero() {
		gap := max(now.Sub(h.lastFresh), 0)
		if h.gaps > 0 && !now.Before(h.flowEnd()) {
			gap = h.gap
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

// heard records at now the outcome of m's attempt. When m was the line's
// probe, the next goes a usual gap later, or, after k failures in a row,
// the prober's k-th step at its mean when that is longer, so that the line
// backs off as one request would (rule 3). h.mu is held.
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

// live sets m's giveUp from the host's latest attempt time, early enough
// for its last retry to fail before the deadline. h.mu is held.
func (h *host) live(m *member) {
	if !m.drawn.IsZero() {
		m.giveUp = addCapped(m.drawn, m.own.at(m.own.count, h.took))
	}
	if !m.hard.IsZero() {
		m.giveUp = earlierOf(m.giveUp, m.hard.Add(-h.took))
	}
}

// firstWaiting returns the oldest retry held in line that may probe (not
// a last retry, kept for its life's end), or nil. h.mu is held.
func (h *host) firstWaiting() *member {
	for _, m := range h.members {
		if m.waiting && !m.last {
			return m
		}
	}
	return nil
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

// noteTook adds a failed attempt's time to the host's average. h.mu is held.
func (h *host) noteTook(took time.Duration) {
	if !h.timed {
		h.took, h.timed = took, true
		return
	}
	h.took += (took - h.took) / tookWeight
}

// budgetView reports at now whether a retry into the host is charged to
// the budget, and whether the budget is asked about it: asked as
// asksBudget says, and charged when asked or when the host answers and
// the request is not alone on it (docs/storm-control.md rule 7).
func (h *host) budgetView(now time.Time) (charged, asks bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	asks = h.asksBudget(h.provenDown(now))
	return asks || h.silent < downAfter && len(h.members) > 1, asks
}

// asksBudget reports whether the budget is asked about retries into the
// host, proven down or not: only while another request to it is retrying
// and downAfter attempts in a row have been seen to fail, not counting the
// down start of a new state. h.mu is held.
func (h *host) asksBudget(proven bool) bool {
	return proven && h.run >= downAfter && len(h.members) > 1
}

// ask decides, once m's retry has waited its own backoff, whether it is
// held: only with another request to the host retrying, and the host
// proven down or a Retry-After told (rule 1). last reports that the retry
// is its request's last; p is the request's Policy.
func (h *host) ask(m *member, last bool, p Policy, now time.Time) (held bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	m.last, m.policy = last, p
	down := h.provenDown(now)
	if len(h.members) == 1 || !down && !m.toldWait {
		m.askBudget = h.asksBudget(down) && !m.drawn.IsZero()
		return false
	}
	m.waiting, m.askBudget = true, false
	return true
}

// provenDown reports whether at now the host is down and proven so: an
// attempt has been timed and the outage is provenAfter attempts' time old.
// Once an outage of downAfter failures is proven the state stays proven,
// so that a later outage, such as the host shedding after its return,
// holds at once (rule 1). h.mu is held.
func (h *host) provenDown(now time.Time) bool {
	if h.silent < downAfter {
		return false
	}
	old := h.timed && now.Sub(h.since) >= provenAfter*h.took
	h.proven = h.proven || old && h.run >= downAfter
	return h.proven || old
}

// poll decides whether the held m goes at now: released by the line's
// credit; at a step of its own backoff when the host answers (rule 5); at
// its life's end whatever the host's state; or as the line's probe, the
// oldest held, once fresh requests have stopped, no other probe is out and
// the pace allows (rule 3). Otherwise it says when to look again (zero:
// when nudged).
func (h *host) poll(m *member, now time.Time) (send bool, wake time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.live(m)
	h.release(now)
	if !m.hard.IsZero() && !now.Before(m.hard) {
		return false, time.Time{} // the hold ends at the deadline
	}
	down, flowing := h.provenDown(now), h.flowing(now)
	stepCame, nextStep := h.stepCame(m, now)
	// A step that found the host down goes once it answers within an
	// attempt's time; a life drawn with a Retry-After keeps to the line.
	inGrace := !m.downStep.IsZero() && !now.After(m.downStep.Add(max(h.took, h.answerTook)))
	back := stepCame && h.streak >= upAfter || h.streak > 0 && inGrace
	answers := back && !now.Before(h.notBefore) && m.floor == 0
	switch {
	case m.released:
		m.released, m.askBudget, m.fromLine = false, false, true
		return true, time.Time{}
	case answers, m.outlived(now):
		m.waiting, m.askBudget, m.fromLine = false, h.asksBudget(down), true
		h.nudgeFirst()
		return true, time.Time{}
	}
	wake = earlierOf(nextStep, m.giveUp)
	switch {
	case now.Before(h.notBefore):
		return false, earlierOf(h.notBefore, wake)
	case flowing:
		return false, earlierOf(h.flowEnd(), wake) // fresh requests probe for the line
	case h.probing != nil, m != h.firstWaiting():
		return false, wake
	case now.Before(h.nextProbe):
		return false, earlierOf(h.nextProbe, wake)
	}
	m.waiting, m.askBudget, m.fromLine = false, h.asksBudget(down), true
	h.probing = m
	return true, time.Time{}
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
