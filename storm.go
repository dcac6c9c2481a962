package httpretry

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"
	"unsafe"
)

// stormState is a Transport's storm-control state: its retry budget and its
// host gates. It is built on first use, so that the zero Transport works,
// and reached through one atomic pointer load per request.
type stormState struct {
	budget *Budget  // nil when the budget is off
	gates  *gateSet // nil when the host gate is off
}

// storm returns the Transport's storm-control state, building it once. Two
// first requests racing here may both build one; only the first stored is
// ever used.
func (t *Transport) storm() *stormState {
	if p := atomic.LoadPointer(&t.stormPtr); p != nil {
		return (*stormState)(p)
	}
	s := &stormState{}
	if !t.NoBudget {
		s.budget = t.Budget
		if s.budget == nil {
			s.budget = &Budget{}
		}
	}
	if !t.HostGate.Off {
		base, limit := t.Policy.bounds()
		s.gates = newGateSet(t.HostGate, base/4, limit)
	}
	if atomic.CompareAndSwapPointer(&t.stormPtr, nil, unsafe.Pointer(s)) {
		return s
	}
	return (*stormState)(atomic.LoadPointer(&t.stormPtr))
}

// retryHorizon is the longest a request waits in all, held retries
// included: its MaxRetries waits at the Policy's cap, the longest its own
// backoff could wait.
func retryHorizon(p Policy) time.Duration {
	_, limit := p.bounds()
	n := time.Duration(p.retries())
	if n > 0 && limit > maxDuration/n {
		return maxDuration
	}
	return n * limit
}

// probeSpread is the least wait before retry n probes a failing host,
// given the request's retries in all and the time left before its limit.
// The first half of the retries follow the backoff, so that a blip costs
// little; the rest are spread evenly over what is left of the horizon, so
// that a request alone on its client still outlasts an outage longer than
// its backoff's sum instead of spending its last retries into it.
func probeSpread(retries, n int, left time.Duration) time.Duration {
	remaining := retries - n + 1 // this retry and the later ones
	if remaining <= 0 || remaining > retries/2 {
		return 0
	}
	return left / time.Duration(remaining+1)
}

// heldRetry is a retry that the host gate holds.
type heldRetry struct {
	gate   *hostGate
	w      *gateWaiter // nil: the retry is not held
	sendAt time.Time   // the end of the retry's own backoff
	limit  time.Time   // the deadline, MaxElapsed or the retry horizon
	budget *Budget     // charged on release; nil when off
}

// waitHeld waits until the gate releases h and h's own backoff has ended,
// then charges the budget. It returns StopNone when the retry may be sent,
// StopCanceled when ctx ended the wait, StopHostGate when the limit came
// first and StopBudget when the budget refused the released retry. Between
// looks at the gate it sleeps on one timer; only the oldest held retry of
// a host is woken by the clock, the others by a nudge.
func (t *Transport) waitHeld(ctx context.Context, h heldRetry) StopReason {
	timer := time.NewTimer(maxDuration)
	defer timer.Stop()
	for {
		now := time.Now()
		send, wake := h.gate.poll(now, h.w)
		if send {
			break
		}
		if !now.Before(h.limit) {
			h.gate.leave(now, h.w)
			return StopHostGate
		}
		until := h.limit
		if !wake.IsZero() && wake.Before(until) {
			until = wake
		}
		timer.Reset(until.Sub(now))
		select {
		case <-ctx.Done():
			h.gate.leave(time.Now(), h.w)
			return StopCanceled
		case <-h.w.ch:
		case <-timer.C:
		}
	}
	if d := time.Until(h.sendAt); d > 0 {
		timer.Reset(d)
		select {
		case <-ctx.Done():
			return StopCanceled
		case <-timer.C:
		}
	}
	if h.budget != nil && !h.budget.withdraw(time.Now()) {
		return StopBudget
	}
	return StopNone
}

// heldGiveUp is the error of a held retry that is not sent, reported to
// OnGiveUp too. It serves a last attempt that failed with an error, or
// whose response body was too long to keep while held: that response is
// drained and closed, so it is described in the error instead.
func (t *Transport) heldGiveUp(ctx context.Context, req *http.Request, n int, last error, reason string, stop StopReason) error {
	cause := last
	switch {
	case stop == StopCanceled:
		cause = ctx.Err()
	case cause == nil:
		cause = fmt.Errorf("httpretry: last attempt: %s", reason)
	}
	if stop != StopCanceled {
		t.giveUp(RetryEvent{Request: req, Attempt: n, Err: cause, Reason: reason, Stop: stop})
	}
	return &Error{Attempts: n, Reason: stop, Err: cause}
}

// StormState is a snapshot of a Transport's storm control, for metrics.
type StormState struct {
	// Budget is the retry budget's state; zero when the budget is off.
	Budget BudgetState
	// Gates are the hosts whose gate is open, failing or recovering; a
	// host absent from it is healthy.
	Gates []GateState
}

// StormState returns a snapshot of the Transport's retry budget and host
// gates. It is safe to call concurrently with requests.
func (t *Transport) StormState() StormState {
	st := t.storm()
	var out StormState
	if st.budget != nil {
		out.Budget = st.budget.State(time.Now())
	}
	if st.gates != nil {
		out.Gates = st.gates.states()
	}
	return out
}
