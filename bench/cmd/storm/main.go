// Command storm runs the retry-storm simulator: by default the scenario of
// storm.Default for every system, printing the table and writing a CSV of
// every 100 ms window and a chart to -out. It is what `make storm` runs,
// from the bench directory. -mode picks another scenario, such as the
// everyday single-client ones:
//
//	go run ./cmd/storm -mode sequential
//	go run ./cmd/storm -mode burst
//	go run ./cmd/storm -mode random-closed -fail-rate 0.3
//	go run ./cmd/storm -mode retry-after-long
//	go run ./cmd/storm -mode retry-after-herd
//	go run ./cmd/storm -mode flapping
//	go run ./cmd/storm -mode burst -service-time 200ms
package main

import (
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/httpretry/httpretry"
	"github.com/httpretry/httpretry/bench"
	"github.com/httpretry/httpretry/bench/storm"
)

func main() {
	// Flags are bound to f, whose values (the open mode's) are what -help
	// shows; a flag given on the command line overrides the chosen mode's
	// preset (storm.Preset), the others leave it alone.
	f := storm.Default()
	smoke := flag.Bool("smoke", false, "a run of a few seconds for CI: a small fleet and a short outage")
	mode := flag.String("mode", string(f.Mode), "one of: "+modes())
	flag.IntVar(&f.Clients, "clients", f.Clients, "client instances, each with its own transport and pool")
	flag.IntVar(&f.Workers, "workers", f.Workers, "goroutines sharing the one client (burst, random-closed, sequential)")
	flag.IntVar(&f.Calls, "calls", f.Calls, "calls in a row (sequential, retry-after-long)")
	flag.DurationVar(&f.Stagger, "stagger", f.Stagger, "burst: start worker i i times this after the first (zero: together)")
	flag.Float64Var(&f.Rate, "rate", f.Rate, "logical requests per second, all clients together")
	flag.Float64Var(&f.Capacity, "capacity", f.Capacity, "requests per second the server serves; 0 means no limit (single-client modes)")
	flag.DurationVar(&f.OutageStart, "outage-start", f.OutageStart, "start of the full outage")
	flag.DurationVar(&f.OutageEnd, "outage-end", f.OutageEnd, "end of the full outage")
	flag.DurationVar(&f.Duration, "duration", f.Duration, "how long new requests arrive")
	flag.DurationVar(&f.RequestTimeout, "timeout", f.RequestTimeout, "every logical request's deadline")
	flag.DurationVar(&f.FlapPeriod, "flap", f.FlapPeriod, "when positive, the host is also down in every other interval this long, the first included, until -duration (flapping)")
	flag.DurationVar(&f.ServiceTime, "service-time", f.ServiceTime, "how long the server takes over each attempt before it answers (burst -service-time 200ms is the slow burst)")
	flag.DurationVar(&f.RetryAfter, "retry-after", f.RetryAfter, "Retry-After sent (whole seconds): on retry-after-long's 429s; on retry-after-herd's 503s, 0 meaning until the outage's end")
	flag.BoolVar(&f.ThrottleShed, "throttle-shed", f.ThrottleShed, "retry-after-herd: answer what exceeds the capacity with 429 and Retry-After (-retry-after, a second at least), as a quota does")
	flag.IntVar(&f.Params.MaxRetries, "retries", f.Params.MaxRetries, "retries after the first attempt")
	flag.DurationVar(&f.Params.BaseDelay, "base", f.Params.BaseDelay, "backoff base delay")
	flag.DurationVar(&f.Params.MaxDelay, "cap", f.Params.MaxDelay, "backoff cap")
	flag.Float64Var(&f.FailRate, "fail-rate", f.FailRate, "share of attempts failed at random in random and random-closed modes; 0 means 5%")
	flag.Uint64Var(&f.Seed, "seed", f.Seed, "seed of the arrivals and of httpretry's jitter")
	share := flag.Float64("release-share", 0, "when positive, run httpretry with this StormControl.ReleaseShare (for a sweep)")
	reruns := flag.Int("reruns", -1, "how often to run again a system whose run fell over 50 ms behind schedule (a busy machine); -1: the scenario's own")
	systems := flag.String("systems", "", "comma-separated system names; empty means all but the variants of httpretry: "+names())
	out := flag.String("out", "out", "directory for storm.csv and storm.png (the latter in modes with a chart); empty writes neither")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "Usage of storm: each mode starts from its preset; a flag given overrides it "+
			"(the defaults shown are the open mode's).\n")
		flag.PrintDefaults()
	}
	flag.Parse()

	sc, err := scenario(storm.Mode(*mode), f, *smoke)
	if err != nil {
		fail(err)
	}
	if *reruns >= 0 { // 0 would override the presets' reruns, which make bench keeps
		sc.Reruns = *reruns
	}
	var list []bench.System
	for _, s := range bench.Systems {
		if !s.Variant {
			list = append(list, s)
		}
	}
	if *systems != "" {
		var ok bool
		if list, ok = bench.Lookup(strings.Split(*systems, ",")); !ok {
			fail(fmt.Errorf("unknown system in %q; known: %s", *systems, names()))
		}
	}
	if *share > 0 {
		list = withReleaseShare(list, *share)
	}
	res, err := storm.Run(sc, list)
	if err != nil {
		fail(err)
	}
	storm.Describe(os.Stdout, sc)
	fmt.Println()
	storm.WriteTable(os.Stdout, res)
	if *smoke {
		if err := sane(res); err != nil {
			fail(err)
		}
		return
	}
	if *out != "" {
		if err := write(*out, res); err != nil {
			fail(err)
		}
	}
}

// scenario is the mode's preset with the flags given on the command line
// applied over it; the smoke run keeps its own numbers whatever the flags
// but the mode.
func scenario(mode storm.Mode, f storm.Scenario, smoke bool) (storm.Scenario, error) {
	if smoke {
		sc := storm.Smoke()
		sc.Mode = mode
		if mode == storm.Random && !isSet("outage-start") && !isSet("outage-end") {
			sc.OutageStart, sc.OutageEnd = 0, 0 // random failures alone
		}
		return sc, nil
	}
	sc, err := storm.Preset(mode, f.FailRate)
	if err != nil {
		return sc, err
	}
	flag.Visit(func(fl *flag.Flag) {
		if set := overrides[fl.Name]; set != nil {
			set(&sc, f)
		}
	})
	return sc, nil
}

// overrides copy one flag's value from the flags' scenario onto the preset.
var overrides = map[string]func(dst *storm.Scenario, f storm.Scenario){
	"clients":       func(d *storm.Scenario, f storm.Scenario) { d.Clients = f.Clients },
	"workers":       func(d *storm.Scenario, f storm.Scenario) { d.Workers = f.Workers },
	"calls":         func(d *storm.Scenario, f storm.Scenario) { d.Calls = f.Calls },
	"stagger":       func(d *storm.Scenario, f storm.Scenario) { d.Stagger = f.Stagger },
	"rate":          func(d *storm.Scenario, f storm.Scenario) { d.Rate = f.Rate },
	"capacity":      func(d *storm.Scenario, f storm.Scenario) { d.Capacity = f.Capacity },
	"outage-start":  func(d *storm.Scenario, f storm.Scenario) { d.OutageStart = f.OutageStart },
	"outage-end":    func(d *storm.Scenario, f storm.Scenario) { d.OutageEnd = f.OutageEnd },
	"duration":      func(d *storm.Scenario, f storm.Scenario) { d.Duration = f.Duration },
	"timeout":       func(d *storm.Scenario, f storm.Scenario) { d.RequestTimeout = f.RequestTimeout },
	"flap":          func(d *storm.Scenario, f storm.Scenario) { d.FlapPeriod = f.FlapPeriod },
	"service-time":  func(d *storm.Scenario, f storm.Scenario) { d.ServiceTime = f.ServiceTime },
	"retry-after":   func(d *storm.Scenario, f storm.Scenario) { d.RetryAfter = f.RetryAfter },
	"throttle-shed": func(d *storm.Scenario, f storm.Scenario) { d.ThrottleShed = f.ThrottleShed },
	"retries":       func(d *storm.Scenario, f storm.Scenario) { d.Params.MaxRetries = f.Params.MaxRetries },
	"base":          func(d *storm.Scenario, f storm.Scenario) { d.Params.BaseDelay = f.Params.BaseDelay },
	"cap":           func(d *storm.Scenario, f storm.Scenario) { d.Params.MaxDelay = f.Params.MaxDelay },
	"fail-rate":     func(d *storm.Scenario, f storm.Scenario) { d.FailRate = f.FailRate },
	"seed":          func(d *storm.Scenario, f storm.Scenario) { d.Seed = f.Seed },
}

// write saves the CSV and, in the modes that have one, the chart into dir.
func write(dir string, res storm.Results) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "storm.csv"))
	if err != nil {
		return err
	}
	if err := storm.WriteCSV(f, res); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if !res.Scenario.Charted() {
		fmt.Printf("\nwrote %s\n", filepath.Join(dir, "storm.csv"))
		return nil
	}
	png, err := os.Create(filepath.Join(dir, "storm.png"))
	if err != nil {
		return err
	}
	if err := storm.WriteChart(png, res); err != nil {
		png.Close()
		return err
	}
	if err := png.Close(); err != nil {
		return err
	}
	fmt.Printf("\nwrote %s and %s\n", filepath.Join(dir, "storm.csv"), filepath.Join(dir, "storm.png"))
	return nil
}

// sane checks what any correct run shows, so that the smoke run fails
// when the simulator breaks: every system sent requests and got some
// through, and a system without retries sent each request once.
func sane(res storm.Results) error {
	for _, s := range res.Systems {
		m := s.Metrics
		switch {
		case m.Requests == 0 || m.Success == 0:
			return fmt.Errorf("%s: %d requests, %.0f%% success", s.Name, m.Requests, 100*m.Success)
		case s.Name == "bare" && m.Attempts != m.Requests:
			return fmt.Errorf("bare: %d attempts for %d requests", m.Attempts, m.Requests)
		}
	}
	return nil
}

// withReleaseShare replaces httpretry in list by httpretry with the given
// ReleaseShare, named after it.
func withReleaseShare(list []bench.System, share float64) []bench.System {
	out := make([]bench.System, 0, len(list))
	for _, s := range list {
		if s.Name == "httpretry" {
			orig := s.New
			s = bench.System{Name: fmt.Sprintf("httpretry (ReleaseShare %.2f)", share), New: func(base http.RoundTripper, p bench.Params) http.RoundTripper {
				tr := orig(base, p).(*httpretry.Transport)
				tr.Storm.ReleaseShare = share
				return tr
			}}
		}
		out = append(out, s)
	}
	return out
}

// isSet reports whether the flag named was given on the command line.
func isSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// modes lists the known modes.
func modes() string {
	var m []string
	for _, x := range storm.Modes {
		m = append(m, string(x))
	}
	return strings.Join(m, ", ")
}

// names lists the known systems.
func names() string {
	var n []string
	for _, s := range bench.Systems {
		n = append(n, s.Name)
	}
	return strings.Join(n, ", ")
}

// fail prints err and exits non-zero.
func fail(err error) {
	fmt.Fprintln(os.Stderr, "storm:", err)
	os.Exit(1)
}
