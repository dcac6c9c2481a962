// Package storm is the retry-storm simulator: a loopback server of fixed
// capacity with an outage window, and a fleet of clients that keep sending
// requests through one retrying system after another. It shows what each
// system's retries do to a server that fails for a few seconds: how much
// extra load they send while it is down, how hard they hit it when it comes
// back, and how many requests they rescue.
//
// Run(scenario, systems) runs the scenario once per system, one after the
// other, each against a fresh server, and returns per-window counts and
// the metrics computed from them.
package storm

import (
	"fmt"
	"time"

	"github.com/httpretry/httpretry/bench"
)

// Mode is how clients send and how the server fails.
type Mode string

// The modes.
const (
	// Open: Poisson arrivals at a fixed rate, whatever the answers; demand
	// does not slow down when the server does.
	Open Mode = "open"
	// Closed: each client waits for its answer, then thinks for an
	// exponential time before its next request.
	Closed Mode = "closed"
	// Collapse: open-loop arrivals, and a server that falls over again
	// whenever its offered load stays above CollapseFactor × Capacity for
	// CollapseAfter, as overloaded services do, so that retry storms
	// prolong the outage.
	Collapse Mode = "collapse"
	// Random: open-loop arrivals and no outage; the server fails a share
	// of all attempts (FailRate) at random, as a flaky backend does, so
	// that storm control shows what it costs when there is no storm.
	Random Mode = "random"
)

// Scenario is one storm: fleet, load, server and outage.
type Scenario struct {
	// Mode is open, closed, collapse or random.
	Mode Mode
	// Clients is the number of client instances, each with its own
	// system instance and connection pool.
	Clients int
	// Rate is the logical requests per second offered by all clients
	// together (the nominal rate for Closed).
	Rate float64
	// Capacity is the requests per second the server answers with 200;
	// the excess gets 503.
	Capacity float64
	// Burst is the token bucket's depth; zero means a tenth of Capacity.
	Burst float64
	// OutageStart and OutageEnd bound the full outage: every request in
	// [OutageStart, OutageEnd) gets 503.
	OutageStart, OutageEnd time.Duration
	// Duration is how long new logical requests arrive; requests in flight
	// at its end are let finish.
	Duration time.Duration
	// RequestTimeout is every logical request's context deadline.
	RequestTimeout time.Duration
	// CollapseFactor, CollapseAfter and CollapseFor shape Collapse mode:
	// offered load above CollapseFactor × Capacity, averaged over
	// CollapseAfter, takes the server down for CollapseFor.
	CollapseFactor float64
	CollapseAfter  time.Duration
	CollapseFor    time.Duration
	// FailRate is the share of attempts answered 503 at random, whatever
	// the load (Random mode; DefaultFailRate when zero).
	FailRate float64
	// Window is the width of the counting windows.
	Window time.Duration
	// Params are the retry numbers every system gets.
	Params bench.Params
	// Seed makes arrivals and client choice reproducible.
	Seed uint64
	// LagLimit and Reruns: a system's run in which the simulator fell
	// more than LagLimit behind its schedule is run again, up to Reruns
	// times, and the run that lagged least is kept.
	LagLimit time.Duration
	Reruns   int
}

// DefaultFailRate is Random mode's share of attempts failed at random.
const DefaultFailRate = 0.05

// Default is the scenario of `make storm`: a 3-second outage under 70%
// load, which backoff alone turns into seconds of overload.
func Default() Scenario {
	return Scenario{
		Mode:           Open,
		Clients:        200,
		Rate:           700,
		Capacity:       1000,
		OutageStart:    1 * time.Second,
		OutageEnd:      4 * time.Second,
		Duration:       7 * time.Second,
		RequestTimeout: 10 * time.Second,
		CollapseFactor: 2,
		CollapseAfter:  500 * time.Millisecond,
		CollapseFor:    time.Second,
		Window:         100 * time.Millisecond,
		Params:         bench.Params{MaxRetries: 8, BaseDelay: 20 * time.Millisecond, MaxDelay: time.Second},
		Seed:           1,
		LagLimit:       50 * time.Millisecond,
		Reruns:         2,
	}
}

// RandomFailures is the default fleet and load without an outage, against
// a server that fails DefaultFailRate of all attempts at random: what storm
// control costs when there is no storm.
func RandomFailures() Scenario {
	s := Default()
	s.Mode = Random
	s.OutageStart, s.OutageEnd = 0, 0
	return s
}

// Smoke is a short run of the default shape, small enough for CI: every
// system in a few seconds in all.
func Smoke() Scenario {
	s := Default()
	s.Clients = 20
	s.Rate = 200
	s.OutageStart = 150 * time.Millisecond
	s.OutageEnd = 350 * time.Millisecond
	s.Duration = 500 * time.Millisecond
	s.RequestTimeout = 600 * time.Millisecond
	s.Params.MaxDelay = 50 * time.Millisecond
	s.Reruns = 0
	return s
}

// Validate reports a scenario that cannot run.
func (s Scenario) Validate() error {
	switch {
	case s.Mode != Open && s.Mode != Closed && s.Mode != Collapse && s.Mode != Random:
		return fmt.Errorf("storm: unknown mode %q", s.Mode)
	case s.Clients < 1:
		return fmt.Errorf("storm: need at least one client")
	case s.Rate <= 0 || s.Capacity <= 0:
		return fmt.Errorf("storm: rate and capacity must be positive")
	case s.Duration <= 0 || s.Window <= 0:
		return fmt.Errorf("storm: duration and window must be positive")
	case s.OutageEnd < s.OutageStart:
		return fmt.Errorf("storm: outage ends before it starts")
	case s.Mode == Collapse && (s.CollapseFactor <= 0 || s.CollapseAfter < s.Window):
		return fmt.Errorf("storm: collapse needs a factor and a span of at least one window")
	case s.FailRate < 0 || s.FailRate >= 1:
		return fmt.Errorf("storm: fail rate %v is not in [0, 1)", s.FailRate)
	}
	return nil
}

// failRate resolves FailRate: random failures happen in Random mode only.
func (s Scenario) failRate() float64 {
	switch {
	case s.Mode != Random:
		return 0
	case s.FailRate == 0:
		return DefaultFailRate
	}
	return s.FailRate
}

// burst resolves Burst.
func (s Scenario) burst() float64 {
	if s.Burst > 0 {
		return s.Burst
	}
	return s.Capacity / 10
}

// perWindow is the server's capacity in one counting window.
func (s Scenario) perWindow() float64 {
	return s.Capacity * s.Window.Seconds()
}
