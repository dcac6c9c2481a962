package httpretry

import (
	"cmp"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Tuning of the host gate: what each number is, then the measured reason
// for it (docs/storm-control.md has the sweeps). flowDevs' Retry-After
// herd figures were measured while the line paced told steps, before
// 2026-12-07.
const (
	// downAfter: attempts in a row unanswered that make a host down, and
	// prove an outage (with provenAfter); more for a host failing most of
	// its attempts at random (see downRun).
	// 60% random failures reach 16 once in 3,500: 4,942 requests, as off; 3,697 at 8.
	// Proof at 8 in a young state: 5-205 small clients at 60% random
	// failures lost 108 of 29,630 rescues (3 at 16).
	downAfter = 16
	// flowGaps: their usual gaps without one that make fresh requests stopped
	// (fewer while fewer have been seen: see flowEnd).
	// Virtual Retry-After herd, seeds 1-4, at 07f685d: 86.0-88.3% rescued, peak after 11.1-12.2x; 85.1-86.6% and 11.6-12.7x at 4, 82.1-82.9% and 12.5-13.8x at 12.
	flowGaps = 8
	// gapWeight: samples in the moving average of the gap between fresh requests; caps the gaps flowEnd counts.
	// The same herd: 86.0-88.3% rescued, peak after 11.1-12.2x; 82.0-82.5% and 12.8-14.2x at 4, 82.3-82.7% and 13.0-13.9x at 6.
	gapWeight = 8
	// flowDevs: deviations of that gap, past one gap, after which fresh requests count as stopped, as TCP's timeout adds four of its round trip's.
	// 8 goroutines 200 ms apart, 1.5 s outage: calls 0.99 s (off 1.36 s; 1.85 s without); Retry-After herd 1.57-2.37x at 10, 1.51-1.92x as without at 20.
	flowDevs = 20
	// tookWeight: a failed attempt's time weighs 1/tookWeight in the host's running average.
	// 500 ms answers: 14,271-14,314 of 14,794 rescued, off 14,325 (14,117 at 1); 8 lags a speedup.
	tookWeight = 2
	// shareStep: the least share, in parts of ReleaseShare, and an answer's growth of it.
	// 12% spare capacity: peak after 4.16x; 4.28x with a fixed share.
	shareStep = 1.0 / 8
	// provenAfter: an outage's age, in attempts' time, before it is proven (until one is).
	// Burst against a 500 ms server: median 1.28 s as off's (1.72 s at 0 and 1).
	provenAfter = 2
	// retryAfterGrain: how finely a Retry-After names a moment, an HTTP date or a delay in whole seconds.
	// 4 goroutines on a rate limit, dates read against Date headers: 102 of 1,200 rescues lost at 0, none at 1 s.
	retryAfterGrain = time.Second
	// pathsKept: the paths that answered last that a host keeps (see pathFailed).
	// A dead endpoint beside 3 live ones, 300 drawn groups: 38 of 2,338 rescues lost (58 at 1, 43 at 2, 38 at 8, 76 without).
	pathsKept = 4
	// downAfterRate: the random failure rate downAfter was measured at; a host failing more needs a longer run to be down (see downRun).
	// 300 drawn groups failing 70-95% at random: 120 of 23,640 rescues lost (2,156 with downAfter alone; 98 at 0.5, 353 at 0.7).
	downAfterRate = 0.6
	// mostRandomRate: the highest failure rate a host's runs are read as, so that downRun is 160 at most.
	// A state's short outages are read as random runs: without it, 15 failures and an answer, then 120 and one, left 500 in a row not down.
	mostRandomRate = 0.95
	// runWeight: runs in the moving mean of a host's runs of failures (see downRun).
	// The same groups: 120 lost (178 at 4, 110 at 16); a host back from 90% failures is down at 16 again after 14 answers (28 at 16).
	runWeight = 8
	// shedAfterRun: attempts in a row unanswered (the answering path's latest downAfter of them among them) after which a host back may shed (see shedWindow);
	// more for a host failing most attempts at random, as many times downRun as it is downAfter.
	// 600 drawn groups failing 60% at random: runs of 16 came 8 times, and retries held after them lost 7 of 64,790 rescues; none at 32.
	// 300 drawn groups failing 70-95%: 186 of 23,640 rescues lost at 32, 155 scaled.
	shedAfterRun = 2 * downAfter
	// youngShedAfterRun: shedAfterRun for a state that has seen no answer, which has counted the outage only from its first failure.
	// Virtual default fleet, seeds 1-4: 77.4-78.5% rescued, back to 95% in 1.1-1.3 s (75.4-76.3%, 1.5-1.6 s at shedAfterRun; 77.6-78.8% at 16 and 20).
	// 600 drawn groups failing 70-95% at random: 402 of 46,859 rescues lost (380 at shedAfterRun, 421 at 20, 450 at 16).
	youngShedAfterRun = downAfter * 3 / 2
	// shedOneIn: a host back sheds while one in shedOneIn or more of the attempts sent since its return failed, beyond chance (see failsAShare).
	// Small clients whose host fails 20% of attempts at random after a 3 s outage (20 seeds): requests rescued both ways 0.02-0.07 s later than plain backoff (0.05-0.18 s without the margin; 0.30-0.83 s on any one failure, 3 seeds);
	// the virtual default fleet back to 95% in 1.8-2.4 s against 1.0-1.3 s on any failure, 75.7-76.6% rescued against 77.9-78.9% (docs/storm-control.md, Random failures after an outage).
	shedOneIn = 3
)

// hostSet holds the state of the hosts that have requests retrying now;
// while none has, a request pays one atomic load (active) and no more.
type hostSet struct {
	share  float64 // ReleaseShare
	active atomic.Int32
	mu     sync.Mutex // serializes joining (see join) and leaving
	byName sync.Map   // of *host, for answered to find without a lock
}

// host is one host's state, kept only while requests to it are retrying,
// so that a finished request's history never reaches a later one. Its
// methods take the time as a value, so tests drive it without a clock.
type host struct {
	mu                  sync.Mutex
	name                string
	members             []*member          // the retrying requests, oldest first
	downSeen            time.Time          // when the latest failed attempt went
	run                 int                // attempts failed since the latest answer: zero while its latest outcome is an answer (it is created at a failure)
	outageStart         time.Time          // the first failure of the outage under way
	proven              bool               // an outage of it has been proven (see provenDown)
	took                attemptTime        // how long its failed attempts take
	drain               latest             // how long its failed responses took to drain
	backAt              time.Time          // when it last answered after being down
	lastFresh           time.Time          // the latest first attempt
	gap, gapDev         time.Duration      // the usual time between first attempts, and how far a gap usually is from it
	gaps                int                // samples in gap, up to gapWeight
	share, credit       float64            // releases each answer earns, and those earned, not yet used
	releasedSinceHalved bool               // a release happened since share was last halved
	says                latest             // the Retry-After its failures came with, zero when none
	probing             *member            // the line's probe whose outcome is awaited
	nextProbe, probedAt time.Time          // the next probe goes no earlier; when the line's latest probe went
	missed              int                // the line's probes failed in a row
	pace                time.Duration      // the wait after the latest failed probe
	named               time.Time          // the latest moment a heeded Retry-After named (see windows)
	paths               [pathsKept]pathRun // the paths that answered last, newest first
	failing             pathRun            // the path of the latest failed attempt, and its failures in a row (see besideFailingPath)
	failPathFrom        time.Time          // when the latest failure on another path than failing's went, or later
	calm                int                // answers in a row since the latest failure of an attempt sent since backAt, up to downAfter (see sheds)
	windows             bool               // an attempt sent at or after named failed naming a later moment, each to the grain (see ask)
	firstNamed          time.Time          // the first moment a heeded Retry-After named in the outage under way
	upFrom              time.Time          // when the earliest attempt answered since its latest failure went, if after downSeen; zero when none (see inGrace)
	waits               bool               // an attempt sent at or after firstNamed failed naming, or sent, a grain after it, in any outage while the state lives (see answered)
	meanRun             float64            // the mean of its runs of failed attempts that an answer ended, those that made it down left out (see downRun)
	runSamples          int                // the runs in meanRun, up to runWeight
	shedUntil           time.Time          // until when, back from an outage, it may shed (see shedWindow)
	sentSinceBack       int                // attempts sent since backAt whose outcome is known (see sheds)
	failedSinceBack     int                // of those, the failed
}

func newHostSet(share float64) *hostSet { return &hostSet{share: share} }

// pathRun is a path that answered (ok), and its attempts failed since.
type pathRun struct {
	path string
	run  int
	ok   bool
}

// pathAt returns the index of path in h.paths, or -1. h.mu is held.
func (h *host) pathAt(path string) int {
	return slices.IndexFunc(h.paths[:], func(p pathRun) bool { return p.ok && p.path == path })
}

// pathFailed returns the attempts m's path has failed since it answered,
// or downAfter when it has not answered lately. Zero: it answered after its
// latest failure. Below downAfter: it answers though the host may look
// down (on a host with one path, never so while the host is down). h.mu
// is held.
func (h *host) pathFailed(m *member) int {
	if i := h.pathAt(m.told.path); i >= 0 {
		return h.paths[i].run
	}
	return downAfter
}

// failed records f, a retryable failure of m's request to the named host,
// m joining its retrying requests on the first.
func (s *hostSet) failed(name string, m *member, f failure) {
	if m.h == nil {
		s.join(name, m, f.at)
	}
	h := m.h
	h.mu.Lock()
	defer h.mu.Unlock()
	defer h.wakeAfterFailure(f)() // once the failure is recorded
	sent := h.noteAttempt(m, f)
	h.noteTold(m, f, sent)
	if h.run == 0 && !h.backAt.IsZero() { // the first failure after an answer: an outage begins (counted only until one is proven)
		h.outageStart, h.firstNamed = f.at, time.Time{}
	}
	h.noteNamed(m, f, sent)
	h.run++
	if !f.sent.IsZero() && !f.sent.Before(h.backAt) { // one that went before the host came back tells of it down; one not timed went before the state was made
		h.calm, h.sentSinceBack, h.failedSinceBack = 0, h.sentSinceBack+1, h.failedSinceBack+1
	}
	if i := h.pathAt(f.path); i >= 0 {
		h.paths[i].run++
	}
	m.toldIn = time.Time{}
	if f.floor > 0 && h.down() { // a hold for it, while this outage lasts (rule 1)
		m.toldIn = h.outageStart
	}
	h.heard(m, f.at, true)
	h.provenDown(f.at) // an outage proven stays so, whether or not a retry asked during it
	if f.first {
		h.noteFresh(f.at)
	}
	if h.releasedSinceHalved { // halved once per release, as TCP once per round trip (rule 4)
		h.share, h.releasedSinceHalved = max(h.share/2, shareStep*s.share), false
		h.credit = min(h.credit, h.share)
	}
}

// wakeAfterFailure reads, before the failure f is recorded, what f may
// change that a held retry sleeps on, and returns what to do once it is.
// A shorter Retry-After, or none: a retry kept from going between its
// steps by the longer may now go, by a release kept
// (TestAShorterRetryAfterUsesAReleaseKept) or as the line's probe. A
// longer one, or the host now down: the first in line may no longer go,
// and the next, beside a failing path, may be due to probe
// (TestALongerRetryAfterHandsTheProbeOn). The second failure in a row on
// a path: the retries of the others may now probe (see
// besideFailingPath), fresh requests coming or not. While the line
// probes at moments named (see momentCame): the first failure after an
// answer, at which a moment that came while the host answered is due
// (TestAMomentComeWhileTheHostAnsweredWakesTheProbe), and any failure
// that changes the moment pending, as one that names an earlier moment
// does (TestAnEarlierMomentNamedWakesTheLinesProbe) or one sent after
// the earliest (TestAFailureAfterTheEarliestMomentWakesTheProbeForTheNext).
// h.mu is held.
func (h *host) wakeAfterFailure(f failure) func() {
	shorter, longer, wasDown := f.floor < h.says.v, f.floor > h.says.v, h.down()
	few, afterAnswer := h.gaps < flowGaps, h.run == 0
	var pending time.Time
	if few {
		pending = h.pendingMoment()
	}
	return func() {
		if shorter {
			h.release(f.at)
		}
		if shorter || longer || h.down() != wasDown || h.failing.run == 2 || few && (afterAnswer || !h.pendingMoment().Equal(pending)) {
			h.firstWaiting(f.at).nudge()
		}
	}
}

// noteAttempt records the time f's attempt took, its path among the
// failing ones, and when it went, which it returns: what the failure tells
// of is the host when the attempt went. h.mu is held.
func (h *host) noteAttempt(m *member, f failure) (sent time.Time) {
	if !f.sent.IsZero() {
		took := max(f.at.Sub(f.sent), 0)
		h.took.note(took)
		m.took.note(took)
	}
	sent = cmp.Or(f.sent, f.at)
	if f.path != h.failing.path { // the failures before it were on another path
		h.failing, h.failPathFrom = pathRun{path: f.path}, h.downSeen
	}
	h.failing.run++
	m.downNews, h.downSeen = sent, laterOf(h.downSeen, sent)
	return sent
}

// noteTold makes f m's latest failure (see member.told). Its Retry-After,
// if any, is heeded unless over MaxRetryAfter (never waited, it times no
// step; a floor is never negative), and tells of the host whether its
// failures say one and whether the moments they name are a rate window's
// ends (see host.windows); m's path's held steps read it (see
// toldOnPath). h.mu is held.
func (h *host) noteTold(m *member, f failure, sent time.Time) {
	m.told, m.heeded, m.fromLine = f, 0, false
	h.says.note(m, f.floor)
	if f.floor <= 0 || f.overCap {
		return
	}
	m.heeded = f.floor
	// A moment named after one that came without the host's return: a
	// rate window's end.
	end := f.at.Add(f.floor)
	came := !h.named.IsZero() && !sent.Before(h.named.Add(-retryAfterGrain))
	h.windows = h.windows || came && end.After(h.named.Add(retryAfterGrain))
	h.named = laterOf(h.named, end)
}

// noteNamed records the first moment a Retry-After named in the outage
// under way, and whether the host has failed an attempt sent at or after
// it that it told to come back, or that went, more than a grain later:
// its Retry-After then names a wait, not its return (see answered). A
// fleet told the return, as a date read against whole-second Date headers
// or seconds counted down to it, is told moments less than a grain apart
// and none past it. h.mu is held.
func (h *host) noteNamed(m *member, f failure, sent time.Time) {
	next := laterOf(sent, f.at.Add(m.heeded))
	h.waits = h.waits || !h.firstNamed.IsZero() && !sent.Before(h.firstNamed) && next.After(h.firstNamed.Add(retryAfterGrain))
	if h.firstNamed.IsZero() && m.heeded > 0 {
		h.firstNamed = f.at.Add(m.heeded)
	}
}

// join adds m to the named host's retrying requests, creating its state,
// down from the start so that a burst's first failures are held at once.
func (s *hostSet) join(name string, m *member, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.byName.Load(name)
	if !ok {
		v = &host{name: name, share: s.share, releasedSinceHalved: true, outageStart: at}
		s.byName.Store(name, v)
		s.active.Add(1)
	}
	m.h = v.(*host)
	m.h.mu.Lock()
	m.h.members = append(m.h.members, m)
	m.h.mu.Unlock()
}

// answered records that the named host answered a request to path (m is
// nil when it never failed), whose attempt went at sent (zero when not
// known). A host without state costs one atomic load; a nil set (the gate
// off), none.
func (s *hostSet) answered(name, path string, m *member, first bool, sent time.Time) {
	if s != nil && s.active.Load() > 0 { // a read lock here, shared by every success, cost 4x under load
		if v, ok := s.byName.Load(name); ok { // a member's host is there while it is a member
			v.(*host).answered(time.Now(), path, m, first, s.share, sent)
		}
	}
}

// answered records at now an answer to path, to an attempt sent at sent:
// it earns the line share of a release, the share, up to full, grows back
// (rule 4), the path is kept as one that answers (see pathFailed), and
// the host has answered since the attempt went (see inGrace).
func (h *host) answered(now time.Time, path string, m *member, first bool, full float64, sent time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	// path goes first among those kept, its run at zero; the oldest kept
	// goes when it was not among them.
	i := h.pathAt(path)
	if i < 0 {
		i = pathsKept - 1
	}
	copy(h.paths[1:i+1], h.paths[:i])
	h.paths[0] = pathRun{path: path, ok: true}
	back, news := h.down(), h.run > 0
	widened := h.noteUp(sent, back || news)
	if back {
		h.sentSinceBack, h.failedSinceBack = 0, 0
		// A relapse within the window, at its capacity, keeps it: the
		// backlog is still coming back (TestShedWindowOutlastsARelapse).
		h.backAt, h.calm, h.shedUntil = now, downAfter, laterOf(h.shedUntil, h.shedWindow(now, path))
	} else if !sent.IsZero() && !sent.Before(h.backAt) {
		h.sentSinceBack++
	}
	h.calm = min(h.calm+1, downAfter)
	if h.run < h.downRun() { // a run that made it down was an outage, not one of its random failures
		h.runSamples = min(h.runSamples+1, runWeight)
		h.meanRun += (float64(h.run) - h.meanRun) / float64(h.runSamples)
	}
	h.run, h.missed, h.pace = 0, 0, 0
	if first {
		h.noteFresh(now)
	}
	h.heard(m, now, false)
	// The line alone probes the host, or a Retry-After shown to be a wait
	// (see noteNamed) told the retry when to come back: slow start, until
	// the host sheds (TCP's threshold), as releases then take the slots of
	// the steps plain backoff sends (50 requests on a host back serving 5
	// at a time: 413-422 of 500 rescued against plain backoff's 453,
	// 455-462 now). Paced by fresh requests alone, the told retries of 20
	// drawn fleets (Retry-After: 1 or 2) ended 1,580 of 10,621 requests
	// later than plain backoff, 15 min 54 s in all, and 1,851 sooner, 8 min
	// 39 s; 1,159 and 6 min 45 s, 2,980 and 30 min 40 s with it (1,026
	// and 3 min 59 s, 2,979 and 30 min 40 s since told steps go on the
	// host's answer). A herd told the outage's end earns no such credit:
	// its Retry-After names a return.
	if m != nil && m.fromLine && (!h.flowing(now) || m.told.floor > 0 && h.waits) && !h.sheds(m) {
		h.credit += 2
	}
	h.share = min(h.share+shareStep*full, full)
	h.credit += h.share
	h.release(now)
	switch {
	case back: // every held retry looks whether a step of its found it down
		h.nudgeHeld(now, false)
	case news: // the first answer after a failure: the retries it puts in grace go, and the probe's pace is reset
		h.nudgeHeld(now, true)
		h.firstWaiting(now).nudge()
	case widened: // an answer to an attempt sent earlier than those answered before it: the retries it puts in grace go
		h.nudgeHeld(now, true)
	}
}

// shedWindow returns until when the host, answering path at now after an
// outage, may shed (see mayShed): for as long as the outage lasted, as the
// backlog built up over it comes back at once, when the outage, its latest
// failures on path, was long (shedAfterRun attempts in a row, more on a
// host failing most attempts at random, fewer, youngShedAfterRun, for a
// state that has seen no answer, the latest downAfter of them path's) or
// told a heeded Retry-After (see
// firstNamed: a fleet told to come back has few attempts to count, the
// herd's Transports a few requests a second each); otherwise never. Told,
// not only its latest failure: the herd's first answers come among
// refusals, which say none, and with the latest alone most of its
// Transports opened no window (the virtual herd, seed 1: peak after
// 5.60x of capacity, 4.10x with this alone, 2.65x with mayShed's backlog
// too). A young state's first answer is a return too, so that a short
// outage told a Retry-After opens a short window. A return within a
// window opened before does not shorten it (see answered). h.mu is held.
func (h *host) shedWindow(now time.Time, path string) time.Time {
	need := shedAfterRun * h.downRun() / downAfter
	if h.backAt.IsZero() { // its first answer: every attempt it has seen failed
		need = youngShedAfterRun
	}
	long := h.failing.run >= downAfter && h.run >= need
	if h.failing.path == path && (long || !h.firstNamed.IsZero()) {
		return now.Add(now.Sub(h.outageStart))
	}
	return time.Time{}
}

// noteUp records that an attempt sent at sent was answered, the first
// since a failure when first, and reports whether it moved upFrom
// earlier. Only an attempt that went after the latest failed one tells
// that the host answers from then on: an earlier one, slow, tells
// nothing of the failure after it. h.mu is held.
func (h *host) noteUp(sent time.Time, first bool) (widened bool) {
	if first {
		h.upFrom = time.Time{}
	}
	widened = !sent.IsZero() && sent.After(h.downSeen) && (h.upFrom.IsZero() || sent.Before(h.upFrom))
	if widened {
		h.upFrom = sent
	}
	return widened
}

// noteFresh records a first attempt at now; a pause after fresh requests
// stopped is not a gap between them. h.mu is held.
func (h *host) noteFresh(now time.Time) {
	if !h.lastFresh.IsZero() {
		raw, old := max(now.Sub(h.lastFresh), 0), h.gap
		paused := h.gaps > 0 && !now.Before(h.flowEnd()) // the gap stays as it was
		h.gaps = min(h.gaps+1, gapWeight)
		if !paused {
			h.gap += (raw - old) / time.Duration(h.gaps)
		}
		// A pause counts in the deviation (up to flowGaps gaps), so that a
		// flow that pauses, or comes at random, is not taken for a ticker.
		h.gapDev += (min((raw-old).Abs(), flowGaps*old) - h.gapDev) / time.Duration(h.gaps)
		defer func() {
			if h.gap < old || paused { // the probe, paced by the gap, may be due sooner; or, the flow back, one beside a failing path is first (see firstWaiting)
				h.firstWaiting(now).nudge()
			}
		}()
	}
	h.lastFresh = now
}

// flowEnd is when fresh requests will count as stopped: after as many of
// their usual gaps as have been seen, up to flowGaps, since a flow seen
// once is weak evidence and a held retry that waits for fresh requests
// that never come loses its steps; or sooner, after one gap and flowDevs
// of its deviations (a quarter of a gap at least, as TCP's timeout has a
// floor, so that a beat on time is not one missed), since a flow as
// regular as a ticker's that misses its beat has stopped. h.mu is held.
func (h *host) flowEnd() time.Time {
	return h.lastFresh.Add(min(time.Duration(min(h.gaps, flowGaps))*h.gap, h.gap+max(flowDevs*h.gapDev, h.gap/4)))
}

// flowing reports whether fresh requests keep coming at now. h.mu is held.
func (h *host) flowing(now time.Time) bool { return h.gaps > 0 && now.Before(h.flowEnd()) }

// latest is the latest duration the host's retrying requests reported of
// something, and the latest that a request other than its reporter did,
// so that a request can ask what the others said last.
type latest struct {
	v, others time.Duration
	by        *member // the request that reported v
}

// note records v, reported by m.
func (l *latest) note(m *member, v time.Duration) {
	if l.by != m {
		l.others = l.v
	}
	l.v, l.by = v, m
}

// besides returns the latest value reported by a request other than m.
func (l *latest) besides(m *member) time.Duration {
	if l.by == m {
		return l.others
	}
	return l.v
}

// attemptTime is a running average of the time failed attempts take, and
// the longest.
type attemptTime struct {
	avg, longest time.Duration
	timed        bool // avg has been measured
}

// note adds an attempt's time to the average and the longest.
func (a *attemptTime) note(took time.Duration) {
	if !a.timed { // the first is the average
		a.avg = took
	}
	a.avg += (took - a.avg) / tookWeight
	a.longest, a.timed = max(a.longest, took), true
}

// down: no answer in downRun attempts, or none yet (a state starts
// down). h.mu is held.
func (h *host) down() bool { return h.run >= h.downRun() || h.backAt.IsZero() }

// downRun returns how many attempts in a row unanswered make the host
// down: downAfter, or, for a host that fails more than downAfterRate of
// its attempts at random, a run as rare at its failure rate as downAfter
// is at downAfterRate (37 at 80%, 78 at 90%, 160 at most), so that its
// random runs are not taken for an outage. Its rate is read from the runs
// of failures that answers ended, all but those that made it down: a
// shorter outage, as a young state's first run may be, counts as random
// failures until the answers after it bring the mean down. h.mu is held.
func (h *host) downRun() int {
	rate := min(h.meanRun/(1+h.meanRun), mostRandomRate) // a mean run of failures before each answer is rate/(1-rate)
	if rate <= downAfterRate {
		return downAfter
	}
	return int(math.Ceil(downAfter * math.Log(downAfterRate) / math.Log(rate)))
}

// provenDown reports whether at now the host is down and proven so:
// downRun attempts in a row failed, however young its state, and its
// outage is old; once proven, the state stays proven (rule 1). h.mu is
// held.
func (h *host) provenDown(now time.Time) bool {
	old := h.took.timed && now.Sub(h.outageStart) >= provenAfter*h.took.avg
	h.proven = h.proven || h.run >= h.downRun() && old
	return h.proven && h.down()
}

// leave ends m's membership: its request is over. When it was the line's
// probe, the next may go; a host with no request retrying is forgotten.
func (s *hostSet) leave(m *member) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := m.h
	h.mu.Lock()
	defer h.mu.Unlock()
	i := slices.Index(h.members, m) // -1, and a panic below, were it to leave twice
	switch h.members = slices.Delete(h.members, i, i+1); len(h.members) {
	case 0:
		s.byName.Delete(h.name)
		s.active.Add(-1)
	case 1:
		h.members[0].nudge() // alone now: a held retry goes (see poll)
	}
	if m.waiting || m.released { // its request ended in line without leaving it, as one that panics while held does
		h.outOfLine(m, time.Now())
	}
	if m.heeded > 0 && h.gaps < flowGaps { // its moment named may have hidden a later one, come already (see momentCame)
		h.firstWaiting(time.Now()).nudge()
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
