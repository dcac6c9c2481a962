// Command report runs the side-by-side benchmarks, the storm scenarios and
// the everyday single-client ones, and writes bench/RESULTS.md with its
// charts. It is what `make bench`
// runs, from the bench directory.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/httpretry/httpretry/bench"
)

func main() {
	if name := os.Getenv(envBigSystem); name != "" {
		if err := bigChild(name, os.Getenv(envBigURL)); err != nil {
			fmt.Fprintln(os.Stderr, "report:", err)
			os.Exit(1)
		}
		return
	}
	testing.Init() // registers test.benchtime, which testing.Benchmark reads
	rounds := flag.Int("rounds", 11, "interleaved rounds of the success-path benchmarks")
	benchtime := flag.String("benchtime", "100ms", "time per system per round")
	out := flag.String("out", "RESULTS.md", "the report to write")
	charts := flag.String("charts", "results", "directory for the storm charts and CSVs, relative to the report")
	skipStorm := flag.Bool("no-storm", false, "skip the storm and everyday scenarios")
	flag.Parse()
	if err := flag.Set("test.benchtime", *benchtime); err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(2)
	}
	if err := run(*rounds, *benchtime, *out, *charts, !*skipStorm); err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
}

// run measures everything and writes the report.
func run(rounds int, benchtime, out, charts string, storms bool) error {
	var md bytes.Buffer
	writeHeader(&md, rounds, benchtime)
	big, err := runBigBodies(bench.Systems)
	if err != nil {
		return err
	}
	cases := runRounds(bench.Systems, rounds)
	writeCases(&md, cases)
	writeBig(&md, big)
	if storms {
		dir := filepath.Join(filepath.Dir(out), charts)
		if err := runStorms(&md, bench.Systems, dir, charts); err != nil {
			return err
		}
		if err := runEveryday(&md, bench.Systems, dir, charts); err != nil {
			return err
		}
	}
	return os.WriteFile(out, md.Bytes(), 0o644)
}
