package httpretry

import (
	"cmp"
	"sync/atomic"
	"time"
	"unsafe"
)

// DefaultReleaseShare is what each answer of a recovering host earns its
// held retries: a quarter of a release. A tenth lowered the virtual
// fleets' peaks after an outage by up to 0.4x of capacity, but held calls
// in steady streams then ended later, by 35 ms in the median row the
// scenario hunt moved (docs/storm-control.md, Tuning, has the sweep).
const DefaultReleaseShare = 0.25

// StormControl keeps the retries of many requests from making an outage
// worse, and stays out of the way of a request that is alone on its host.
// Its zero value is on: the host gate. NoHostGate turns the gate off and
// puts a retry budget in its place; NoBudget turns that budget off.
//
// The model, per host: a retry waits its own backoff, as without storm
// control, and then goes, unless another of the Transport's requests to
// the host is retrying too and the host is down (none of its last 16
// attempts answered, more for a host failing most attempts at random),
// or is back from an outage and turning its backlog away, or told this
// request by Retry-After to wait the outage out; then the request is
// held. A held request keeps its own backoff's steps: at
// each it goes if the host may be back (its latest outcome is an answer)
// or the step is its last, and otherwise skips the step, counted as a
// failed attempt and sending nothing. Between steps it waits in the
// host's line, which the host's answers empty, oldest first, at a pace
// that grows with answers and halves on failures, as TCP's window does;
// while no new requests reach the host, the line tests it now and then
// with its oldest held retry.
//
// So a held request that fails ends no later, and after no more attempts,
// than with plain backoff; one that succeeds may take a step more, the
// time it takes to learn that the host is back; none goes before a
// Retry-After it was told ends; and a hold that the deadline reaches
// returns the last outcome (see Error for a body that could not be kept)
// with StopHostGate. The README lists, in user terms, the measured
// exceptions: a host back from an outage to a backlog, whose held
// retries wait their turn in line, even at their last step, never past
// plain backoff's longest life; attempts slower than plain backoff's
// would have been; failures of which only some carry a Retry-After; a
// host that flaps faster than the backoff; a rate limit that names its
// window's end; a host failing most attempts at random; a server that
// queues what it cannot serve, whose queue plain backoff's own retries
// lengthen; a few calls at random moments of an outage, whose held steps
// wait for fresh requests to count as stopped.
// docs/storm-control.md states each rule exactly (when a host is down,
// when it turns its backlog away and for how long, when a Retry-After
// holds, when the host may be back, the line's pace and probes, what a
// skipped step stands for) and measures each rule and exception.
//
// With the host gate off, a budget bounds retries across hosts instead
// (see Budget). Only hosts with requests retrying have state: while none
// has, a request pays a few atomic loads for storm control and no lock;
// while some have, a request to another host pays a clock read and a
// look-up without a lock. A host is the request's URL.Host as it is
// written: "h" and "h:80" are two hosts, http://h and https://h one.
type StormControl struct {
	// NoBudget turns the retry budget off; it acts only with NoHostGate.
	NoBudget bool
	// NoHostGate turns the host gate off: every retry waits its own
	// backoff and no longer. The budget, unless NoBudget is set too, is
	// then asked about every retry but that of the only request of the
	// Transport retrying, so a request alone on its host may be refused
	// while another request of the Transport retries on another host,
	// once that host's retries, or other Transports sharing the Budget,
	// have spent it (a dead host's retries then spend what a flaky host's
	// need); and it is spent at once by a burst failing together
	// (bench/RESULTS.md: 0.5-1.0% of a blip's burst rescued).
	NoHostGate bool
	// Budget is a budget to share with other Transports, used only with
	// NoHostGate; nil means one of this Transport's own with the default
	// numbers.
	Budget *Budget
	// ReleaseShare is the releases of held retries one answer of the host
	// earns at most, halved by failures; while no fresh requests reach
	// the host, or when the retry was told a Retry-After that the host has
	// shown to name a wait, an answer to a retry the line let go earns
	// two more besides (a slow start), until the host, back from down,
	// fails an attempt sent since. Zero, negative or NaN means DefaultReleaseShare.
	// Raise it for servers known to have spare capacity.
	ReleaseShare float64
}

// StormState is a snapshot of a Transport's storm control, for metrics.
type StormState struct {
	// BudgetTokens is the tokens the budget holds now, zero when it is
	// off (as with the host gate on), never below: below 1 it refuses the
	// retries it is asked about (see Budget).
	BudgetTokens float64
	Hosts        int // hosts with requests retrying, zero when the host gate is off
	Retrying     int // requests retrying
	Held         int // of those, held by the host gate
}

// StormState returns a snapshot of the Transport's storm control. It is
// safe to call concurrently with requests.
func (t *Transport) StormState() StormState {
	st := t.ownStorm()
	out := StormState{Retrying: int(st.retrying.Load()), Held: int(st.held.Load())}
	if st.budget != nil {
		out.BudgetTokens = st.budget.available(time.Now())
	}
	if st.hosts != nil {
		out.Hosts = int(st.hosts.active.Load())
	}
	return out
}

// stormState is a Transport's storm control, built on first use so that
// the zero Transport works, and reached through one atomic load.
type stormState struct {
	owner          *Transport // the Transport it was built for: a copy of it builds its own
	budget         *Budget    // nil when off
	hosts          *hostSet   // nil when off
	retrying, held atomic.Int64
	// announced is how long OnRetry took for the latest retry, in ns: a
	// held request's skipped step stands for a retry announced as long, as
	// plain backoff's retry there would have been.
	announced atomic.Int64
}

// storm returns the Transport's storm control, building it once. A copy
// of a Transport in use gets the original's here: its own comes at its
// first failure (see ownStorm), so that the success path pays one load;
// until then its requests, sent and answered, are not counted in the
// original's (a copy whose Base reached a healthy server made the
// original's gate take a host down for one answering), only in the Budget
// its Storm names, if any, with the gate off.
func (t *Transport) storm() *stormState {
	if p := atomic.LoadPointer(&t.stormPtr); p != nil {
		return (*stormState)(p)
	}
	return t.ownStorm()
}

// ownStorm is storm for a request that failed, and for StormState: a copy
// of a Transport in use builds its own here, from its own Storm (the
// owner check cost the success path 1 ns of 27 in storm()). It builds the
// storm control of a Transport's first request in place of the state it
// loaded: none, or that of the Transport it was copied from after that
// one's first use, so that the copy's Storm applies to it. Two first
// requests racing here may both build one, and only the first stored is
// ever used.
func (t *Transport) ownStorm() *stormState {
	p := atomic.LoadPointer(&t.stormPtr)
	if p != nil && (*stormState)(p).owner == t {
		return (*stormState)(p)
	}
	c, st, share := t.Storm, &stormState{owner: t}, t.Storm.ReleaseShare
	if !(share > 0) {
		share = DefaultReleaseShare
	}
	if c.budgeted() {
		st.budget = cmp.Or(c.Budget, &Budget{})
	}
	if !c.NoHostGate {
		st.hosts = newHostSet(share)
	}
	atomic.CompareAndSwapPointer(&t.stormPtr, p, unsafe.Pointer(st)) // fails when a racing first request stored one first
	return (*stormState)(atomic.LoadPointer(&t.stormPtr))
}

// budgeted reports whether c's retries count against a budget: only with
// the host gate off, as with it on no fleet figure moved with the budget
// or without it (docs/storm-control.md, rule 7).
func (c StormControl) budgeted() bool { return c.NoHostGate && !c.NoBudget }

// failure is an attempt's retryable failure: whether it was its
// request's first attempt, when it failed and when it went (zero when not
// known), and the wait its Retry-After asked for (zero when none),
// whether that names a date, and whether it is over MaxRetryAfter (not
// heeded); and the request's path.
type failure struct {
	first          bool
	at, sent       time.Time
	floor          time.Duration
	dated, overCap bool
	path           string // the request's URL path
}

// failed records a retryable failure (see hostSet.failed) and returns the
// request's membership, created on its first failure.
func (st *stormState) failed(host string, m *member, f failure) *member {
	if m == nil {
		m = newMember()
		m.firstFailed = f.at
		st.retrying.Add(1)
	}
	if st.hosts != nil {
		st.hosts.failed(host, m, f)
	}
	return m
}

// drained notes d, how long the response of m's latest attempt took to
// drain: plain backoff's next wait starts after it.
func (st *stormState) drained(m *member, d time.Duration) {
	if m.h == nil { // the gate is off
		return
	}
	m.h.mu.Lock()
	defer m.h.mu.Unlock()
	m.drains.note(d)
	m.h.drain.note(m, d)
}

// takes reports whether the budget, if any, lets m's retry go, asked at
// now, and takes its token then, so that retries asked about at once
// cannot all count on the same token; one never sent gives it back (see
// end). The only request of its Transport retrying is not asked.
func (st *stormState) takes(m *member, now time.Time) bool {
	if st.budget == nil || st.retrying.Load() <= 1 {
		return true
	}
	m.paid = st.budget.take(now)
	return m.paid
}

// sent charges the budget for a retry of m's request sent at now: the
// token taken when the budget was asked, or, when it was not (the only
// request retrying), one it holds, if any.
func (st *stormState) sent(m *member, now time.Time) {
	if st.budget != nil && (m.paid || st.budget.take(now)) {
		m.paid, m.spent = false, m.spent+1
	}
}

// end records that m's request is over; answered, that it ended in the
// host's answer, which refunds its retries to the budget.
func (st *stormState) end(m *member, answered bool) {
	if m == nil {
		return
	}
	st.retrying.Add(-1)
	if st.hosts != nil {
		st.hosts.leave(m)
	}
	refund := 0 // spent or paid only with a budget (see sent)
	if answered {
		refund = m.spent
	}
	if m.paid { // its token was taken, its retry never sent
		refund++
	}
	if refund > 0 {
		st.budget.add(float64(refund), time.Now())
	}
}
