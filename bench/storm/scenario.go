// Package storm is the retry-storm simulator: a loopback server of fixed
// capacity with an outage window, and a fleet of clients that keep sending
// requests through one retrying system after another. It shows what each
// system's retries do to a server that fails for a few seconds: how much
// extra load they send while it is down, how hard they hit it when it comes
// back, and how many requests they rescue. The everyday scenarios
// (everyday.go) run one client instead of a fleet, as a newcomer to a retry
// library writes it: calls in a row to a dead host, a burst during a short
// outage at a fast server and at a slow one, workers against random
// failures, a long Retry-After, a host that comes and goes; and the fleet
// told by Retry-After when to come back.
//
// Run(scenario, systems) runs the scenario once per system, one after the
// other (side by side in the modes that send one request at a time), each
// against a fresh server, and returns per-window counts and the metrics
// computed from them.
package storm

import (
	"fmt"
	"slices"
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
	// RetryAfterHerd: open-loop arrivals and an outage whose 503s carry a
	// Retry-After, by default one that names the outage's end, so that
	// every client that honours it comes back at about the same time.
	RetryAfterHerd Mode = "retry-after-herd"

	// The everyday single-client modes (everyday.go): one client, as a
	// newcomer to a retry library writes it, not a fleet.

	// Sequential: one goroutine makes Calls calls in a row to a host that
	// always answers 503.
	Sequential Mode = "sequential"
	// Burst: Workers goroutines that start together (or Stagger apart)
	// send one request each through the one client; the host is down in
	// [OutageStart, OutageEnd) and then serves everything.
	Burst Mode = "burst"
	// RandomClosed: Workers goroutines share the one client and send
	// requests back to back for Duration, against a host that fails a
	// share FailRate of attempts at random.
	RandomClosed Mode = "random-closed"
	// RetryAfterLong: one goroutine makes Calls calls in a row; the first
	// attempt of each gets 429 with Retry-After (RetryAfter), later ones
	// 200.
	RetryAfterLong Mode = "retry-after-long"
	// Flapping: one client sends open-loop arrivals at Rate to a host
	// that is down in every other FlapPeriod-long interval while they
	// arrive, without a capacity limit unless Capacity is set.
	Flapping Mode = "flapping"
)

// Modes lists every mode, in the order of the help text.
var Modes = []Mode{Open, Closed, Collapse, Random, RetryAfterHerd, Sequential, Burst, RandomClosed, RetryAfterLong, Flapping}

// Scenario is one storm: fleet, load, server and outage.
type Scenario struct {
	// Mode is one of Modes.
	Mode Mode
	// Clients is the number of client instances, each with its own
	// system instance and connection pool (1 in the single-client modes).
	Clients int
	// Workers is the goroutines that share the one client in Burst,
	// RandomClosed and Sequential (where zero means one).
	Workers int
	// Stagger, in Burst, starts worker i i×Stagger after the first, as a
	// newcomer's goroutines started in a loop with a sleep; zero starts
	// them together.
	Stagger time.Duration
	// Calls is the logical requests made in a row in Sequential (by each
	// worker) and RetryAfterLong.
	Calls int
	// RetryAfter is the Retry-After the server sends, in whole seconds:
	// on RetryAfterLong's 429s, and on RetryAfterHerd's 503s when
	// positive (zero there means the seconds left until the outage's end,
	// rounded up, so that every answer names about the same date).
	RetryAfter time.Duration
	// ThrottleShed, in RetryAfterHerd, answers what exceeds the capacity
	// with 429 and Retry-After (RetryAfter, a second at least) rather than
	// a plain 503, as a rate limiter in front of the server does: a quota
	// after the outage.
	ThrottleShed bool
	// Rate is the logical requests per second offered by all clients
	// together (the nominal rate for Closed).
	Rate float64
	// Capacity is the requests per second the server answers with 200;
	// the excess gets 503. Zero means no limit (the single-client modes).
	Capacity float64
	// Burst is the token bucket's depth; zero means a tenth of Capacity.
	Burst float64
	// OutageStart and OutageEnd bound the full outage: every request in
	// [OutageStart, OutageEnd) gets 503.
	OutageStart, OutageEnd time.Duration
	// FlapPeriod, when positive, makes the host also down in every other
	// FlapPeriod-long interval, the first included, until Duration: down
	// in [0, FlapPeriod), up in [FlapPeriod, 2·FlapPeriod), and so on
	// (Flapping; the modes without a Duration never flap).
	FlapPeriod time.Duration
	// ServiceTime is how long the server takes over each attempt before
	// it answers, in every mode; it decides the answer at the end, from
	// the host's state then rather than on arrival. Zero answers at once.
	ServiceTime time.Duration
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
	// the load (Random and RandomClosed; DefaultFailRate when zero).
	FailRate float64
	// Window is the width of the counting windows.
	Window time.Duration
	// Params are the retry numbers every system gets.
	Params bench.Params
	// Seed makes arrivals, client choice and httpretry's jitter (one
	// stream per client, the same in every variant) reproducible.
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
	if !slices.Contains(Modes, s.Mode) {
		return fmt.Errorf("storm: unknown mode %q", s.Mode)
	}
	switch {
	case s.Clients < 1:
		return fmt.Errorf("storm: need at least one client")
	case s.Window <= 0:
		return fmt.Errorf("storm: window must be positive")
	case s.OutageEnd < s.OutageStart:
		return fmt.Errorf("storm: outage ends before it starts")
	case s.FailRate < 0 || s.FailRate >= 1:
		return fmt.Errorf("storm: fail rate %v is not in [0, 1)", s.FailRate)
	case s.Capacity < 0:
		return fmt.Errorf("storm: capacity must not be negative")
	case s.RetryAfter < 0:
		return fmt.Errorf("storm: Retry-After must not be negative")
	case s.FlapPeriod < 0 || s.ServiceTime < 0:
		return fmt.Errorf("storm: flap period and service time must not be negative")
	}
	switch s.Mode {
	case Sequential, RetryAfterLong:
		if s.Calls < 1 || s.RequestTimeout <= 0 {
			return fmt.Errorf("storm: %s needs at least one call and a request timeout", s.Mode)
		}
		if s.Mode == RetryAfterLong && s.RetryAfter < time.Second {
			return fmt.Errorf("storm: %s needs a Retry-After of at least a second", s.Mode)
		}
		return nil
	case Burst:
		if s.Workers < 1 || s.RequestTimeout <= 0 || s.Stagger < 0 {
			return fmt.Errorf("storm: burst needs at least one worker, a request timeout and no negative stagger")
		}
		return nil
	case RandomClosed:
		if s.Workers < 1 || s.Duration <= 0 || s.RequestTimeout <= 0 {
			return fmt.Errorf("storm: random-closed needs workers, a duration and a request timeout")
		}
		return nil
	case Flapping:
		// Capacity may be zero: one client needs no limit to show
		// what it does to a host that comes and goes.
		if s.Rate <= 0 || s.Duration <= 0 || s.RequestTimeout <= 0 || s.FlapPeriod <= 0 {
			return fmt.Errorf("storm: flapping needs a rate, a duration, a request timeout and a flap period")
		}
		return nil
	}
	switch {
	case s.Rate <= 0 || s.Capacity <= 0:
		return fmt.Errorf("storm: rate and capacity must be positive")
	case s.Duration <= 0:
		return fmt.Errorf("storm: duration must be positive")
	case s.Mode == Collapse && (s.CollapseFactor <= 0 || s.CollapseAfter < s.Window):
		return fmt.Errorf("storm: collapse needs a factor and a span of at least one window")
	}
	return nil
}

// failRate resolves FailRate: random failures happen in Random and
// RandomClosed only.
func (s Scenario) failRate() float64 {
	switch {
	case s.Mode != Random && s.Mode != RandomClosed:
		return 0
	case s.FailRate == 0:
		return DefaultFailRate
	}
	return s.FailRate
}

// flapDown reports whether the host is down at now by flapping: in the
// first, third, fifth… FlapPeriod-long interval of the run, up to
// Duration, after which the requests in flight are let finish.
func (s Scenario) flapDown(now time.Duration) bool {
	return s.FlapPeriod > 0 && now >= 0 && now < s.Duration && (now/s.FlapPeriod)%2 == 0
}

// burst resolves Burst.
func (s Scenario) burst() float64 {
	if s.Burst > 0 {
		return s.Burst
	}
	return s.Capacity / 10
}

// perWindow is the server's capacity in one counting window, 0 for no
// limit.
func (s Scenario) perWindow() float64 {
	return s.Capacity * s.Window.Seconds()
}

// span is how long a run can last: the last request's start plus its
// timeout. The recorder's windows cover it, plus a margin.
func (s Scenario) span() time.Duration {
	switch s.Mode {
	case Sequential, RetryAfterLong:
		return time.Duration(s.Calls) * s.RequestTimeout
	case Burst:
		return s.RequestTimeout
	}
	return s.Duration + s.RequestTimeout
}

// tracksRequests reports whether the server keeps the state of each
// logical request: its attempts and the Retry-After date it was told.
// The fleet modes without Retry-After skip it, to stay as they were.
func (s Scenario) tracksRequests() bool {
	return s.Mode == Sequential || s.Mode == RetryAfterLong || s.Mode == RetryAfterHerd
}

// inParallel reports whether Run may run the systems side by side: in
// the modes that send one request at a time the run is all waiting, so
// running the systems together costs no accuracy and saves the sum of
// their waits.
func (s Scenario) inParallel() bool {
	return s.Mode == Sequential || s.Mode == RetryAfterLong
}

// Charted reports whether a chart of the run's windows says anything: the
// modes that send a handful of requests one at a time have a table only.
func (s Scenario) Charted() bool {
	return s.Mode != Sequential && s.Mode != RetryAfterLong
}
