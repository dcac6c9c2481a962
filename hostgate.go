package httpretry

import (
	"sync"
	"sync/atomic"
	"time"
)

// Tuning of the host gate. Each number is the one the storm simulator
// (bench/storm, docs/storm-control.md) measured best with.
const (
	// flowGaps: fresh requests have stopped once none came for this many
	// of their usual gaps; random arrivals pause that long one time in 55,
	// so a fleet's client rarely mistakes a pause for the end of demand
	// (load in the default storm's outage 1.3x, against 1.5x allowed).
	flowGaps = 8
	// gapWeight: the usual gap is a moving average over about this many.
	gapWeight = 8
	// healthy and healthWeight: a host that answered at least a quarter
	// of its last eight or so attempts is up, its failures noise: no
	// retry is held for them. A host with 60% of its attempts failing at
	// random stays above it, so its clients' retries keep their own
	// backoff (their throughput as with storm control off), while a host
	// that is down falls below it within a few failures (a new host's
	// state starts at zero: it is created by a failure).
	healthy      = 0.1
	healthWeight = 8
	// shareGrowth and shareFloor: the release share grows by an eighth of
	// the configured share with each success and is never halved below an
	// eighth of it, so that a recovered host is drained in seconds while
	// failures slow the drain at once (peak after the default storm's
	// outage 1.1x of capacity).
	shareGrowth = 1.0 / 8
	shareFloor  = 1.0 / 8
)

// hostSet holds the storm state of every host that has requests retrying
// now. active counts them, so that while no host fails a request pays one
// atomic load and nothing else.
type hostSet struct {
	share  float64 // the configured release share
	active atomic.Int32
	mu     sync.RWMutex
	m      map[string]*host
}

// host is one host's state: the requests to it that are retrying, oldest
// first, and what it has told them. Every method takes the time as a
// value, so tests drive it without a clock. It exists only while a request
// to the host is retrying, so a finished request's history never reaches a
// later one.
type host struct {
	mu          sync.Mutex
	name        string
	first, last *member // the retrying requests, oldest first
	count       int
	lastOK      time.Time     // the latest answer (an outcome not retryable)
	health      float64       // moving average of outcomes: 1 an answer, 0 a failure
	lastFresh   time.Time     // the latest first attempt
	gap         time.Duration // moving average of the time between first attempts
	gaps        int           // samples in gap
	share       float64       // releases earned per success
	credit      float64       // releases earned and not yet used
	cut         bool          // a failure may halve share: a retry was released since the last cut
	notBefore   time.Time     // Retry-After: no held retry goes earlier
}

// member is one retrying request of a host.
type member struct {
	h          *host
	prev, next *member
	failedAt   time.Time     // its latest failure
	step       time.Duration // its own backoff step after that failure, without jitter
	toldWait   bool          // that failure came with a Retry-After
	waiting    bool          // held, in line
	released   bool          // let go by the host's successes
	wake       chan struct{} // nudged (never closed) when it should look again
	spent      int           // retries charged to the budget
}

func newMember() *member { return &member{wake: make(chan struct{}, 1)} }

// nudge wakes m without blocking; one pending nudge is enough.
func (m *member) nudge() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

func newHostSet(share float64) *hostSet {
	return &hostSet{share: share, m: map[string]*host{}}
}

// failed records at now a retryable failure of m's request to the named
// host; m joins the host's retrying requests on its first one. step is the
// request's own backoff step for its next retry, without jitter; notBefore
// is the date of the response's Retry-After, zero without one.
func (s *hostSet) failed(name string, m *member, first bool, step time.Duration, now, notBefore time.Time) {
	h := m.h
	if h == nil {
		h = s.join(name, m)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	m.failedAt, m.step, m.toldWait = now, step, !notBefore.IsZero()
	h.health -= h.health / healthWeight
	if first {
		h.noteFresh(now)
	}
	if h.cut {
		// At most once per release, as TCP halves its window at most once
		// per round trip: failures that have nothing to do with the
		// releases, such as random ones, do not starve the line.
		h.share, h.cut = max(h.share/2, shareFloor*s.share), false
		h.credit = min(h.credit, h.share)
	}
	h.notBefore = laterOf(h.notBefore, notBefore)
}

// join adds m to the named host's retrying requests, creating its state.
func (s *hostSet) join(name string, m *member) *host {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.m[name]
	if h == nil {
		h = &host{name: name, share: s.share, cut: true}
		s.m[name] = h
		s.active.Add(1)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	m.h, m.prev = h, h.last
	if h.last != nil {
		h.last.next = m
	} else {
		h.first = m
	}
	h.last = m
	h.count++
	return h
}

// answered records that the named host answered a request (an outcome not
// retryable); m is that request's membership, nil when it never failed. A
// host without state costs one atomic load and no clock reading.
func (s *hostSet) answered(name string, m *member, first bool) {
	var h *host
	if m != nil {
		h = m.h
	}
	if h == nil {
		if s.active.Load() == 0 {
			return
		}
		s.mu.RLock()
		h = s.m[name]
		s.mu.RUnlock()
		if h == nil {
			return
		}
	}
	h.answered(time.Now(), first, s.share)
}

// answered records an answer at now: every success earns the line share
// of a release, and the share grows.
func (h *host) answered(now time.Time, first bool, configured float64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lastOK = now
	h.health += (1 - h.health) / healthWeight
	if first {
		h.noteFresh(now)
	}
	h.share = min(h.share+shareGrowth*configured, configured)
	if !now.Before(h.notBefore) {
		// Before a Retry-After's date the line earns nothing, so that
		// it does not return all at once when the date comes.
		h.credit += h.share
	}
	h.release(now)
}

// noteFresh records a first attempt at now. h.mu is held.
func (h *host) noteFresh(now time.Time) {
	if !h.lastFresh.IsZero() {
		h.gaps = min(h.gaps+1, gapWeight)
		h.gap += (max(now.Sub(h.lastFresh), 0) - h.gap) / time.Duration(h.gaps)
	}
	h.lastFresh = now
}

// flowing reports whether fresh requests keep coming: they probe the host
// for the held retries. h.mu is held.
func (h *host) flowing(now time.Time) bool {
	return h.gaps > 0 && now.Before(h.flowEnd())
}

// flowEnd is when fresh requests will count as stopped. h.mu is held.
func (h *host) flowEnd() time.Time { return h.lastFresh.Add(flowGaps * h.gap) }

// release lets the oldest held retries go, one per unit of credit. Credit
// is not saved up while nobody waits. h.mu is held.
func (h *host) release(now time.Time) {
	if now.Before(h.notBefore) {
		return
	}
	for m := h.first; m != nil && h.credit >= 1; m = m.next {
		if m.waiting {
			h.credit--
			m.waiting, m.released, h.cut = false, true, true
			m.nudge()
		}
	}
	h.credit = min(h.credit, 1)
}

// ask decides at now, once the retry of m's request has waited its own
// backoff, whether it goes. It goes when its request is alone on the host,
// when the host has answered since its own failure, when it is the oldest
// and fresh requests have stopped (it probes, as a lone request would), or
// on earned credit; otherwise it is held (see poll). kept reports that its
// last outcome could be returned if the hold runs out: a retry that could
// not return it is never held.
func (h *host) ask(m *member, now time.Time, kept bool) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.count == 1 || !kept:
		return true // alone: its own backoff, exactly
	case h.health >= healthy && !m.toldWait:
		return true // the host answers: its failures are noise, not an outage
	case now.Before(h.notBefore):
	case m == h.first && !h.flowing(now):
		return true // the probe: nothing else tells whether the host is back
	case h.credit >= 1:
		h.credit--
		return true
	}
	m.waiting = true
	return false
}

// poll looks at the host for the held m at now: send reports that it may
// go; otherwise it looks again when nudged or at wake (zero: only when
// nudged). answered reports that the host has answered since m's failure.
func (h *host) poll(m *member, now time.Time) (send bool, wake time.Time, answered bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.release(now)
	answered = !h.lastOK.Before(m.failedAt)
	if m.released {
		m.released = false
		return true, time.Time{}, answered
	}
	if m != h.first {
		return false, time.Time{}, answered
	}
	if now.Before(h.notBefore) {
		return false, h.notBefore, answered
	}
	if h.flowing(now) {
		return false, h.flowEnd(), answered
	}
	m.waiting = false
	return true, time.Time{}, answered
}

// abandon takes the held m out of line: its wait ran out or was cancelled.
// A release it did not use goes back to the line.
func (h *host) abandon(m *member, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if m.released {
		h.credit++
	}
	m.waiting, m.released = false, false
	h.release(now)
}

// leave ends m's membership: its request is over. The next oldest, when
// held, is nudged, since it may now be the probe; a host with no request
// retrying is forgotten.
func (s *hostSet) leave(m *member) {
	h := m.h
	if h == nil {
		return
	}
	h.mu.Lock()
	if m.prev != nil {
		m.prev.next = m.next
	} else {
		h.first = m.next
		if h.first != nil {
			h.first.nudge()
		}
	}
	if m.next != nil {
		m.next.prev = m.prev
	} else {
		h.last = m.prev
	}
	h.count--
	empty := h.count == 0
	h.mu.Unlock()
	if !empty {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.count == 0 && s.m[h.name] == h {
		delete(s.m, h.name)
		s.active.Add(-1)
	}
}

// counts returns how many hosts have state, and how many requests are
// retrying and held across them.
func (s *hostSet) counts() (hosts, retrying, held int) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, h := range s.m {
		h.mu.Lock()
		retrying += h.count
		for m := h.first; m != nil; m = m.next {
			if m.waiting {
				held++
			}
		}
		h.mu.Unlock()
	}
	return len(s.m), retrying, held
}

// laterOf returns the later of a and b.
func laterOf(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
