package storm

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// Verdict is the server's answer to one attempt.
type Verdict int

// The verdicts.
const (
	// Served: 200, within capacity.
	Served Verdict = iota
	// Shed: 503, over capacity (the token bucket was empty).
	Shed
	// Down: 503, the server is in its outage, in a down interval of its
	// flapping, or collapsed.
	Down
	// Flaky: 503 at random (Random and RandomClosed), whatever the load.
	Flaky
	// Throttled: 429 with a Retry-After (RetryAfterLong's first attempt of
	// each call; RetryAfterHerd's excess over the capacity with
	// ThrottleShed).
	Throttled
)

// Window is what happened in one counting window of a run: the server's
// attempts by verdict and the clients' logical requests.
type Window struct {
	// Start is the window's start, from the start of the run.
	Start time.Duration
	// Attempts is every request the server received; Served, ShedCount,
	// DownCount, FlakyCount and ThrottledCount split it by verdict.
	Attempts, Served, ShedCount, DownCount, FlakyCount, ThrottledCount int
	// Arrivals is the logical requests that arrived in the window;
	// Succeeded and Failed the ones that finished in it, by outcome.
	Arrivals, Succeeded, Failed int
	// ToldCount is the answers that carried a Retry-After; EarlyCount the
	// attempts that arrived before the date their logical request was
	// last told (retryafter.go).
	ToldCount, EarlyCount int
}

// Request is one finished logical request.
type Request struct {
	// ID is the logical request's number in the run, from 1.
	ID uint64
	// Attempts is the attempts the server received for it, in the modes
	// that track requests (Scenario.tracksRequests); 0 in the others.
	Attempts int
	// Start is when it was sent, from the start of the run.
	Start time.Duration
	// Latency is from being sent until its final answer or error.
	Latency time.Duration
	// OK reports a final 200.
	OK bool
}

// counts are one window's counters, updated without a lock: thousands of
// goroutines count at once, and a lock convoy on a busy machine would stall
// the very traffic being measured.
type counts struct {
	attempts, served, shed, down, flaky, throttled atomic.Int64
	arrivals, succeeded, failed                    atomic.Int64
	told, early                                    atomic.Int64
}

// recorder is a run's shared state: the server's decisions and every count,
// with time passed in as the offset from the start of the run, so that it
// can be driven by a test without a clock.
type recorder struct {
	sc      Scenario
	windows []counts // fixed length: the run's whole span, the last one catching later times

	mu        sync.Mutex       // guards the bucket, the collapse state, rng and calls
	bucket    *Bucket          // nil: no capacity limit
	rng       *rand.Rand       // Random mode's failures
	calls     map[uint64]*call // per logical request, when sc.tracksRequests
	downUntil time.Duration    // Collapse: down until then
	lastDown  time.Duration    // the last time a Down verdict was given
	anyDown   bool

	reqMu    sync.Mutex
	requests []Request
	maxLag   atomic.Int64 // the latest a logical request started after its arrival time
}

// newRecorder returns the state of a run of sc.
func newRecorder(sc Scenario) *recorder {
	span := sc.span() + 2*time.Second
	r := &recorder{
		sc:      sc,
		windows: make([]counts, int(span/sc.Window)+1),
		rng:     rand.New(rand.NewPCG(sc.Seed, 0x5eed)),
	}
	if sc.Capacity > 0 {
		r.bucket = NewBucket(sc.Capacity, sc.burst())
	}
	if sc.tracksRequests() {
		r.calls = map[uint64]*call{}
	}
	return r
}

// window returns the counters of time t.
func (r *recorder) window(t time.Duration) *counts {
	i := min(max(int(t/r.sc.Window), 0), len(r.windows)-1)
	return &r.windows[i]
}

// Admit decides the answer to an attempt that arrives at now, and counts
// it, for an attempt the server cannot tell apart from others.
func (r *recorder) Admit(now time.Duration) Verdict {
	return r.Reply(now, 0).Verdict
}

// Reply decides the answer to an attempt of logical request id (0 for
// unknown) that arrives at now, and counts it.
func (r *recorder) Reply(now time.Duration, id uint64) Reply {
	w := r.window(now)
	w.attempts.Add(1)
	r.mu.Lock()
	c := r.call(id)
	early := c.early(now)
	v := r.verdict(now, c)
	wait := r.sc.retryAfter(now, v)
	c.answered(now, wait)
	if v == Down {
		r.lastDown, r.anyDown = max(r.lastDown, now), true
	}
	r.mu.Unlock()
	switch v {
	case Served:
		w.served.Add(1)
	case Shed:
		w.shed.Add(1)
	case Down:
		w.down.Add(1)
	case Flaky:
		w.flaky.Add(1)
	case Throttled:
		w.throttled.Add(1)
	}
	if wait > 0 {
		w.told.Add(1)
	}
	if early {
		w.early.Add(1)
	}
	return Reply{Verdict: v, RetryAfter: wait}
}

// call returns the state of logical request id, created on its first
// attempt; nil when requests are not tracked or id is unknown. The
// caller holds mu.
func (r *recorder) call(id uint64) *call {
	if r.calls == nil || id == 0 {
		return nil
	}
	c := r.calls[id]
	if c == nil {
		c = &call{}
		r.calls[id] = c
	}
	return c
}

// verdict is Reply's decision for an attempt of c (nil when untracked).
// The caller holds mu.
func (r *recorder) verdict(now time.Duration, c *call) Verdict {
	switch r.sc.Mode {
	case Sequential:
		return Down
	case RetryAfterLong:
		if c == nil || c.attempts == 0 {
			return Throttled
		}
		return Served
	}
	if now >= r.sc.OutageStart && now < r.sc.OutageEnd || r.sc.flapDown(now) {
		return Down
	}
	if f := r.sc.failRate(); f > 0 && r.rng.Float64() < f {
		return Flaky
	}
	if r.sc.Mode == Collapse {
		if now < r.downUntil {
			return Down
		}
		if r.overloaded(now) {
			r.downUntil = now + r.sc.CollapseFor
			return Down
		}
	}
	if r.bucket != nil && !r.bucket.Take(now) {
		if r.sc.ThrottleShed && r.sc.Mode == RetryAfterHerd {
			return Throttled
		}
		return Shed
	}
	return Served
}

// overloaded reports whether the attempts of the full windows in the last
// CollapseAfter before now exceed CollapseFactor × Capacity on average.
func (r *recorder) overloaded(now time.Duration) bool {
	k := int(r.sc.CollapseAfter / r.sc.Window)
	cur := min(int(now/r.sc.Window), len(r.windows)-1)
	if k < 1 || cur < k {
		return false
	}
	var sum int64
	for i := cur - k; i < cur; i++ {
		sum += r.windows[i].attempts.Load()
	}
	return float64(sum) > r.sc.CollapseFactor*r.sc.Capacity*r.sc.CollapseAfter.Seconds()
}

// Arrive counts a logical request that arrived at t and started at now.
func (r *recorder) Arrive(t, now time.Duration) {
	r.window(t).arrivals.Add(1)
	lag := int64(now - t)
	for {
		old := r.maxLag.Load()
		if lag <= old || r.maxLag.CompareAndSwap(old, lag) {
			return
		}
	}
}

// Done records logical request id, which started at start and finished
// at end.
func (r *recorder) Done(id uint64, start, end time.Duration, ok bool) {
	w := r.window(end)
	if ok {
		w.succeeded.Add(1)
	} else {
		w.failed.Add(1)
	}
	attempts := 0
	if r.calls != nil {
		r.mu.Lock()
		if c := r.calls[id]; c != nil {
			attempts = c.attempts
		}
		r.mu.Unlock()
	}
	r.reqMu.Lock()
	r.requests = append(r.requests, Request{ID: id, Attempts: attempts, Start: start, Latency: end - start, OK: ok})
	r.reqMu.Unlock()
}

// Windows returns the counts of every window up to the last one with any
// traffic. Call it once the run is over.
func (r *recorder) Windows() []Window {
	last := 0
	for i := range r.windows {
		if r.windows[i].attempts.Load() > 0 || r.windows[i].arrivals.Load() > 0 || r.windows[i].succeeded.Load()+r.windows[i].failed.Load() > 0 {
			last = i
		}
	}
	out := make([]Window, last+1)
	for i := range out {
		c := &r.windows[i]
		out[i] = Window{
			Start:    time.Duration(i) * r.sc.Window,
			Attempts: int(c.attempts.Load()), Served: int(c.served.Load()), ShedCount: int(c.shed.Load()), DownCount: int(c.down.Load()), FlakyCount: int(c.flaky.Load()),
			ThrottledCount: int(c.throttled.Load()),
			Arrivals:       int(c.arrivals.Load()), Succeeded: int(c.succeeded.Load()), Failed: int(c.failed.Load()),
			ToldCount: int(c.told.Load()), EarlyCount: int(c.early.Load()),
		}
	}
	return out
}
