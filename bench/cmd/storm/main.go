// Command storm runs the retry-storm simulator: by default the scenario of
// storm.Default for every system, printing the table and writing a CSV of
// every 100 ms window and a chart to -out. It is what `make storm` runs,
// from the bench directory.
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
	sc := storm.Default()
	smoke := flag.Bool("smoke", false, "a run of a few seconds for CI: a small fleet and a short outage")
	mode := flag.String("mode", string(sc.Mode), "open, closed, collapse or random")
	flag.IntVar(&sc.Clients, "clients", sc.Clients, "client instances, each with its own transport and pool")
	flag.Float64Var(&sc.Rate, "rate", sc.Rate, "logical requests per second, all clients together")
	flag.Float64Var(&sc.Capacity, "capacity", sc.Capacity, "requests per second the server serves")
	flag.DurationVar(&sc.OutageStart, "outage-start", sc.OutageStart, "start of the full outage")
	flag.DurationVar(&sc.OutageEnd, "outage-end", sc.OutageEnd, "end of the full outage")
	flag.DurationVar(&sc.Duration, "duration", sc.Duration, "how long new requests arrive")
	flag.IntVar(&sc.Params.MaxRetries, "retries", sc.Params.MaxRetries, "retries after the first attempt")
	flag.DurationVar(&sc.Params.BaseDelay, "base", sc.Params.BaseDelay, "backoff base delay")
	flag.DurationVar(&sc.Params.MaxDelay, "cap", sc.Params.MaxDelay, "backoff cap")
	flag.Float64Var(&sc.FailRate, "fail-rate", sc.FailRate, "share of attempts failed at random in random mode; 0 means 5%")
	flag.Uint64Var(&sc.Seed, "seed", sc.Seed, "seed of the arrivals")
	share := flag.Float64("release-share", 0, "when positive, run httpretry with this HostGate.ReleaseShare (for a sweep)")
	reruns := flag.Int("reruns", 0, "how often to run again a system whose run fell over 50 ms behind schedule (a busy machine)")
	systems := flag.String("systems", "", "comma-separated system names; empty means all but the variants of httpretry: "+names())
	out := flag.String("out", "out", "directory for storm.csv and storm.png; empty writes neither")
	flag.Parse()

	if *smoke {
		sc = storm.Smoke()
	}
	sc.Reruns = *reruns
	sc.Mode = storm.Mode(*mode)
	if sc.Mode == storm.Random && !isSet("outage-start") && !isSet("outage-end") {
		sc.OutageStart, sc.OutageEnd = 0, 0 // random failures alone
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

// write saves the CSV and the chart into dir.
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
				tr.HostGate.ReleaseShare = share
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
