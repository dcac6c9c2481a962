package main

import (
	"fmt"
	"io"

	"github.com/httpretry/httpretry/bench"
	"github.com/httpretry/httpretry/bench/storm"
)

// everydayRuns are the report's everyday scenarios: what a newcomer to a
// retry library writes, one client against one host, each a few seconds
// per system; and the fleet told by Retry-After when to come back.
func everydayRuns() []stormRun {
	runs := []stormRun{
		{"sequential", "Sequential calls to a host that is down", "One goroutine calls a host that always answers 503, several times in a row: how long each call waits for nothing, and whether later calls learn from earlier ones.", storm.SequentialPreset()},
		{"concurrent-down", "Concurrent calls to a host that is down", "Four goroutines share one client and call a host that always answers 503, five times each: whether holding retries back when requests fail together makes any call wait longer for its failure.", storm.ConcurrentDownPreset()},
		{"burst", "A burst on one client while the host is down", "200 goroutines share one client and start together while the host is down for a second: what they send to the dead host, and how soon the backlog is through once it is back.", storm.BurstPreset()},
		{"slow-burst", "A burst on one client against a slow server", "The same burst against a server that takes 200 ms over every answer: whether backoff that starts only once a failure has taken its time still lets the backlog through soon after the host is back.", storm.SlowBurstPreset()},
		{"staggered", "Calls started one by one through an outage", "Eight goroutines share one client and start 200 ms apart, one call each, while the host is down for 1.5 s: whether calls that come one at a time learn that the host is back as soon as calls that come together do.", storm.StaggeredPreset()},
		{"flapping", "A flapping host, open loop", "One client sends 50 requests a second to a host that is down every other second: what retries rescue from a host that comes and goes, and whether what a system learns while the host is down holds back retries that would succeed once it is up.", storm.FlapPreset()},
	}
	for _, f := range storm.RandomClosedRates {
		sc := storm.RandomClosedPreset(f)
		runs = append(runs, stormRun{fmt.Sprintf("random-closed-%.0f", 100*f), fmt.Sprintf("Random failures, closed loop, %.0f%%", 100*f),
			"Workers share one client and send back to back against a host that fails attempts at random, independently of the load: what retries rescue, and at what cost.", sc})
	}
	return append(runs,
		stormRun{"retry-after-long", "Retry-After longer than the policy's waits", "The first attempt gets 429 with a Retry-After longer than all the policy's backoff together: a system that honours it waits and succeeds; one that ignores it retries early.", storm.RetryAfterLongPreset()},
		stormRun{"retry-after-herd", "Retry-After in an outage, a fleet of 200 clients", "The default fleet and outage, with every outage 503 telling the client to come back at the outage's end: whether the fleet keeps away while told to, and how hard it comes back. Early retries: attempts that arrived before the date their request was last told.", storm.RetryAfterHerdPreset()},
	)
}

// runEveryday runs every everyday scenario and writes its section into md,
// its CSV and chart into dir (named relative to the report as rel).
func runEveryday(md io.Writer, systems []bench.System, dir, rel string) error {
	fmt.Fprintf(md, "## Everyday scenarios\n\n")
	fmt.Fprintf(md, "`cd bench && go run ./cmd/storm -mode sequential|burst|random-closed|retry-after-long|retry-after-herd|flapping` (random-closed with `-fail-rate 0.3` and so on, the slow burst with `-mode burst -service-time 200ms`, the staggered calls with `-mode burst -workers 8 -stagger 200ms -outage-end 1.5s -retries 5 -base 200ms -cap 10s`; package `bench/storm`, everyday.go): one client (one RoundTripper) as a newcomer writes it, "+
		"against a loopback server, each system against a fresh one. The httpretry variants draw their jitter from one seeded stream per client, the same in each, so that they differ only by what is turned off (the peers draw their own). Success: logical requests that finally got a 200. "+
		"Attempts per call or per request: attempts at the server ÷ logical requests. Attempts by call: each call's attempts, in order. "+
		"Last done after recovery: from the host's return until the last request ended (negative when every request gave up before). "+
		"Attempts while down: attempts the host answered while down. Last done after arrivals end: from the end of new arrivals until the last request ended. Early retries: attempts that arrived before the date the server's latest "+
		"Retry-After to that request named. The retry-after-herd table's other columns are the storm table's.\n\n")
	for _, r := range everydayRuns() {
		if err := runStorm(md, r, systems, dir, rel); err != nil {
			return err
		}
	}
	return nil
}
