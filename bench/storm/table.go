package storm

import (
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
	"time"
)

// WriteTable writes the results as a Markdown table, one row per system:
// the fleet table below for the storm modes, a compact table of its own
// for each everyday mode (everydaytable.go).
func WriteTable(w io.Writer, res Results) {
	if write := everydayTables[res.Scenario.Mode]; write != nil {
		write(w, res)
		return
	}
	fmt.Fprintf(w, "| system | load × overall | load × in outage | peak ÷ capacity | peak after outage ÷ capacity | back to 95%% after | down until | success | p50 | p99 | conns | sim lag (runs) |\n")
	fmt.Fprintf(w, "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, s := range res.Systems {
		m := s.Metrics
		inOutage, after := fmt.Sprintf("%.2f×", m.OutageAmplification), fmt.Sprintf("%.2f×", m.PeakAfterRatio)
		rec, down := backTo95(res.Scenario, m), seconds(m.DownUntil)
		if res.Scenario.OutageEnd <= res.Scenario.OutageStart && res.Scenario.Mode != Collapse { // no outage: its cells mean nothing
			inOutage, after, rec, down = "–", "–", "–", "–"
		}
		fmt.Fprintf(w, "| %s | %.2f× | %s | %.2f× | %s | %s | %s | %.1f%% | %s | %s | %d | %s (%d) |\n",
			s.Name, m.Amplification, inOutage, m.PeakRatio, after,
			rec, down, 100*m.Success, millis(m.P50), millis(m.P99), m.Conns, millis(m.Lag), m.Runs)
	}
}

// Describe writes one line that says what the scenario was.
func Describe(w io.Writer, sc Scenario) {
	if describe := everydayDescriptions[sc.Mode]; describe != nil {
		fmt.Fprintln(w, describe(sc)+serviceNote(sc))
		return
	}
	failure := fmt.Sprintf("outage %s–%s", seconds(sc.OutageStart), seconds(sc.OutageEnd))
	if sc.OutageEnd <= sc.OutageStart {
		failure = "no outage"
	}
	if f := sc.failRate(); f > 0 {
		failure += fmt.Sprintf(", %.1f%% of attempts failed at random", 100*f)
	}
	fmt.Fprintf(w, "Mode %s, %d clients, %.0f req/s offered, capacity %.0f req/s (burst %.0f), %s, "+
		"arrivals for %s, request timeout %s, MaxRetries %d, base %s, cap %s, windows of %s, seed %d.",
		sc.Mode, sc.Clients, sc.Rate, sc.Capacity, sc.burst(), failure,
		seconds(sc.Duration), sc.RequestTimeout, sc.Params.MaxRetries, sc.Params.BaseDelay, sc.Params.MaxDelay, sc.Window, sc.Seed)
	if sc.Mode == Collapse {
		fmt.Fprintf(w, " Collapse: above %.1f× capacity over %s, down for %s.", sc.CollapseFactor, sc.CollapseAfter, sc.CollapseFor)
	}
	if sc.Mode == RetryAfterHerd {
		told := "the seconds left until the outage's end, rounded up, so that every answer names about the same date"
		if sc.RetryAfter > 0 {
			told = fmt.Sprintf("%d", int(ceilSeconds(sc.RetryAfter)/time.Second))
		}
		fmt.Fprintf(w, " Every outage 503 carries Retry-After: %s.", told)
		if sc.ThrottleShed {
			fmt.Fprintf(w, " What exceeds the capacity gets 429 with Retry-After: %d (a quota).", int(ceilSeconds(sc.RetryAfter)/time.Second))
		}
	}
	fmt.Fprintln(w, serviceNote(sc))
}

// WriteCSV writes every window of every system, one row each.
func WriteCSV(w io.Writer, res Results) error {
	cw := csv.NewWriter(w)
	cw.Write([]string{"system", "t_ms", "attempts", "served", "shed", "down", "arrivals", "succeeded", "failed", "flaky", "throttled", "told", "early"})
	for _, s := range res.Systems {
		for _, win := range s.Windows {
			cw.Write([]string{s.Name, strconv.FormatInt(win.Start.Milliseconds(), 10),
				strconv.Itoa(win.Attempts), strconv.Itoa(win.Served), strconv.Itoa(win.ShedCount), strconv.Itoa(win.DownCount),
				strconv.Itoa(win.Arrivals), strconv.Itoa(win.Succeeded), strconv.Itoa(win.Failed), strconv.Itoa(win.FlakyCount),
				strconv.Itoa(win.ThrottledCount), strconv.Itoa(win.ToldCount), strconv.Itoa(win.EarlyCount)})
		}
	}
	cw.Flush()
	return cw.Error()
}

// seconds formats d as seconds with two decimals.
func seconds(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

// millis formats d as milliseconds.
func millis(d time.Duration) string {
	return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
}

// backTo95 is the "back to 95% after" cell: the time to recover, or that
// the run ended before it did.
func backTo95(sc Scenario, m Metrics) string {
	if m.Recovered {
		return seconds(m.Recovery)
	}
	return "> " + seconds(sc.Duration-sc.OutageEnd)
}
