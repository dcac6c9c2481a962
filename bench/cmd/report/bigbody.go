package main

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"

	"github.com/hashicorp/go-cleanhttp"
	"github.com/httpretry/httpretry/bench"
)

// Environment variables of a child process that measures one large POST.
const (
	envBigSystem = "HTTPRETRY_BENCH_BIG_SYSTEM"
	envBigURL    = "HTTPRETRY_BENCH_BIG_URL"
)

// bigResult is one system's large-body measurement.
type bigResult struct {
	name  string
	alloc bench.Alloc
}

// runBigBodies measures one 64 MiB POST per system, each in a fresh
// process of this same binary, so that no earlier run's heap or pooled
// buffers blur the numbers. The server runs here, in the parent, so the
// child's numbers are the client's alone.
func runBigBodies(systems []bench.System) ([]bigResult, error) {
	srv := httptest.NewServer(bench.DiscardServer)
	defer srv.Close()
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	var out []bigResult
	for _, s := range systems {
		cmd := exec.Command(self)
		cmd.Env = append(os.Environ(), envBigSystem+"="+s.Name, envBigURL+"="+srv.URL)
		cmd.Stderr = os.Stderr
		stdout, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("large body, %s: %w", s.Name, err)
		}
		var a bench.Alloc
		if err := json.Unmarshal(stdout, &a); err != nil {
			return nil, fmt.Errorf("large body, %s: %w", s.Name, err)
		}
		out = append(out, bigResult{name: s.Name, alloc: a})
		fmt.Fprintf(os.Stderr, "report: large body %s: %d B\n", s.Name, a.Total)
	}
	return out, nil
}

// bigChild is the child process's whole run: one POST, its numbers as JSON
// on stdout.
func bigChild(name, url string) error {
	systems, ok := bench.Lookup([]string{name})
	if !ok {
		return fmt.Errorf("unknown system %q", name)
	}
	rt := systems[0].New(cleanhttp.DefaultPooledTransport(), bench.DefaultParams)
	a, err := bench.MeasureAlloc(func() error { return bench.PostBig(rt, url, bench.BigBodySize) })
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(a)
}
