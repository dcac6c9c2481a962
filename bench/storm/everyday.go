package storm

import (
	"fmt"
	"time"

	"github.com/httpretry/httpretry/bench"
)

// The everyday scenarios are what a newcomer to a retry library writes:
// one client (one RoundTripper), used from one goroutine or shared by a
// few, against one host. Each stays within a few seconds per system, so
// that the report can run them all.

// SequentialCalls is Sequential's default number of calls in a row.
const SequentialCalls = 4

// single is the common part of the single-client scenarios: one client, no
// capacity limit, no outage, the library's default retry numbers.
func single(mode Mode) Scenario {
	return Scenario{
		Mode:           mode,
		Clients:        1,
		RequestTimeout: 10 * time.Second,
		Window:         100 * time.Millisecond,
		Params:         bench.DefaultParams,
		Seed:           1,
		LagLimit:       50 * time.Millisecond,
	}
}

// SequentialPreset is one goroutine making SequentialCalls calls in a row
// to a host that always answers 503: how long a caller waits for an answer
// that never comes, and whether a system learns from one call to the next.
// The timeout is far above what any system's five retries take, so that
// it never decides the outcome.
func SequentialPreset() Scenario {
	s := single(Sequential)
	s.Calls = SequentialCalls
	s.RequestTimeout = 30 * time.Second
	s.Params = bench.Params{MaxRetries: 5, BaseDelay: 200 * time.Millisecond, MaxDelay: 2 * time.Second}
	return s
}

// ConcurrentDownPreset is SequentialPreset from four goroutines at once,
// five calls each: whether a system that holds retries back when several
// requests fail together makes each call wait longer for its failure.
func ConcurrentDownPreset() Scenario {
	s := SequentialPreset()
	s.Workers, s.Calls = 4, 5
	return s
}

// BurstPreset is 200 goroutines that share one client and start
// together against a host that is down for its first second and then
// serves everything: how fast a system lets the backlog through once the
// host is back, and how much it sent while it was down.
func BurstPreset() Scenario {
	s := single(Burst)
	s.Workers = 200
	s.OutageStart, s.OutageEnd = 0, time.Second
	s.RequestTimeout = 15 * time.Second
	return s
}

// SlowBurstPreset is BurstPreset against a server that takes 200 ms over
// every answer, as one that does real work does: whether a system's
// backoff, counted from the answer, still lets the backlog through soon
// after the host's return when every failure itself takes a while.
func SlowBurstPreset() Scenario {
	s := BurstPreset()
	s.ServiceTime = 200 * time.Millisecond
	return s
}

// StaggeredPreset is a few goroutines that share one client and each
// make one call, started 200 ms apart, through a 1.5 s outage, with a
// backoff that starts at 200 ms and may grow to 10 s: calls that come
// one by one, as a newcomer's test program makes them, so that a system
// that holds retries back while the host is down must notice the host's
// return from fewer requests than a burst gives it. Eight calls keep the
// run to a few seconds per system.
func StaggeredPreset() Scenario {
	s := BurstPreset()
	s.Workers, s.Stagger = 8, 200*time.Millisecond
	s.OutageEnd = 1500 * time.Millisecond
	s.Params = bench.Params{MaxRetries: 5, BaseDelay: 200 * time.Millisecond, MaxDelay: 10 * time.Second}
	return s
}

// FlapPreset is one client sending open-loop arrivals at 50 requests/s for
// 12 s to a host that is down every other second, the first included,
// without a capacity limit, with the library's default retry numbers: what
// a system rescues from a host that comes and goes, and whether what it
// learns in one down second holds back the retries that would succeed in
// the next up one. A second is longer than the default backoff's first
// steps, so that most retries of a request that arrives while the host is
// down can find it back; 12 s (six down seconds, six up) is long enough to
// show whether a system keeps up with the flapping, and short enough for
// the report to run it for every system.
func FlapPreset() Scenario {
	s := single(Flapping)
	s.Rate = 50
	s.Duration = 12 * time.Second
	s.FlapPeriod = time.Second
	return s
}

// RandomClosedPreset is Workers closed-loop goroutines sharing one client,
// sending back to back for 3 s against a host that fails the share f of
// attempts at random, without a capacity limit: what retries rescue and
// cost when failures are independent. Above a failure share of one half
// the preset has 8 workers instead of 20: there most requests retry, and
// fewer workers keep the run as short. The deadline of 5 s bounds the run
// at Duration plus 5 s, whatever the backoff. The backoff starts at 10 ms,
// as a caller that cares for latency sets it, so that a run has thousands
// of requests and its percentiles mean something.
func RandomClosedPreset(f float64) Scenario {
	s := single(RandomClosed)
	s.Params = bench.Params{MaxRetries: 5, BaseDelay: 10 * time.Millisecond, MaxDelay: time.Second}
	s.FailRate = f
	s.Workers = 20
	if f >= 0.5 {
		s.Workers = 8
	}
	s.Duration = 3 * time.Second
	s.RequestTimeout = 5 * time.Second
	return s
}

// RandomClosedRates are the failure shares of the report's RandomClosed
// presets.
var RandomClosedRates = []float64{0.05, 0.30, 0.60}

// RetryAfterLongPreset is one call whose first attempt gets 429 with
// Retry-After: 2, under a policy whose MaxRetries × MaxDelay (1.5 s) is
// shorter than that: a system that honours Retry-After waits about 2 s and
// succeeds; one that ignores it retries early.
func RetryAfterLongPreset() Scenario {
	s := single(RetryAfterLong)
	s.Calls = 1
	s.RetryAfter = 2 * time.Second
	s.Params = bench.Params{MaxRetries: 3, BaseDelay: 200 * time.Millisecond, MaxDelay: 500 * time.Millisecond}
	return s
}

// RetryAfterHerdPreset is the default fleet and outage with every outage
// 503 carrying a Retry-After that names the outage's end: the systems that
// honour it are spared the outage, and then all come back at once.
func RetryAfterHerdPreset() Scenario {
	s := Default()
	s.Mode = RetryAfterHerd
	return s
}

// Preset returns the scenario a mode runs by default: Default's fleet for
// open, closed and collapse, RandomFailures for random, and the presets
// above for the others (SlowBurstPreset is burst with a service time, so
// not a mode's own); failRate picks RandomClosed's (0 means 5%).
func Preset(mode Mode, failRate float64) (Scenario, error) {
	var s Scenario
	switch mode {
	case Open, Closed, Collapse:
		s = Default()
		s.Mode = mode
	case Random:
		s = RandomFailures()
	case RetryAfterHerd:
		s = RetryAfterHerdPreset()
	case Sequential:
		s = SequentialPreset()
	case Burst:
		s = BurstPreset()
	case RandomClosed:
		if failRate == 0 {
			failRate = DefaultFailRate
		}
		s = RandomClosedPreset(failRate)
	case RetryAfterLong:
		s = RetryAfterLongPreset()
	case Flapping:
		s = FlapPreset()
	default:
		return Scenario{}, fmt.Errorf("storm: unknown mode %q", mode)
	}
	if failRate != 0 {
		s.FailRate = failRate
	}
	return s, nil
}
