package httpretry

import (
	"cmp"
	"math"
	"time"
)

// The line: a host's held requests, oldest first, and the rules by which
// each goes (docs/storm-control.md rules 2 to 5).

// member is one retrying request of a host. h (set under the host set's
// lock when it joins), policy, spent, paid and ownSteps are
// used only by its request's goroutine; the rest is shared under h.mu
// (told too, though its own goroutine, which alone writes it, reads it
// without h.mu).
type member struct {
	h                 *host
	wake              chan struct{} // nudged when it should look at the host again
	policy            Policy        // its request's, whose steps pace the line's probes
	spent             int           // retries charged to the budget
	paid              bool          // its next retry's token was taken when the budget was asked
	waiting, released bool          // held in line; let go by the line's credit
	place                           // where it waits in line
	fromLine          bool          // its latest retry went from the line: an answer earns its place back
	downNews          time.Time     // when the latest failure it acted on went: its own, or one a step of its skipped for
	toldIn            time.Time     // the start of the outage in which its latest failure came with a Retry-After, the host down; zero when none
	downStep          time.Time     // the latest of its steps that found the host down
	firstFailed       time.Time     // when its request first failed: its steps put off keep within plain backoff's longest life from then (see retrier.putOff)
	// told is its latest failure: when it came (at), the Retry-After it
	// was told (floor, zero when none; dated when it named an HTTP date),
	// and its request's URL path, whose requests what it is told speaks for.
	told   failure
	heeded time.Duration // told's Retry-After, when not over MaxRetryAfter; zero otherwise
	// took is its own failed attempts' time (a skipped step stands for
	// one), written only by its request's goroutine, which reads it
	// without h.mu; drains, how long their responses took to drain.
	took, drains attemptTime
	ownSteps     // its place in its own backoff
}

// place is where a held request waits in line, shared under h.mu: for
// its next step, or, held before, through its own backoff's wait.
type place struct {
	nextAt    time.Time // when the step it waits for comes; zero at the step it is due at
	last      bool      // that step is its last: it goes then, unless owed (see retrier.putOff)
	limit     time.Time // the deadline or MaxElapsed's end; zero when neither
	spare     bool      // it has skipped more steps than it sent retries between them: one may go
	owed      bool      // the step it waits for is one put off (see host.owes): sent before it comes, it is that step
	ownWait   bool      // it waits its own backoff: alone, it waits it whole (rule 1)
	notBefore time.Time // the end of the Retry-After it was told: it goes no earlier
}

func newMember() *member { return &member{wake: make(chan struct{}, 1)} }

// nudge wakes m, if any (firstWaiting may find none), without blocking;
// one pending nudge is enough.
func (m *member) nudge() {
	if m != nil {
		select {
		case m.wake <- struct{}{}:
		default:
		}
	}
}

// skipTimes is what a held request's skipped step stands for, and what
// its next step waits.
type skipTimes struct {
	drain time.Duration // an attempt of its own's drain (the attempt's time is m.took: none until one is timed, so that a step comes no later than plain backoff's)
	// stepDrain is the part of drain that the step's time counts: no more
	// than the latest drain of another request's response to the host, so
	// that steps keep to plain backoff's, which drains each failure before
	// its wait, and one slow drain of its own puts no later step late; the
	// rest counts in its drift, which fits it to the deadline.
	stepDrain time.Duration
	// fit is what its next step's attempt, and its drain, are fitted to
	// the deadline with; until one of its own attempts is timed, that
	// attempt and each step it skipped count as the host's longest, and
	// the drain counts as the longest a drain may take, so that a step is
	// taken for its last too early rather than too late (see lastStep).
	fit time.Duration
	// floor is the Retry-After its next step waits while the host still
	// says one: the longest its path's retrying requests were told last,
	// as plain backoff's attempt there may be told a rate limit's next
	// window, not what is left of the one the request was told (a review's
	// drawn windows: 535 of 2,864 rescues lost, 200 now), and as long for
	// a request never told one, whose attempt there would be told it too
	// (some failures saying one: 2,148 of 2,432 rescued, 2,424 now); and
	// while the host, back from down and not down again, sheds (see
	// sheds), though its sheds say none, up to the policy's MaxDelay, the
	// longest plain backoff's own wait there: a fleet told one date comes
	// back to a host at its capacity, and its skipped steps spread their
	// next by what they were told (the virtual Retry-After herd, seeds
	// 1-6: 87-89% rescued against 86% without, plain backoff's 82%).
	floor time.Duration
	// named is the latest moment the host's Retry-After named, once it
	// is known to name a window's end (see host.windows); zero otherwise:
	// a skipped step stands for an attempt that would have been told it,
	// and the next waits until it (see stepFrom).
	named time.Time
	// announced is how long OnRetry took for the latest retry: each
	// skipped step stands for a retry announced as long (see
	// stormState.announced).
	announced time.Duration
}

// skipTime returns m's skipTimes, all but announced, which the
// retrier adds (see retrier.skipTimes).
func (h *host) skipTime(m *member) skipTimes {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := skipTimes{drain: m.drains.avg, fit: m.took.avg}
	if !m.drains.timed { // none of its failures had a body (a reset): its steps' would, as the others' do
		s.drain = h.drain.besides(m)
	}
	s.stepDrain = min(s.drain, h.drain.besides(m))
	if !m.took.timed {
		s.fit = times(m.untimed+1, h.took.longest)
	}
	// The attempt plain backoff sends at the step may drain a body as long
	// as a drain may take, where the request's own drained none (a reset).
	s.fit += drainTimeout
	if h.says.v > 0 || !h.down() && h.sheds(m) {
		s.floor = max(m.told.floor, h.toldOnPath(m))
		if _, most := m.policy.bounds(); h.says.v == 0 { // the sheds say none: a pacing wait, no longer than plain backoff's own
			s.floor = min(s.floor, most)
		}
		if h.windows {
			s.named = h.named
		}
	}
	return s
}

// toldOnPath returns the longest heeded Retry-After that the host's
// retrying requests to m's path (URL.Path, without the query) were told
// last: since m was, or before with the end m was told, a rate limit's
// window named to both; a long one told before that ends elsewhere, which
// its request may still be waiting, is not what the host says now (a
// review's groups: 91 of 2,442 rescues lost). h.mu is held.
func (h *host) toldOnPath(m *member) (longest time.Duration) {
	mine := m.told.at.Add(m.heeded)
	for _, o := range h.members {
		sameWindow := o.told.at.Add(o.heeded).Sub(mine).Abs() < time.Second // a rate limit's window, named to both
		if o.told.path == m.told.path && (!o.told.at.Before(m.told.at) || sameWindow) {
			longest = max(longest, o.heeded)
		}
	}
	return longest
}

// heard records at now the outcome of m's attempt: when m was the line's
// probe, the next goes at the line's pace (rule 3) after it went, as its
// failure tells of the host then: counted from the failure, a probe that
// took 200 ms put the next 200 ms later than the news asked, and a burst
// of 200 against a 200 ms server had its median call at 1.17-1.23x of
// plain backoff's on loopback (0.97-1.09x now, 12 runs). h.mu is held.
func (h *host) heard(m *member, now time.Time, failed bool) {
	if m == nil || h.probing != m {
		return
	}
	if failed {
		h.missed++
		h.pace = m.policy.Delay(h.missed, h.pace, 0.5)
	}
	h.probing, h.nextProbe = nil, h.probedAt.Add(max(h.gap, h.pace))
	h.firstWaiting(now).nudge()
}

// firstWaiting returns the oldest retry held in line that may probe (not
// one waiting through its own backoff, which only the host's answers bring
// forward), or nil; while fresh requests come, the oldest beside a failing
// path first, as they probe for the others but not for it (see
// besideFailingPath). h.mu is held.
func (h *host) firstWaiting(now time.Time) (first *member) {
	flowing := h.flowing(now)
	for _, m := range h.members {
		if m.waiting && !m.ownWait && h.mayGoBetween(m, now) {
			if !flowing || h.besideFailingPath(m) {
				return m
			}
			first = cmp.Or(first, m)
		}
	}
	return first
}

// nudgeHeld nudges every retry held in line, or, graceOnly, those its
// grace lets go (see inGrace). h.mu is held.
func (h *host) nudgeHeld(now time.Time, graceOnly bool) {
	for _, m := range h.members {
		if m.waiting && (!graceOnly || h.inGrace(m, now) && h.mayGoBetween(m, now)) {
			m.nudge()
		}
	}
}

// release lets the oldest held retries go, one per unit of credit; credit
// is not saved up while nobody waits. h.mu is held.
func (h *host) release(now time.Time) {
	freed := false
	for i := 0; i < len(h.members) && h.credit >= 1; i++ {
		if m := h.members[i]; m.waiting && (h.mayGoBetween(m, now) || h.mayGoEarly(m, now)) {
			h.credit--
			m.waiting, m.released, h.releasedSinceHalved, freed = false, true, true, true
			m.nudge()
		}
	}
	h.credit = min(h.credit, 1)
	if freed {
		h.firstWaiting(now).nudge() // a new oldest in line may probe
	}
}

// mayGoEarly reports whether m, held before and waiting through its own
// backoff with no skipped step left to stand for (see place.spare: none
// skipped, or each stood for by a retry between steps, as the line's
// probes are), may be let go by the line's credit as that step itself,
// sent early: once the host answers, the Retry-After it was told has
// ended, and another request to the host is retrying (alone, it waits its
// backoff whole); not its last step, which plain backoff sends later,
// when the host may have come back for good. Its later steps keep plain
// backoff's times (see waitInLine). h.mu is held.
func (h *host) mayGoEarly(m *member, now time.Time) bool {
	return m.ownWait && !m.spare && !m.last && h.run == 0 && !now.Before(m.notBefore) && len(h.members) > 1
}

// ask decides, once m's retry has waited its own backoff, whether it is
// held: only with another request to the host retrying, and the host
// proven down or a Retry-After told, unless the host's Retry-After named
// a rate window's end rather than its return (see host.windows) (rule 1);
// with a deadline or MaxElapsed (limited), only once an attempt to the
// host has been timed, as a skipped step stands for one.
func (h *host) ask(m *member, limited bool, now time.Time) (held bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if limited && !h.took.timed { // m's attempts are the host's too: none of them timed either
		return false
	}
	down := h.provenDown(now) && h.pathFailed(m) >= downAfter // its path does not answer
	singled := m.told.floor > 0 && h.says.besides(m) == 0     // a Retry-After of its own named its time, the others' latest failures none
	told := !h.windows && m.toldIn.Equal(h.outageStart)       // an outage the host has since answered out of told it nothing of this one
	// Otherwise it goes at its own backoff's time, as plain backoff's
	// would. The shed rule holds a retry of the backlog however singled
	// (see mayShed): the others' latest failures say no Retry-After
	// because the host came back, not because the server named its time.
	return len(h.members) > 1 && (h.mayShed(m, now) || !singled && (down || told))
}

// mayShed reports whether m's retry, within the host's shed window (see
// shedWindow), while the host fails attempts sent since its return (see
// sheds), is held as in an outage, so that the line's releases pace it by
// the host's answers, whatever its latest outcome: a host at its capacity
// answers and refuses by turns, and held only after a refusal, 424 of the
// virtual herd's retries went at their own backoff for that alone (seed
// 1; peak after 2.63-3.08x of capacity, seeds 1-4; 2.34-2.71x with it,
// 2.69-2.99x since sheds asks for a third of attempts failed, and
// 3.37-3.83x since that third must be past chance). It holds a retry of
// the backlog (see backlog), whatever its request was told, or one the
// host, back, refused again. The virtual Retry-After herd, seeds 1-4,
// rescued 100% and peaked at 2.7-3.0x of capacity after the outage
// (before the margin), against 86.0-88.8% and 11.1-12.2x without the
// rule and 97.1-97.6% and 5.1-6.0x with its refusals alone; its requests
// rescued both ways ended 0.52-0.57 s later than plain backoff's on
// average, against 0.39-0.44 s (seeds 1-4).
// Of the refused again, not a failure that said Retry-After, which names
// its own wait, nor a request's first failure (m.n, read by its own
// goroutine, which asks): held too, fresh requests waited behind the
// line, and in the fleet with 12% spare capacity, requests rescued both
// ways ended 142 ms later than plain backoff's on average (seed 1; 56-75
// ms, seeds 1-4, when this rule came, 341-403 ms at e3404f8 since steps
// are owed too, and 7-13 ms before this rule). h.mu is held.
func (h *host) mayShed(m *member, now time.Time) bool {
	refused := m.told.floor == 0 && m.n >= 2
	return now.Before(h.shedUntil) && h.sheds(m) && (h.backlog(m) || refused)
}

// backlog reports whether m's latest failure came before the host's
// latest return: its retry is part of the backlog an outage built. A
// Retry-After it was told then has been waited, as the gate is asked only
// once the retry's own wait, which waits it, is over. h.mu is held.
func (h *host) backlog(m *member) bool { return m.told.at.Before(h.backAt) }

// enqueue puts the held m in line, at p; it does not block.
func (h *host) enqueue(m *member, p place) {
	h.mu.Lock()
	defer h.mu.Unlock()
	m.waiting, m.place = true, p
}

// mayGoBetween reports whether m's retry may go at now, between its
// steps: it has a step skipped to stand for, the Retry-After it was told
// has ended, and its attempt would be back before its next step (one
// still out went late, a 447 ms attempt between 151 ms waits putting the
// rest off), or the step it waits for is one put off (see host.owes),
// which it then is; and not when, the host down and saying Retry-After,
// told one again would end past its next step, or past the deadline or
// MaxElapsed: plain backoff sends its retry at its step, which may find
// the host back (a burst of 100 told Retry-After: 1 through a 2 s outage:
// the last call 2.71 s in, plain backoff's 2.20 s; 2.03-2.05 s now).
// Unless that next step is its last, it may go once the host's latest
// failure but its own told a shorter wait: told it too, it re-times its
// steps (see leftWait; TestShorterRetryAfterToldLaterRetimesTheLife).
// h.mu is held.
func (h *host) mayGoBetween(m *member, now time.Time) bool {
	back := now.Add(m.took.avg + m.drains.avg)
	between := m.spare && (m.nextAt.IsZero() || back.Before(m.nextAt)) // a retry back before its next step, standing for one skipped
	if now.Before(m.notBefore) || !between && !m.owed {
		return false
	}
	if m.told.floor == 0 || h.says.v == 0 || !h.down() {
		return true
	}
	end := back.Add(spreadUp(m.told.floor, 1))
	learns := h.says.besides(m) < m.told.floor // the host's latest failure but m's told a shorter wait
	return (end.Before(m.nextAt) || !m.last && (m.nextAt.IsZero() || learns)) && (m.limit.IsZero() || end.Before(m.limit))
}

// lastBetween returns the first time after now at which the waiting m
// may no longer go between its steps (see mayGoBetween): its retry would
// no longer be back before its next step, or, told a Retry-After while
// the host, down, says one, told it again it would end past its next
// step or its limit; zero when none comes (an owed step may still go:
// see place.owed). Woken then, it hands the line's probe on. h.mu is
// held.
func (h *host) lastBetween(m *member, now time.Time) (first time.Time) {
	back, told := m.took.avg+m.drains.avg, time.Duration(0)
	if m.told.floor > 0 && h.says.v > 0 && h.down() {
		told = spreadUp(m.told.floor, 1)
	}
	ends := [...]time.Time{m.nextAt.Add(-back), m.nextAt.Add(-back - told), m.limit.Add(-back - told)}
	if m.nextAt.IsZero() {
		ends[0], ends[1] = time.Time{}, time.Time{}
	}
	if m.limit.IsZero() || told == 0 {
		ends[2] = time.Time{}
	}
	for _, end := range ends {
		if end.After(now) {
			first = earlierOf(first, end)
		}
	}
	return first
}

// poll decides whether the held m goes at now: released by the line's
// credit; at a step of its own backoff (atStep) when the host may be back
// or the news it has is stale (rule 5), or at its last step (last: one
// not put off, see retrier.hold) whatever the host's state; alone; or as
// the line's probe, the oldest held, once no other probe is out and
// either fresh requests have stopped and a pace has passed since the
// probe before and since the host's latest failure (and, once the host's
// Retry-After names a window's end, that end), or a Retry-After's moment
// has come (see momentCame) (rule 3).
// Otherwise it skips the step, and says when to look again before the
// next (zero: at the next).
func (h *host) poll(m *member, now time.Time, atStep, last bool) (send bool, wake time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if atStep {
		m.last = last
	}
	if now.Before(m.notBefore) { // it may go once the Retry-After it was told ends: it looks again then
		defer func() { wake = earlierOf(wake, m.notBefore) }()
	}
	h.release(now)
	if m.released {
		m.released, m.fromLine = false, true
		return true, time.Time{}
	}
	if m.ownWait { // only the host's answers bring its own step forward
		return false, time.Time{}
	}
	if atStep && (m.last || h.stepGoes(m, now)) || h.mayGoBetween(m, now) && (len(h.members) == 1 || h.inGrace(m, now)) {
		m.waiting, m.fromLine = false, len(h.members) > 1
		h.firstWaiting(now).nudge()
		return true, time.Time{}
	}
	pending, next := h.pendingMoment(), h.probeAt(m)
	atMoment := h.momentCame(now, pending)
	if !pending.After(now) {
		pending = time.Time{} // come already: no moment to wake at
	}
	switch {
	case h.flowing(now) && !atMoment && !h.besideFailingPath(m):
		return false, earlierOf(h.flowEnd(), pending) // fresh requests probe for the line
	case h.probing != nil:
		return false, time.Time{}
	case m != h.firstWaiting(now): // the oldest may have become first since it was nudged
		h.firstWaiting(now).nudge()
		return false, time.Time{}
	case now.Before(next) && !atMoment: // or until it may no longer go, to hand the probe on (see firstWaiting)
		return false, earlierOf(earlierOf(next, pending), h.lastBetween(m, now))
	}
	m.waiting, m.fromLine, h.probing, h.probedAt = false, true, m, now
	return true, time.Time{}
}

// probeAt returns when m may go as the line's next probe once fresh
// requests have stopped: a pace after the probe before and after the
// latest failure that tells of m's path (see newsFor), which told what a
// probe would, and, once the host's Retry-After names
// a window's end and while it has answered nothing, no earlier than that
// end. A host that answers some requests in each window (a quota) always
// has its next end ahead: gated there too, the line never probed it (a
// review's quota family: 132 of 2,809 rescues lost, 103 ungated). h.mu is
// held.
func (h *host) probeAt(m *member) time.Time {
	next := laterOf(h.nextProbe, h.newsFor(m).Add(max(h.gap, h.pace)))
	if h.windows && h.backAt.IsZero() {
		next = laterOf(next, h.named)
	}
	return next
}

// pendingMoment returns the earliest moment that a Retry-After told to the
// host's retrying requests named after its latest failed attempt went, zero
// when none: when plain backoff's first retry told it goes. The moments told
// for one window's end spread over a second when read against whole-second
// Date headers, each response's own; the line asking at the latest of them
// asked a second into the next window (4 goroutines on a rate limit: 313 of
// 1,200 rescues lost, none at the earliest). h.mu is held.
func (h *host) pendingMoment() (first time.Time) {
	for _, o := range h.members {
		end := o.told.at.Add(o.heeded)
		if o.heeded > 0 && end.After(h.downSeen) {
			first = earlierOf(first, end)
		}
	}
	return first
}

// momentCame reports whether at, a moment a Retry-After named (see
// pendingMoment), has come and nothing since has told whether the host is
// back (no answer after its latest failure, no probe sent since) while its
// fresh requests are too few to count on one to ask soon (fewer than
// flowGaps gaps seen). Plain backoff's retries told the moment go then;
// the line's probe goes at once, as one, rather than wait for fresh
// requests that may never come (a small group on a rate limit lost a
// window at each); beside a steady flow, which asks within a gap, it
// raised the peak after an outage whose every 503 said Retry-After: 1 or
// 2 by 15% (6.1x of capacity to 7.0x, the mean of three virtual fleets
// each). h.mu is held.
func (h *host) momentCame(now, at time.Time) bool {
	return !at.IsZero() && !now.Before(at) && h.run > 0 && h.probedAt.Before(at) && h.gaps < flowGaps
}

// stepGoes reports whether m's step, come at now, goes: the host's latest
// outcome, or its path's, is an answer (unless the host sheds, see sheds),
// or fresh requests have stopped (or are another path's) and no failure is
// newer than m's own news of its path (see newsFor and newsUntil), so that
// alone it would know no more (rule 5); otherwise the step is skipped, its
// news taken for the attempt it skips. h.mu is held.
func (h *host) stepGoes(m *member, now time.Time) bool {
	stale := (!h.flowing(now) || h.besideFailingPath(m)) && !h.newsFor(m).After(m.newsUntil())
	answered := (h.run == 0 || h.pathFailed(m) == 0) && !h.sheds(m)
	m.downNews = laterOf(m.downNews, h.downSeen)
	if h.down() {
		m.downStep = now
	}
	return answered || stale
}

// owes reports whether a step of m's, skipped at now, is owed to its
// request rather than spent: within the host's shed window (see
// shedWindow), the host not down and m's path answering, plain backoff's
// attempt at the step could have been answered. Spent, the held backlog
// of a host back at its capacity lost the chances plain backoff's steps
// had: 10 clients after an outage told Retry-After: 1, their host then
// refusing what exceeds its capacity with 429 and Retry-After: 1, rescued
// 96.9-98.3% against plain backoff's 97.7-99.3% (virtual, seeds 1-4).
// A held request that fails may then end later than plain backoff's, by
// the window and a put-off step at most, and never past plain backoff's
// longest life (see retrier.putOff). It takes h.mu.
func (h *host) owes(m *member, now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return now.Before(h.shedUntil) && !h.down() && h.pathFailed(m) < downAfter
}

// sheds reports whether the host, back from down, has failed an attempt
// sent since, and not answered downAfter in a row after it: at its
// capacity, as a backlog coming back finds it, so that held steps wait
// for the line's releases, which pace them, rather than all go on the
// next answer (the virtual fleet through one shared Transport, seeds 1-3:
// its peak after the outage 3.85-4.04x of capacity when they went,
// 2.83-3.01x now, plain backoff 5.29x). A host that answers all it is sent
// once back (one that flaps, or a slow one) sheds nothing; failures on
// another path, while the latest two or more are (see besideFailingPath),
// tell nothing of m's. The answers in a row it counts to are downAfter,
// not downRun, which a host shedding most of what it gets raises as one
// failing most attempts at random. And it fails a share of what it gets,
// one in shedOneIn or more of the attempts sent since its return, beyond
// chance (see failsAShare): a host that fails a few attempts at random
// after an outage is not at its capacity, and taken for one at any
// failure, a small client's requests ended 0.3-0.8 s later than plain
// backoff's (docs/storm-control.md, Random failures after an outage).
// h.mu is held.
func (h *host) sheds(m *member) bool {
	return h.calm < downAfter && h.failsAShare() && !h.besideFailingPath(m)
}

// failsAShare reports whether the attempts sent since the host's return
// failed one in shedOneIn or more, by a standard deviation of what that
// share fails by chance at least: a small client sees a few attempts,
// which fail a third now and then at 20% random failures (one client at 5
// requests a second: 7 of the first 9 after the return, and requests
// rescued both ways ended 0.18 s later than plain backoff's on average,
// 0.07 s with the margin). A herd told a Retry-After, each of its clients
// as small, then takes longer to be found at the host's capacity (its
// peak after the return 3.4-3.8x of capacity, 2.7-3.0x without the
// margin); waived after a told outage (4614f1b, not kept), the margin
// left a small client told Retry-After: 1 0.06-0.33 s later than plain
// backoff's at 2 to 5 requests a second; with it, from 0.07 s sooner to
// 0.12 s later. h.mu is held.
func (h *host) failsAShare() bool {
	sent := float64(h.sentSinceBack)
	chance := math.Sqrt(sent * (shedOneIn - 1)) // shedOneIn times the deviation of a binomial count at 1/shedOneIn
	return float64(h.failedSinceBack*shedOneIn) >= sent+chance
}

// newsUntil returns until when m's own news of its path holds: when the
// latest failure it acted on went or, when its latest failure was told a
// Retry-After, the moment that named, the host having said it fails until
// then. A failure sent before that moment is no newer news: a burst of
// 100 told Retry-After: 1 through a 2 s outage skipped its steps at the
// host's return for the line's probes' failures, each told a moment
// later, and ended 2.53 s in on average against plain backoff's 2.11 s
// (2.04-2.06 s now; TestBurstToldRetryAfterEndsAsSoonAsPlainBackoff).
func (m *member) newsUntil() time.Time {
	if m.heeded == 0 {
		return m.downNews
	}
	return laterOf(m.downNews, m.told.at.Add(m.heeded))
}

// newsFor returns when the latest failed attempt that tells of m's path
// went: the host's latest, or, beside a path that keeps failing (see
// besideFailingPath), the latest on any other path. h.mu is held.
func (h *host) newsFor(m *member) time.Time {
	if h.besideFailingPath(m) {
		return h.failPathFrom
	}
	return h.downSeen
}

// inGrace reports whether the host, since its latest failure, answered
// within a failed attempt's time of m's latest step that found it down,
// or answered an attempt sent after that failure's and no later than the
// step (see upFrom): plain backoff's attempt at the step might have been
// answered, or would have been. The first alone missed slow answers: a
// burst of 100 against a host whose answers take 800 ms and whose
// failures are fast had its median call at 1.20-1.27x of plain backoff's,
// 1.12-1.20x with both (TestBurstAgainstSlowAnswersLearnsWhenTheHostCameBack);
// the second alone, failures slower than the answers that followed them
// (TestBurstAgainstSlowFailuresLearnsWhenTheHostCameBack). A step of a
// request told a Retry-After, on a host whose Retry-After names its
// return, not a wait (see waits), is in grace at an answer to an attempt
// sent after that failure's, wherever the step falls, if it came after
// that failure went: a held step comes after the moment the request was
// told, which the host named, and the host has failed nothing sent
// since. Without it, a client of 2 requests a second told the end of a
// 5 s outage skipped its steps at that moment, fresh requests coming, and
// ended its calls 0.53 s later than plain backoff's on average, the
// latest 5.5 s (0.09 s and 1.3 s now:
// TestASmallClientLearnsTheHostIsBackAtItsFirstAnswer). Any step so
// placed, told or not, brought small clients' untold outages level with
// plain backoff too, but a fleet's held steps then went at each client's
// first answer, and a server that falls over under twice its capacity
// fell over again after its outage (docs/storm-control.md, A told step
// skipped before the first answer goes at it). h.mu is held.
func (h *host) inGrace(m *member, now time.Time) bool {
	toldCame := m.heeded > 0 && !h.waits && m.downStep.After(h.downSeen)
	return h.run == 0 && !m.downStep.IsZero() && (!now.After(m.downStep.Add(h.took.avg)) || !h.upFrom.IsZero() && (!m.downStep.Before(h.upFrom) || toldCame))
}

// abandon takes the held m out of line: its hold ran out or was canceled.
// A release it did not use goes to the next in line.
func (h *host) abandon(m *member, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.outOfLine(m, now)
}

// outOfLine takes m out of the line at now: a release it was given and
// did not use goes to the next, and the first in line, which may be due
// to probe now, is woken. h.mu is held.
func (h *host) outOfLine(m *member, now time.Time) {
	if m.released {
		h.credit++
	}
	m.waiting, m.released = false, false
	h.release(now)
	h.firstWaiting(now).nudge()
}

// besideFailingPath reports whether the host's latest failures, two or
// more in a row, were on a path other than m's: neither they nor the
// host's fresh requests, which are that path's, tell of m's path (a dead
// endpoint beside one back from a blip: loopback median 2.6 s against
// plain backoff's 1.4 s, 1.6 s against 1.6 s now). Requests with an ID
// in each path, or a few paths in turn, seldom fail twice in a row on
// one (at one failure, the virtual default fleet with IDs sent 4.3-4.5x
// into its outage, against 3.0x). h.mu is held.
func (h *host) besideFailingPath(m *member) bool {
	return h.failing.path != m.told.path && h.failing.run >= 2
}
