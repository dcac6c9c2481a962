package httpretry

import (
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of a Budget whose fields are left at zero.
const (
	// DefaultBudgetRatio allows retries of up to half the requests of the
	// window: a Transport's storm then adds at most half to its load (the
	// storm simulator's bound for load during an outage). Finagle's 20%
	// would be tighter, but it refuses retries that the host gate holds
	// and releases at the host's pace, and so loses requests it could
	// rescue: the budget is the backstop, the gate the pacing.
	DefaultBudgetRatio = 0.5
	// DefaultBudgetReserve is the number of retries per second allowed on
	// top of the ratio, so that a Transport sending few requests still
	// retries them (Finagle's minimum of 10 per second). Summed over a
	// fleet of clients, each with its own Transport, a reserve never
	// binds: 200 clients may add 2000 retries a second. Bounding a fleet
	// is the host gate's work (see HostGate), or that of one Budget shared
	// by the Transports of a process.
	DefaultBudgetReserve = 10
	// DefaultBudgetWindow is how far back requests and retries are counted.
	DefaultBudgetWindow = 10 * time.Second
)

// budgetSlots is the number of slots the window is counted in: the window
// slides by a tenth of its length.
const budgetSlots = 10

// Budget bounds the retries of all the requests that share it: within any
// Window, retries may number at most Ratio times the requests sent, plus
// Reserve per second of the window. The zero value is ready and uses the defaults. A Transport
// with a nil Budget has one of its own; set the same *Budget on several
// Transports to bound them together.
//
// A budget never delays or refuses a first attempt; it is charged for each
// retry when that retry is cleared to be sent, so retries held by a host
// gate cost nothing while they wait. A Budget must not be copied after first
// use, and its fields must not change once it is in use. It is safe for
// concurrent use.
//
// Counting a request is one atomic add, which is all a request that
// succeeds at once pays; the window is only moved, under a mutex, by
// retries.
type Budget struct {
	// Ratio is the number of retries allowed per request sent in the
	// window. Zero means DefaultBudgetRatio; negative means none beyond
	// the reserve.
	Ratio float64
	// Reserve is the number of retries per second allowed regardless of
	// traffic. Zero means DefaultBudgetReserve; negative means none.
	Reserve float64
	// Window is the span over which requests and retries are counted.
	// Zero or negative means DefaultBudgetWindow.
	Window time.Duration

	requests atomic.Int64 // first attempts ever counted

	mu sync.Mutex
	w  budgetWindow
}

// budgetWindow is the sliding count, in budgetSlots slots of Window/10.
// base[i] is the request counter at the start of slot i (mod budgetSlots),
// retries[i] the retries charged in it. The request counter is only read
// when the window moves, so a slot's base is interpolated between two
// readings: exact enough for a budget, and free for the success path.
type budgetWindow struct {
	started   bool
	epoch     time.Time // slot 0 begins here
	slot      int64     // current slot number
	lastAt    time.Duration
	lastCount int64
	base      [budgetSlots]int64
	retries   [budgetSlots]int64
}

// BudgetState is a snapshot of a Budget, for metrics.
type BudgetState struct {
	// Requests is the number of requests counted in the window.
	Requests int64
	// Retries is the number of retries charged in the window.
	Retries int64
	// Available is the number of retries the budget would allow now.
	Available int64
}

// countRequest records a first attempt. It is the only cost a successful
// request pays to the budget.
func (b *Budget) countRequest() { b.requests.Add(1) }

// withdraw charges one retry at time now, or reports false when the window
// has none left.
func (b *Budget) withdraw(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	reqs, retries := b.advance(now)
	if float64(retries+1) > b.allowance(reqs) {
		return false
	}
	b.w.retries[b.w.slot%budgetSlots]++
	return true
}

// State returns the budget's counts in the window ending at now.
func (b *Budget) State(now time.Time) BudgetState {
	b.mu.Lock()
	defer b.mu.Unlock()
	reqs, retries := b.advance(now)
	avail := int64(b.allowance(reqs)) - retries
	return BudgetState{Requests: reqs, Retries: retries, Available: max(avail, 0)}
}

// allowance is the number of retries a window with reqs requests allows.
func (b *Budget) allowance(reqs int64) float64 {
	ratio, reserve := b.Ratio, b.Reserve
	if ratio == 0 {
		ratio = DefaultBudgetRatio
	}
	if reserve == 0 {
		reserve = DefaultBudgetReserve
	}
	return max(ratio, 0)*float64(reqs) + max(reserve, 0)*b.window().Seconds()
}

// window resolves Window.
func (b *Budget) window() time.Duration {
	if b.Window <= 0 {
		return DefaultBudgetWindow
	}
	return b.Window
}

// slotLen is the length of one slot of the window.
func (b *Budget) slotLen() time.Duration {
	return max(b.window()/budgetSlots, 1)
}

// advance moves the window to now and returns the requests and retries in
// it. A time before the latest one seen counts as the latest, so callers
// racing with slightly older clocks do not move the window back. b.mu is
// held.
func (b *Budget) advance(now time.Time) (reqs, retries int64) {
	w := &b.w
	count := b.requests.Load()
	if !w.started {
		// Requests counted before the first retry are taken as recent:
		// all of them are in the window.
		w.started, w.epoch = true, now
	}
	at := max(now.Sub(w.epoch), w.lastAt)
	slotLen := b.slotLen()
	slot := int64(at / slotLen)
	if gap := slot - w.slot; gap > 0 {
		first := max(w.slot+1, slot-budgetSlots+1)
		for s := first; s <= slot; s++ {
			w.base[s%budgetSlots] = interpolate(w.lastAt, w.lastCount, at, count, time.Duration(s)*slotLen)
			w.retries[s%budgetSlots] = 0
		}
		w.slot = slot
	}
	w.lastAt, w.lastCount = at, count
	oldest := w.slot - budgetSlots + 1
	var base int64
	if oldest > 0 {
		base = w.base[oldest%budgetSlots]
	}
	for _, r := range w.retries {
		retries += r
	}
	return count - base, retries
}

// interpolate returns the request count at time x, on the line through
// (t0, c0) and (t1, c1), for t0 ≤ x ≤ t1.
func interpolate(t0 time.Duration, c0 int64, t1 time.Duration, c1 int64, x time.Duration) int64 {
	if t1 <= t0 || x >= t1 {
		return c1
	}
	if x <= t0 {
		return c0
	}
	return c0 + int64(float64(c1-c0)*float64(x-t0)/float64(t1-t0))
}
