package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strings"
	"time"
)

// writeHeader writes the title, the date, the versions and the machine.
func writeHeader(w io.Writer, rounds int, benchtime string) {
	fmt.Fprintf(w, "# httpretry benchmarks\n\n")
	fmt.Fprintf(w, "Written by `make bench` (`cd bench && go run ./cmd/report`); do not edit by hand.\n\n")
	fmt.Fprintf(w, "- Date: %s\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(w, "- Go: %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	fmt.Fprintf(w, "- Machine: %d CPUs, %s; shared with other work while it ran, so times are noisy: "+
		"each round measures every system (in a rotated order), and a ratio is taken within a round; "+
		"the tables show medians over %d rounds of %s per measurement.\n", runtime.NumCPU(), cpuModel(), rounds, benchtime)
	fmt.Fprintf(w, "- Modules: %s\n", moduleVersions())
	fmt.Fprintf(w, "- httpretry: the working tree of commit %s\n\n", libraryCommit())
}

// cpuModel returns the CPU's model name, when the system tells it.
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

// libraryCommit is the repository's commit, as git tells it.
func libraryCommit() string {
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

// moduleVersions lists the compared libraries' versions from the build.
func moduleVersions() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	want := map[string]bool{
		"github.com/httpretry/httpretry":        true,
		"github.com/hashicorp/go-retryablehttp": true,
		"github.com/failsafe-go/failsafe-go":    true,
		"github.com/PuerkitoBio/rehttp":         true,
		"gonum.org/v1/plot":                     true,
	}
	var parts []string
	for _, d := range bi.Deps {
		if want[d.Path] {
			v := d.Version
			if d.Replace != nil {
				v = "this repository (" + d.Replace.Path + ")"
			}
			parts = append(parts, fmt.Sprintf("`%s` %s", d.Path, v))
		}
	}
	return strings.Join(parts, ", ")
}

// writeCases writes one table per success-path case.
func writeCases(w io.Writer, results []caseResult) {
	fmt.Fprintf(w, "## Success path\n\n")
	fmt.Fprintf(w, "One logical request that succeeds at once, through each system built on the same base transport "+
		"(`go test -bench` numbers via `testing.Benchmark`). × bare: the median of the per-round ratios of ns/op to bare's, "+
		"with the middle half of the rounds' ratios (25th–75th percentile) beside it to show the noise.\n\n")
	for _, c := range results {
		fmt.Fprintf(w, "### %s\n\n", c.name)
		fmt.Fprintf(w, "| system | ns/op | × bare | middle half | B/op | allocs/op | allocs − bare |\n|---|--:|--:|--:|--:|--:|--:|\n")
		bare := c.systems[0]
		for _, s := range c.systems {
			fmt.Fprintf(w, "| %s | %.0f | %.2f× | %.2f–%.2f | %s | %.0f | %+.0f |\n", s.name, median(s.ns), median(s.ratio),
				quantile(s.ratio, 0.25), quantile(s.ratio, 0.75),
				formatBytes(median(s.bytes)), median(s.allocs), median(s.allocs)-median(bare.allocs))
		}
		fmt.Fprintln(w)
	}
}

// writeBig writes the large-body table.
func writeBig(w io.Writer, results []bigResult) {
	fmt.Fprintf(w, "## Large body\n\n")
	fmt.Fprintf(w, "One POST of 64 MiB from a plain `io.Reader` (no GetBody, no length) to a loopback server, "+
		"succeeding at once; each system measured in a fresh process. Allocated: bytes allocated by the client during the request; "+
		"peak heap: the highest heap in use above the start, sampled every 200 µs.\n\n")
	fmt.Fprintf(w, "| system | allocated | peak heap |\n|---|--:|--:|\n")
	for _, r := range results {
		fmt.Fprintf(w, "| %s | %s | %s |\n", r.name, formatBytes(float64(r.alloc.Total)), formatBytes(float64(r.alloc.Peak)))
	}
	fmt.Fprintln(w)
}

// formatBytes prints a byte count in B, KiB or MiB.
func formatBytes(b float64) string {
	switch {
	case b >= 1<<20:
		return fmt.Sprintf("%.2f MiB", b/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", b/(1<<10))
	}
	return fmt.Sprintf("%.0f B", b)
}
