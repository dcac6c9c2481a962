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
	// Down: 503, the server is in its outage or collapsed.
	Down
	// Flaky: 503 at random (Random mode), whatever the load.
	Flaky
)

// Window is what happened in one counting window of a run: the server's
// attempts by verdict and the clients' logical requests.
type Window struct {
	// Start is the window's start, from the start of the run.
	Start time.Duration
	// Attempts is every request the server received; Served, ShedCount,
	// DownCount and FlakyCount split it by verdict.
	Attempts, Served, ShedCount, DownCount, FlakyCount int
	// Arrivals is the logical requests that arrived in the window;
	// Succeeded and Failed the ones that finished in it, by outcome.
	Arrivals, Succeeded, Failed int
}

// Request is one finished logical request.
type Request struct {
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
	attempts, served, shed, down, flaky atomic.Int64
	arrivals, succeeded, failed         atomic.Int64
}

// recorder is a run's shared state: the server's decisions and every count,
// with time passed in as the offset from the start of the run, so that it
// can be driven by a test without a clock.
type recorder struct {
	sc      Scenario
	windows []counts // fixed length: the run's whole span, the last one catching later times

	mu        sync.Mutex // guards the bucket, the collapse state and rng
	bucket    *Bucket
	rng       *rand.Rand    // Random mode's failures
	downUntil time.Duration // Collapse: down until then
	lastDown  time.Duration // the last time a Down verdict was given
	anyDown   bool

	reqMu    sync.Mutex
	requests []Request
	maxLag   atomic.Int64 // the latest a logical request started after its arrival time
}

// newRecorder returns the state of a run of sc.
func newRecorder(sc Scenario) *recorder {
	span := sc.Duration + sc.RequestTimeout + 2*time.Second
	return &recorder{
		sc:      sc,
		windows: make([]counts, int(span/sc.Window)+1),
		bucket:  NewBucket(sc.Capacity, sc.burst()),
		rng:     rand.New(rand.NewPCG(sc.Seed, 0x5eed)),
	}
}

// window returns the counters of time t.
func (r *recorder) window(t time.Duration) *counts {
	i := min(max(int(t/r.sc.Window), 0), len(r.windows)-1)
	return &r.windows[i]
}

// Admit decides the answer to an attempt that arrives at now, and counts it.
func (r *recorder) Admit(now time.Duration) Verdict {
	w := r.window(now)
	w.attempts.Add(1)
	r.mu.Lock()
	v := r.verdict(now)
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
	}
	return v
}

// verdict is Admit's decision. The caller holds mu.
func (r *recorder) verdict(now time.Duration) Verdict {
	if now >= r.sc.OutageStart && now < r.sc.OutageEnd {
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
	if !r.bucket.Take(now) {
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

// Done records a logical request that started at start and finished at end.
func (r *recorder) Done(start, end time.Duration, ok bool) {
	w := r.window(end)
	if ok {
		w.succeeded.Add(1)
	} else {
		w.failed.Add(1)
	}
	r.reqMu.Lock()
	r.requests = append(r.requests, Request{Start: start, Latency: end - start, OK: ok})
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
			Arrivals: int(c.arrivals.Load()), Succeeded: int(c.succeeded.Load()), Failed: int(c.failed.Load()),
		}
	}
	return out
}
