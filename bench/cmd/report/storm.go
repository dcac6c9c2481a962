package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/httpretry/httpretry/bench"
	"github.com/httpretry/httpretry/bench/storm"
)

// stormRun is one storm scenario of the report.
type stormRun struct {
	slug, title, note string
	scenario          storm.Scenario
}

// stormRuns are the report's storm scenarios: the default fleet, one
// shared client, closed loop, a collapsing server, and random failures
// without an outage.
func stormRuns() []stormRun {
	open := storm.Default()
	single := storm.Default()
	single.Clients = 1
	closed := storm.Default()
	closed.Mode = storm.Closed
	collapse := storm.Default()
	collapse.Mode = storm.Collapse
	return []stormRun{
		{"open", "Open loop, a fleet of 200 clients (the default scenario)", "Arrivals do not slow down when the server does, as with many independent users.", open},
		{"single", "Open loop, one shared client", "The same load through one Transport and one connection pool.", single},
		{"closed", "Closed loop", "Each client waits for its answer before it thinks and sends again, so the fleet's demand falls while requests wait.", closed},
		{"collapse", "Collapse", "The server falls over again whenever its offered load stays above twice its capacity, so retries can prolong the outage.", collapse},
		{"random", "Random failures, no outage", "The default fleet and load against a server that fails 5% of all attempts at random: what storm control costs when there is no storm.", storm.RandomFailures()},
	}
}

// runStorms runs every storm scenario and writes its table into md, its
// CSV and chart into dir (named relative to the report as rel).
func runStorms(md io.Writer, systems []bench.System, dir, rel string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	fmt.Fprintf(md, "## Retry storm\n\n")
	fmt.Fprintf(md, "`make storm` (`cd bench && go run ./cmd/storm`), package `bench/storm`: a loopback server with a token bucket of the given capacity "+
		"(the excess gets 503) and a full outage (every request gets 503); the clients send GETs through each system in turn, each system against a fresh server. "+
		"Load ×: attempts at the server ÷ logical requests, overall and over the outage's windows. Peak: the most attempts in one 100 ms window ÷ the capacity "+
		"per window, overall and from the outage's end on. Back to 95%%: from the outage's end until every later window (up to the end of arrivals) serves ≥ 95%% "+
		"of its attempts; “> x s” means not before new requests stopped. Down until: the server's last outage or collapse answer. Success: logical requests that finally got a 200. "+
		"Conns: connections the server accepted. Sim lag: the longest a request was sent after its scheduled arrival; large values mean the machine, "+
		"not only the system, shaped that run.\n\n")
	for _, r := range stormRuns() {
		if err := runStorm(md, r, systems, dir, rel); err != nil {
			return err
		}
	}
	return nil
}

// runStorm runs one scenario and writes its section: the table, and the
// CSV and (in the modes that have one) the chart into dir.
func runStorm(md io.Writer, r stormRun, systems []bench.System, dir, rel string) error {
	fmt.Fprintf(os.Stderr, "report: storm %s\n", r.slug)
	res, err := storm.Run(r.scenario, systems)
	if err != nil {
		return err
	}
	fmt.Fprintf(md, "### %s\n\n%s ", r.title, r.note)
	storm.Describe(md, r.scenario)
	fmt.Fprintln(md)
	storm.WriteTable(md, res)
	png, csv := "storm-"+r.slug+".png", "storm-"+r.slug+".csv"
	if err := writeFile(filepath.Join(dir, csv), func(w io.Writer) error { return storm.WriteCSV(w, res) }); err != nil {
		return err
	}
	if !r.scenario.Charted() {
		fmt.Fprintf(md, "\nPer-window counts: [%s](%s/%s).\n\n", csv, rel, csv)
		return nil
	}
	if err := writeFile(filepath.Join(dir, png), func(w io.Writer) error { return storm.WriteChart(w, res) }); err != nil {
		return err
	}
	fmt.Fprintf(md, "\n![attempts per 100 ms, %s](%s/%s)\n\nPer-window counts: [%s](%s/%s).\n\n", r.slug, rel, png, csv, rel, csv)
	return nil
}

// writeFile writes what fill produces to path.
func writeFile(path string, fill func(io.Writer) error) error {
	var b bytes.Buffer
	if err := fill(&b); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}
