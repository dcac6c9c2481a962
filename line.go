package httpretry

import (
	"sort"
	"time"
)

// The line: a host's held requests, oldest first, and the rules by which
// each goes (docs/storm-control.md rules 2 to 5).

// member is one retrying request of a host. Its life is written only by its
// request's goroutine, as are policy, askBudget, between and downNews;
// the rest is shared under h.mu, and so are the life's floor and giveUp,
// which the line reads (see host.mayGoBetween).
type member struct {
	h                 *host
	wake              chan struct{} // nudged when it should look at the host again
	policy            Policy        // its request's, whose steps pace the line's probes
	spent             int           // retries charged to the budget
	paid              bool          // its next retry's token was taken when the budget was asked
	saysWait          bool          // its latest failure came with a Retry-After
	waiting, released bool          // held in line; let go by the line's credit
	last              bool          // its retry held now is its last: never a probe
	askBudget         bool          // its retry goes between its steps into a host proven down: the budget is asked
	fromLine          bool          // its latest retry went from the line: an answer earns its place back
	between           bool          // a retry of it went between its life's steps, as plain backoff never sends one, and none since at a step
	downNews          time.Time     // when the latest failure it acted on went: its own, or one a step of its skipped for
	toldIn            time.Time     // the start of the outage in which its latest failure came with a Retry-After, the host down; zero when none
	took              attemptTime   // its own failed attempts' time, which alone times its life (zero until measured: see earlyEnd)
	drains            attemptTime   // how long their responses took to drain: its life is fitted to the deadline by them too
	life                            // drawn at its first hold; the zero life is none
}

// life is what a held request's own backoff gives it (docs/storm-control.md rule 5).
type life struct {
	drawn    time.Time     // when it was drawn
	own      ownSteps      // the steps its own backoff takes from drawn
	step     int           // the next of them to come
	downStep time.Time     // the latest that found the host down
	floor    time.Duration // the Retry-After wait it was drawn with
	hard     time.Time     // the deadline or MaxElapsed; zero when neither
	giveUp   time.Time     // when its own backoff sends its last retry
	atHard   bool          // giveUp is set by the deadline or MaxElapsed, not its steps
	earlyEnd bool          // its last retry went at a life timed before any of its attempts was
	lastGone bool          // its last retry went at its life's end, timed: the life is over
	sentAt   int           // the step at which the line sent its latest retry; 0 when it went otherwise
}

func newMember() *member { return &member{wake: make(chan struct{}, 1)} }

// goes records that m's retry goes at now, held or not: at its life's end,
// it is the life's last (lastGone) unless earlyEnd.
func (m *member) goes(now time.Time) {
	if m.outlived(now) {
		m.earlyEnd = !m.took.timed && m.own.count > 0 && !m.atHard
		m.lastGone = !m.earlyEnd
	}
}

// outlived reports whether at now m's life is over.
func (m *member) outlived(now time.Time) bool {
	return !m.giveUp.IsZero() && !now.Before(m.giveUp)
}

// ownWait returns, at now, the wait before m's next retry that storm
// control's view of its life gives, own being its own backoff's wait (see
// lifeLeft), told reporting that the failure came with a Retry-After.
// early reports that its life's last retry went an attempt's time early
// (see goes), and the next goes at once in its place; over, that its
// life's last retry has gone, or went early and its successor would wait
// a Retry-After: a whole wait after the life's end.
func (m *member) ownWait(now time.Time, own time.Duration, told bool) (wait time.Duration, early, over bool) {
	wentEarly := m.earlyEnd
	wait, over = m.lifeLeft(now, own)
	early, m.earlyEnd = over && wentEarly, false
	switch {
	case wentEarly && told:
		return 0, false, true
	case early:
		return 0, true, false
	}
	return wait, false, over
}

// toNextStep returns own, m's own backoff's wait at now, cut to end at
// its life's next step when its latest retry went between steps: plain
// backoff sends its next retry there, and a whole wait from the
// in-between send would skip it, or be taken for one that would pass the
// deadline.
func (m *member) toNextStep(now time.Time, own time.Duration) time.Duration {
	if !m.between || m.drawn.IsZero() {
		return own
	}
	k := m.nextStep(now)
	if k > m.own.count { // no step left but the last
		return own
	}
	return min(own, max(m.stepAt(k).Sub(now), 0))
}

// toStepAfter returns wait, a Retry-After's wait drawn at now, cut to end
// at m's life's next step (after the one its retry sent at sent stood
// for) when that step, no earlier than the Retry-After's end, comes
// first: the life drew that step's spread above the Retry-After ahead,
// and one drawn again would put the retry past it.
func (m *member) toStepAfter(now, sent time.Time, wait, floor time.Duration) time.Duration {
	if m.between || m.drawn.IsZero() {
		return wait
	}
	k := m.nextStep(m.afterStoodFor(now, sent))
	if k > m.own.count {
		return wait
	}
	if next := m.stepAt(k).Sub(now); next >= floor && next < wait {
		return next
	}
	return wait
}

// waitsFor records that m's request, whose retry went at sent, will wait
// until end for a Retry-After asking floor. The life's steps after the
// retry then wait at least floor, whatever Retry-After they were drawn
// with, as plain backoff's waits follow the latest it was told (unless a
// deadline or MaxElapsed bounds the life: see retime). After a
// retry sent at a step of its life, or at its own backoff's time, the
// Retry-After also puts off the life's steps as it puts off plain
// backoff's, by floor: the life drew its own spread above it; but one
// sent at its own backoff's time after the life's last step but one
// stood for the last, and changes nothing. After one the line let go
// between steps, or one that followed it at its own backoff's time,
// which plain backoff never sent, nothing is put off, and the steps
// before end are skipped; over reports that end is past
// the life's end, where plain backoff has sent its last retry, unless this
// Retry-After is the first its host said since the life was drawn: then
// plain backoff's retries would be put off too (the exception of mixed
// Retry-After in StormControl's doc).
func (m *member) waitsFor(now, sent, end time.Time, floor time.Duration) (over bool) {
	if !m.between && m.standsForLast(sent) {
		return !end.Before(m.giveUp)
	}
	m.retime(now, sent, floor)
	if !m.between { // only the steps after the one it stood for are put off
		m.putOff(m.afterStoodFor(now, sent), now.Add(floor))
		return false
	}
	if !m.drawn.IsZero() { // skipped, so that a later look does not take one for a step just come
		m.step += sort.Search(max(m.own.count-m.step, 0), func(i int) bool { return !m.stepAt(m.step + i).Before(end) })
	}
	return !m.giveUp.IsZero() && !end.Before(m.giveUp)
}

// standsForLast reports whether a retry sent at sent, at its own
// backoff's time, went after the step before its life's end and before
// that end: it stands for the life's last retry.
func (m *member) standsForLast(sent time.Time) bool {
	if m.drawn.IsZero() || m.giveUp.IsZero() || sent.IsZero() || !sent.Before(m.giveUp) {
		return false
	}
	if m.sentAt > 0 { // sent by the line at a step: the last only if that step is
		return !m.stepAt(m.sentAt).Before(m.giveUp)
	}
	k := m.nextStep(sent)
	return k <= m.own.count && !m.stepAt(k).Before(m.giveUp)
}

// sentStep returns the step at which the line sends m's retry at now: the
// step just come, or the last when the life is over; 0 for a retry sent
// between steps.
func (m *member) sentStep(now time.Time) int {
	switch {
	case m.between:
		return 0
	case m.outlived(now):
		return m.own.count
	}
	return max(m.step-1, 1)
}

// stoodFor returns the step of m's drawn life that its retry sent at sent
// stands for: the step the line sent it at, or, for one sent at its own
// backoff's time, the nearest. One sent alone a little before a step is
// that step's retry, not a second one for the step before; taken for the
// latter, its Retry-After put that step off, and the life ended a step
// later than plain backoff. A step's send is not judged by time, as the
// life is re-timed once its attempts are (a retry sent at step 3, judged
// by steps moved later, was taken for step 2).
func (m *member) stoodFor(sent time.Time) int {
	if m.sentAt > 0 {
		return m.sentAt
	}
	k := min(m.nextStep(sent), m.own.count)
	if k > 1 && sent.Sub(m.stepAt(k-1)) < m.stepAt(k).Sub(sent) {
		return k - 1
	}
	return k
}

// afterStoodFor returns now, or, when the retry m sent at sent, at its
// own backoff's time, stood for a step still to come, that step's time:
// the life's next step is the one after either.
func (m *member) afterStoodFor(now, sent time.Time) time.Time {
	if sent.IsZero() {
		return now
	}
	return laterOf(now, m.stepAt(m.stoodFor(sent)))
}

// mayGoBetween reports whether at now m's retry may go between its
// life's steps: not while the host is down and says Retry-After when m's
// life waits one that, told again, would end past the life's end, where
// plain backoff sends no retry. h.mu is held.
func (h *host) mayGoBetween(m *member, now time.Time) bool {
	if m.giveUp.IsZero() {
		return true
	}
	took := m.took.avg + m.drains.avg
	if !now.Add(took).Before(m.giveUp) { // it would still be out at its life's last step, which must go
		return false
	}
	next := took + spreadUp(m.floor, 1) // the latest it would go, as its wait starts after the drain
	return m.floor == 0 || !h.saysWait || !h.down() || now.Add(next).Before(m.giveUp)
}

// cutBy returns the deadline or MaxElapsed when it cut m's life short,
// and zero otherwise.
func (m *member) cutBy() time.Time {
	if m.own.cut || m.atHard {
		return m.hard
	}
	return time.Time{}
}

// lifeLeft returns the wait at now before m's next retry: d, its own
// backoff's, cut to end with its life, or, in a life that the deadline or
// MaxElapsed cut short, until the life's next step as drawn when it was
// first held (rule 5); over reports that the life is over.
func (m *member) lifeLeft(now time.Time, d time.Duration) (wait time.Duration, over bool) {
	if m.giveUp.IsZero() {
		return d, false
	}
	if m.outlived(now) {
		return 0, true
	}
	if !m.own.cut && !m.atHard { // MaxRetries bounds its attempts, not the deadline or MaxElapsed
		return min(d, m.giveUp.Sub(now)), false
	}
	k := m.nextStep(now)
	return earlierOf(m.stepAt(k), m.giveUp).Sub(now), false
}

// retime makes the steps of m's life, if it has one, wait at least floor
// after its retry sent at sent, floor being the Retry-After that retry was
// told (zero: none), as plain backoff waits the latest one told: from the
// step after the one the retry stood for, or, after one sent between
// steps, from the next. Kept at the one they were drawn with, the steps
// ended later than plain backoff's in a hunt whose server changed its
// Retry-After among 1, 2 and 3 s every 0.7 s (346 of 8,200 runs, 959 s
// in all; 331, 564 s, re-timed), and, with none at times, in 261 of
// 7,187, 278 s (228, 176 s). A life that a deadline or MaxElapsed bounds
// is not re-timed: its steps were drawn only as far as the bound lets
// them, so steps drawn closer ended it too soon, and further apart, cut
// by the bound, ended it before a wait that plain backoff fits (a
// review's cases: 200s lost where plain backoff got them).
func (m *member) retime(now, sent time.Time, floor time.Duration) {
	if m.drawn.IsZero() || m.floor == floor || !m.hard.IsZero() {
		return
	}
	after := now
	if !m.between {
		after = m.afterStoodFor(now, sent)
	}
	m.own.refloor(m.nextStep(after), floor)
	m.h.mu.Lock()
	defer m.h.mu.Unlock()
	m.floor = floor
	m.h.live(m)
}

// putOff moves m's life, if it has one, so that its next step after now
// comes no earlier than at, and the later steps with it: a Retry-After
// delays plain backoff's next retry, and those after it, the same way.
func (m *member) putOff(now, at time.Time) {
	if m.drawn.IsZero() {
		return
	}
	k := m.nextStep(now)
	if next := m.stepAt(k); next.Before(at) {
		m.drawn = m.drawn.Add(at.Sub(next))
		m.h.mu.Lock()
		defer m.h.mu.Unlock()
		m.h.live(m)
	}
}

// nextStep returns the first of m's life's steps, 1 to its count, that
// comes after now, or count+1 when none does.
func (m *member) nextStep(now time.Time) int {
	return 1 + sort.Search(m.own.count, func(i int) bool { return now.Before(m.stepAt(i + 1)) })
}

// stepAt is when step k of m's life comes: its own backoff's retry k after
// the one it was drawn at, each attempt taking its own attempts' time.
func (m *member) stepAt(k int) time.Time { return addCapped(m.drawn, m.own.at(k, m.took.avg)) }

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
// the host down, or down until backAt, however late m looks. h.mu is held.
func (h *host) stepCame(m *member, now time.Time) (came bool, nextStep time.Time) {
	k := m.step + sort.Search(max(m.own.count-m.step, 0), func(i int) bool { return now.Before(m.stepAt(m.step + i)) })
	if came = k > m.step; came {
		if last := m.stepAt(k - 1); h.down() || last.Before(h.backAt) {
			m.downStep = last
		}
	}
	if m.step = k; k < m.own.count {
		nextStep = m.stepAt(k)
	}
	return came, nextStep
}

// heard records at now the outcome of m's attempt: when m was the line's
// probe, the next goes at the line's pace (rule 3). h.mu is held.
func (h *host) heard(m *member, now time.Time, failed bool) {
	if m == nil || h.probing != m {
		return
	}
	if failed {
		h.missed++
		h.pace = m.policy.Delay(h.missed, h.pace, 0.5)
	}
	h.probing, h.nextProbe = nil, now.Add(max(h.gap, h.pace))
	h.nudgeFirst(now)
}

// live sets m's giveUp from its own attempts' time: its last step, or,
// with a deadline, the last whose attempt fails before it, as plain
// backoff's last attempt is one that ends before the deadline (rule 5).
// h.mu is held.
func (h *host) live(m *member) {
	if m.lastGone || m.drawn.IsZero() { // a slow last attempt does not lengthen it; no life, no hard
		return
	}
	took, last := m.took.avg, m.own.count
	if !m.hard.IsZero() { // the first step whose attempt would not fail before it, less one
		last = max(sort.Search(last+1, func(k int) bool { return !m.stepAt(k).Add(took).Before(m.hard) })-1, 0)
	}
	m.giveUp, m.atHard = m.stepAt(last), last < m.own.count
}

// firstWaiting returns the oldest retry held in line that may probe at
// now (not a last retry, kept for its life's end, nor one that may not go
// between its steps), or nil. h.mu is held.
func (h *host) firstWaiting(now time.Time) *member {
	for _, m := range h.members {
		if m.waiting && !m.last && h.mayGoBetween(m, now) {
			return m
		}
	}
	return nil
}

// nudgeWaiting nudges every retry held in line. h.mu is held.
func (h *host) nudgeWaiting() {
	for _, m := range h.members {
		if m.waiting {
			m.nudge()
		}
	}
}

// nudgeFirst nudges the oldest retry held in line that may probe at now.
// h.mu is held.
func (h *host) nudgeFirst(now time.Time) {
	if m := h.firstWaiting(now); m != nil {
		m.nudge()
	}
}

// release lets the oldest held retries go, one per unit of credit; credit
// is not saved up while nobody waits. h.mu is held.
func (h *host) release(now time.Time) {
	freed := false
	for i := 0; i < len(h.members) && h.credit >= 1; i++ {
		if m := h.members[i]; m.waiting && h.mayGoBetween(m, now) {
			h.credit--
			m.waiting, m.released, h.cut, freed = false, true, true, true
			m.nudge()
		}
	}
	h.credit = min(h.credit, 1)
	if freed {
		h.nudgeFirst(now) // a new oldest in line may probe
	}
}

// ask decides, once m's retry has waited its own backoff, whether it is
// held: only with another request to the host retrying, and the host
// proven down or a Retry-After told (rule 1). last reports that the retry
// is its request's last.
func (h *host) ask(m *member, last bool, now time.Time) (held bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	m.last = last
	down := h.provenDown(now)
	singled := m.saysWait && !h.othersSayWait(m) // a Retry-After of its own named its time, the others' failures none
	told := m.toldIn.Equal(h.since)              // an outage the host has since answered out of told it nothing of this one
	if len(h.members) == 1 || singled || !down && !told {
		m.askBudget, m.sentAt = false, 0 // it goes at its own backoff's time, as plain backoff's would
		return false
	}
	m.waiting, m.askBudget = true, false
	return true
}

// othersSayWait reports whether the latest failure of a request to the
// host other than m came with a Retry-After. h.mu is held.
func (h *host) othersSayWait(m *member) bool {
	if h.lastFailed == m {
		return h.othersWait
	}
	return h.saysWait
}

// poll decides whether the held m goes at now: released by the line's
// credit; at a step of its own backoff when the host answers (rule 5); at
// its life's end whatever the host's state; or as the line's probe, the
// oldest held, once fresh requests have stopped, no other probe is out and
// a pace has passed since the probe before and since the host's latest
// failure (rule 3). Otherwise it says when to look again, no later
// than m's life's end (zero before a life is drawn, and at the deadline,
// where the life is over).
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
	// A step goes when the host is back (not for a life drawn with a
	// Retry-After), or on stale news: alone, it would know no more (rule 5).
	inGrace := !m.downStep.IsZero() && !now.After(m.downStep.Add(max(h.took.avg, h.answerTook)))
	stale := stepCame && (!flowing || h.streak > 0 && m.floor == 0) && !h.downSeen.After(m.downNews)
	if stepCame { // news a step skips for stands for the attempt it skipped: it holds one step, not the next
		m.downNews = laterOf(m.downNews, h.downSeen)
	}
	back := stepCame && h.streak >= upAfter || h.streak > 0 && inGrace
	answers := back && m.floor == 0 || stale
	switch {
	case m.released:
		m.released, m.askBudget, m.fromLine, m.between, m.sentAt = false, false, true, true, 0
		return true, time.Time{}
	case answers, m.outlived(now), len(h.members) == 1 && h.mayGoBetween(m, now): // or alone now: no other request is failing with it (rule 1)
		m.waiting, m.fromLine = false, len(h.members) > 1 // alone, it was not the line's
		m.between = !answers && !m.outlived(now)
		m.askBudget = false // at its step, released by answers, or alone (rule 1)
		m.sentAt = m.sentStep(now)
		h.nudgeFirst(now)
		return true, time.Time{}
	}
	wake = earlierOf(nextStep, m.giveUp)
	switch {
	case flowing:
		return false, earlierOf(h.flowEnd(), wake) // fresh requests probe for the line
	case h.probing != nil, m != h.firstWaiting(now):
		return false, wake
	}
	if next := laterOf(h.nextProbe, h.downSeen.Add(max(h.gap, h.pace))); now.Before(next) {
		return false, earlierOf(next, wake) // a failure that recent told what a probe would
	}
	m.waiting, m.askBudget, m.fromLine, m.between, m.sentAt = false, h.asksBudget(down), true, true, 0
	h.probing = m
	return true, time.Time{}
}

// refusedProbeGap is the least wait before the next probe after the budget
// refused one: with a Policy of nanosecond waits, a held retry would
// otherwise ask the budget again and again without ever blocking.
const refusedProbeGap = time.Millisecond

// refused puts back in line the held m, whose retry the budget refused as
// the line's probe; the next probe goes a pace later.
func (h *host) refused(m *member, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	m.waiting, m.fromLine = true, false
	if h.probing == m {
		h.probing, h.nextProbe = nil, now.Add(max(h.gap, h.pace, m.policy.Delay(1, 0, 0.5), refusedProbeGap))
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
	h.nudgeFirst(now)
}
