package httpretry

import (
	"context"
	"sync/atomic"
	"time"
)

// DefaultReleaseShare is the releases of held retries that each success of
// a recovering host earns at most: a quarter, so that a fleet whose
// clients each hold a share of a long outage's requests returns them
// within its spare capacity (peak after the default storm's outage 1.1x of
// capacity; 0.5 gave 1.3x).
const DefaultReleaseShare = 0.25

// StormControl bounds what the retries of many requests do to a server.
// Its zero value is on, with the default numbers; NoBudget and NoHostGate
// turn its parts off.
//
// The host gate: a retry is held beyond its own backoff only on evidence,
// when other requests to its host are failing with it and the host has not
// answered since its own attempt failed; a request alone on its host waits
// exactly its own backoff. Held retries wait in line, oldest request
// first. While fresh requests keep coming they probe the host for the
// line, and each success of the host, a released retry's included, earns
// the line ReleaseShare of a release (halved by each failure, then grown
// back by each success, as TCP's window is); when fresh requests stop
// (none for four of their usual gaps), the oldest goes on its own backoff,
// as a lone request would, and the next follows once it has an answer. A
// Retry-After holds the line until its date. A held retry never waits past
// its request's deadline or MaxElapsed, nor, while the host keeps failing,
// past the end of its own backoff (the rest of its retries at their mean
// waits); once the host answers, past its retry horizon (MaxRetries times
// MaxDelay). Then it returns its last outcome with StopHostGate. A retry
// whose last response has a body of more than 4 KiB, which could not be
// returned then, is never held. State is kept only for hosts with
// requests retrying: a request to any other host pays one atomic load.
//
// The budget (see Budget) bounds the retries that end in failure, across
// hosts.
type StormControl struct {
	// NoBudget turns the retry budget off.
	NoBudget bool
	// NoHostGate turns the host gate off: every retry waits its own
	// backoff and no longer.
	NoHostGate bool
	// Budget is a budget to share with other Transports; nil means one of
	// this Transport's own with the default numbers.
	Budget *Budget
	// ReleaseShare is the most releases of held retries that one success
	// of the host earns. Zero, negative or NaN means DefaultReleaseShare.
	// Raise it for servers known to have spare capacity.
	ReleaseShare float64
}

// StormState is a snapshot of a Transport's storm control, for metrics.
type StormState struct {
	// BudgetTokens is the retries the budget allows now; zero when off.
	BudgetTokens float64
	// Hosts is the number of hosts with requests retrying.
	Hosts int
	// Retrying is the number of requests retrying across them.
	Retrying int
	// Held is how many of those are held by the host gate.
	Held int
}

// StormState returns a snapshot of the Transport's storm control. It is
// safe to call concurrently with requests.
func (t *Transport) StormState() StormState {
	st := t.storm()
	var out StormState
	if st.budget != nil {
		out.BudgetTokens = st.budget.available(time.Now())
	}
	if st.hosts != nil {
		out.Hosts, out.Retrying, out.Held = st.hosts.counts()
	}
	return out
}

// stormState is a Transport's storm control, built on first use so that
// the zero Transport works, and reached through one atomic load.
type stormState struct {
	budget   *Budget  // nil when off
	hosts    *hostSet // nil when off
	retrying atomic.Int64
}

// storm returns the Transport's storm control, building it once.
func (t *Transport) storm() *stormState {
	if st, ok := t.stormState.Load().(*stormState); ok {
		return st
	}
	st := &stormState{}
	if c := t.Storm; !c.NoBudget {
		st.budget = c.Budget
		if st.budget == nil {
			st.budget = &Budget{}
		}
	}
	if c := t.Storm; !c.NoHostGate {
		share := c.ReleaseShare
		if !(share > 0) {
			share = DefaultReleaseShare
		}
		st.hosts = newHostSet(share)
	}
	if t.stormState.CompareAndSwap(nil, st) {
		return st
	}
	return t.stormState.Load().(*stormState)
}

// countRequest records a request sent.
func (st *stormState) countRequest() {
	if st.budget != nil {
		st.budget.countRequest()
	}
}

// answered records that host answered a request (the outcome is final);
// m is the request's membership, nil when it never failed.
func (st *stormState) answered(host string, m *member, first bool) {
	if st.hosts != nil {
		st.hosts.answered(host, m, first)
	}
}

// failed records a retryable failure at now (see hostSet.failed) and
// returns the request's membership, created on its first failure.
func (st *stormState) failed(host string, m *member, first bool, step time.Duration, now, notBefore time.Time) *member {
	if m == nil {
		m = newMember()
		st.retrying.Add(1)
	}
	if st.hosts != nil {
		st.hosts.failed(host, m, first, step, now, notBefore)
	}
	return m
}

// allows reports whether the budget lets m's request retry at now. A
// request that is the only one retrying cannot make a storm.
func (st *stormState) allows(now time.Time) bool {
	return st.budget == nil || st.retrying.Load() <= 1 || st.budget.allows(now)
}

// end records that m's request is over; answered reports that it ended in
// an answer, which refunds its retries to the budget.
func (st *stormState) end(m *member, answered bool) {
	if m == nil {
		return
	}
	st.retrying.Add(-1)
	if st.hosts != nil {
		st.hosts.leave(m)
	}
	if st.budget != nil && answered && m.spent > 0 {
		st.budget.refund(m.spent, time.Now())
	}
}

// holdLimits bound a held retry (see StormControl).
type holdLimits struct {
	hard    time.Time // the deadline or MaxElapsed; zero when neither
	span    time.Time // while the host fails: the end of the request's own backoff
	horizon time.Time // once the host answers
}

// end is when a hold ends, given whether the host has answered.
func (l holdLimits) end(answered bool) time.Time {
	e := l.span
	if answered {
		e = l.horizon
	}
	if !l.hard.IsZero() && l.hard.Before(e) {
		e = l.hard
	}
	return e
}

// hold is called once the retry of m's request has waited its own backoff.
// It returns StopNone when the retry may be sent now, after a hold when
// held; StopHostGate when the hold reached its limit (see holdLimits), and
// StopCanceled when ctx was cancelled. kept reports that the last outcome
// could be returned after a hold. A held retry costs a timer, not a
// goroutine; it is woken by its timer or by a nudge.
func (st *stormState) hold(ctx context.Context, m *member, kept bool, lim holdLimits) (held bool, stop StopReason) {
	// A retry whose own backoff has no time left, such as a request's
	// last, or any of a Policy without delays, could not be held at all.
	if now := time.Now(); st.hosts == nil || !now.Before(lim.end(false)) || m.h.ask(m, now, kept) {
		return false, StopNone
	}
	timer := time.NewTimer(maxDuration)
	defer timer.Stop()
	for {
		now := time.Now()
		send, wake, answered := m.h.poll(m, now)
		if send {
			return true, StopNone
		}
		end := lim.end(answered)
		if !now.Before(end) {
			m.h.abandon(m, now)
			return true, StopHostGate
		}
		if wake.IsZero() || wake.After(end) {
			wake = end
		}
		timer.Reset(wake.Sub(now))
		select {
		case <-ctx.Done():
			m.h.abandon(m, time.Now())
			if ctx.Err() == context.DeadlineExceeded {
				return true, StopHostGate // the deadline is a hold's limit, not a failure
			}
			return true, StopCanceled
		case <-m.wake:
		case <-timer.C:
		}
	}
}

// sent charges the budget for a retry of m's request sent at now.
func (st *stormState) sent(m *member, now time.Time) {
	if st.budget != nil {
		st.budget.spend(now)
		m.spent++
	}
}
