package storm

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// The everyday modes' tables: each shows only what its scenario is about,
// one row per system, so that the report stays readable.

// everydayTables are the table writers of the modes that do not use the
// fleet table.
var everydayTables = map[Mode]func(io.Writer, Results){
	Sequential:     writeSequential,
	Burst:          writeBurst,
	RandomClosed:   writeRandomClosed,
	RetryAfterLong: writeRetryAfterLong,
	RetryAfterHerd: writeHerd,
	Flapping:       writeFlapping,
}

// everydayDescriptions say what an everyday scenario was, in one line;
// RetryAfterHerd, a fleet, has the fleet's line (Describe).
var everydayDescriptions = map[Mode]func(Scenario) string{
	Sequential: func(sc Scenario) string {
		return fmt.Sprintf("Mode sequential: one client, %d goroutine(s), %d calls in a row each to a host that always answers 503; %s.",
			max(sc.Workers, 1), sc.Calls, policyText(sc))
	},
	Burst: func(sc Scenario) string {
		start := "that start together"
		if sc.Stagger > 0 {
			start = fmt.Sprintf("started %v apart", sc.Stagger)
		}
		return fmt.Sprintf("Mode burst: one client shared by %d goroutines %s; the host answers 503 from %s to %s, "+
			"then 200 with %s; %s.", sc.Workers, start, seconds(sc.OutageStart), seconds(sc.OutageEnd), capacityText(sc), policyText(sc))
	},
	RandomClosed: func(sc Scenario) string {
		return fmt.Sprintf("Mode random-closed: %d closed-loop workers share one client and send back to back for %s; "+
			"%.0f%% of attempts fail at random with 503, %s; %s.", sc.Workers, seconds(sc.Duration), 100*sc.failRate(), capacityText(sc), policyText(sc))
	},
	RetryAfterLong: func(sc Scenario) string {
		return fmt.Sprintf("Mode retry-after-long: one client, one goroutine, %d call(s) in a row; the first attempt of each gets 429 "+
			"with Retry-After: %d, later ones 200; %s (MaxRetries × cap = %s).",
			sc.Calls, int(ceilSeconds(sc.RetryAfter)/time.Second), policyText(sc), time.Duration(sc.Params.MaxRetries)*sc.Params.MaxDelay)
	},
	Flapping: func(sc Scenario) string {
		return fmt.Sprintf("Mode flapping: one client, %.0f req/s open-loop arrivals for %s; the host answers 503 in every other interval of %s, "+
			"the first included, and 200 in the others, %s; %s.", sc.Rate, seconds(sc.Duration), sc.FlapPeriod, capacityText(sc), policyText(sc))
	},
}

// writeSequential: how long each call takes to give up, and whether later
// calls learn from earlier ones (attempts by call).
func writeSequential(w io.Writer, res Results) {
	fmt.Fprintf(w, "| system | success | mean latency | max latency | attempts per call | attempts by call |\n")
	fmt.Fprintf(w, "|---|--:|--:|--:|--:|--:|\n")
	for _, s := range res.Systems {
		m := s.Metrics
		fmt.Fprintf(w, "| %s | %.1f%% | %s | %s | %.2f | %s |\n", s.Name, 100*m.Success, seconds(m.Mean), seconds(m.Max),
			ratio(m.Attempts, m.Requests), joinInts(m.CallAttempts))
	}
}

// writeBurst: how long after the host's return the backlog is through, and
// what it cost the host while it was down.
func writeBurst(w io.Writer, res Results) {
	fmt.Fprintf(w, "| system | success | last done after recovery | attempts while down | attempts per request | p50 | p99 |\n")
	fmt.Fprintf(w, "|---|--:|--:|--:|--:|--:|--:|\n")
	for _, s := range res.Systems {
		m := s.Metrics
		fmt.Fprintf(w, "| %s | %.1f%% | %s | %d | %.2f | %s | %s |\n", s.Name, 100*m.Success,
			signedSeconds(m.LastDone-res.Scenario.OutageEnd), m.DownAttempts, m.Amplification, millis(m.P50), millis(m.P99))
	}
}

// writeFlapping: what retries rescue from a host that comes and goes,
// what they send it while it is down, and how long the requests that
// arrive while it is down wait for an up interval (p99, max, and the last
// one's end after arrivals stop).
func writeFlapping(w io.Writer, res Results) {
	fmt.Fprintf(w, "| system | requests | success | attempts per request | attempts while down | p50 | p99 | max latency | last done after arrivals end |\n")
	fmt.Fprintf(w, "|---|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, s := range res.Systems {
		m := s.Metrics
		fmt.Fprintf(w, "| %s | %d | %.1f%% | %.2f | %d | %s | %s | %s | %s |\n", s.Name, m.Requests, 100*m.Success, m.Amplification,
			m.DownAttempts, millis(m.P50), millis(m.P99), millis(m.Max), signedSeconds(m.LastDone-res.Scenario.Duration))
	}
}

// writeRandomClosed: what retries rescue from independent failures, and at
// what cost in attempts and latency.
func writeRandomClosed(w io.Writer, res Results) {
	fmt.Fprintf(w, "| system | requests | success | attempts per request | p50 | p99 |\n")
	fmt.Fprintf(w, "|---|--:|--:|--:|--:|--:|\n")
	for _, s := range res.Systems {
		m := s.Metrics
		fmt.Fprintf(w, "| %s | %d | %.2f%% | %.3f | %s | %s |\n", s.Name, m.Requests, 100*m.Success, m.Amplification, millis(m.P50), millis(m.P99))
	}
}

// writeRetryAfterLong: whether a Retry-After longer than the policy's own
// waits is honoured (latency ≈ Retry-After, no early retries).
func writeRetryAfterLong(w io.Writer, res Results) {
	fmt.Fprintf(w, "| system | success | mean latency | max latency | attempts per call | early retries |\n")
	fmt.Fprintf(w, "|---|--:|--:|--:|--:|--:|\n")
	for _, s := range res.Systems {
		m := s.Metrics
		fmt.Fprintf(w, "| %s | %.1f%% | %s | %s | %.2f | %d |\n", s.Name, 100*m.Success, seconds(m.Mean), seconds(m.Max),
			ratio(m.Attempts, m.Requests), m.Early)
	}
}

// writeHerd: the fleet's load in and after the outage, and how many
// retries came before the date they were told.
func writeHerd(w io.Writer, res Results) {
	fmt.Fprintf(w, "| system | load × in outage | peak after outage ÷ capacity | back to 95%% after | answers with Retry-After | early retries | success | p50 | p99 | sim lag (runs) |\n")
	fmt.Fprintf(w, "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, s := range res.Systems {
		m := s.Metrics
		rec := backTo95(res.Scenario, m)
		fmt.Fprintf(w, "| %s | %.2f× | %.2f× | %s | %d | %d (%.0f%%) | %.1f%% | %s | %s | %s (%d) |\n",
			s.Name, m.OutageAmplification, m.PeakAfterRatio, rec, m.Told, m.Early, 100*ratio(m.Early, m.Told),
			100*m.Success, millis(m.P50), millis(m.P99), millis(m.Lag), m.Runs)
	}
}

// policyText is the request timeout and retry numbers of sc.
func policyText(sc Scenario) string {
	return fmt.Sprintf("request timeout %s, MaxRetries %d, base %s, cap %s",
		sc.RequestTimeout, sc.Params.MaxRetries, sc.Params.BaseDelay, sc.Params.MaxDelay)
}

// serviceNote is a sentence on the server's service time, "" when it
// answers at once; it follows every mode's description.
func serviceNote(sc Scenario) string {
	if sc.ServiceTime <= 0 {
		return ""
	}
	return fmt.Sprintf(" The server takes %s over every attempt and decides its answer at the end, "+
		"so that an attempt that arrives just before the host's return gets 200.", sc.ServiceTime)
}

// capacityText says whether the server sheds load.
func capacityText(sc Scenario) string {
	if sc.Capacity <= 0 {
		return "no capacity limit"
	}
	return fmt.Sprintf("capacity %.0f req/s (the excess gets 503)", sc.Capacity)
}

// signedSeconds is seconds with a sign, for times that can come before
// their reference.
func signedSeconds(d time.Duration) string {
	return fmt.Sprintf("%+.2f s", d.Seconds())
}

// joinInts writes xs as "a, b, c", "–" for none.
func joinInts(xs []int) string {
	if len(xs) == 0 {
		return "–"
	}
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.Itoa(x)
	}
	return strings.Join(parts, ", ")
}
