package main

import (
	"fmt"
	"os"
	"slices"
	"testing"

	"github.com/httpretry/httpretry/bench"
)

// caseResult is one case's numbers for every system, over all rounds.
type caseResult struct {
	name    string
	systems []systemResult
}

// systemResult is one system's numbers in one case.
type systemResult struct {
	name   string
	ns     []float64 // ns/op per round
	ratio  []float64 // ns/op over bare's in the same round
	bytes  []float64 // B/op per round
	allocs []float64 // allocs/op per round
}

// runRounds measures every case for every system, rounds times. Each
// round measures every system once, in an order rotated from round to
// round, so that a noisy stretch of the machine hits all of them alike;
// ratios are taken within a round.
func runRounds(systems []bench.System, rounds int) []caseResult {
	var out []caseResult
	for _, c := range bench.Cases {
		env := c.Setup()
		cr := caseResult{name: c.Name, systems: make([]systemResult, len(systems))}
		for i, s := range systems {
			cr.systems[i].name = s.Name
		}
		for r := range rounds {
			ns := make([]float64, len(systems))
			for k := range systems {
				i := (k + r) % len(systems)
				rt := systems[i].New(env.Base, bench.DefaultParams)
				res := testing.Benchmark(bench.Loop(env.Op, rt))
				if res.N == 0 {
					fmt.Fprintf(os.Stderr, "report: %s / %s failed\n", c.Name, systems[i].Name)
					os.Exit(1)
				}
				sr := &cr.systems[i]
				ns[i] = float64(res.NsPerOp())
				sr.ns = append(sr.ns, ns[i])
				sr.bytes = append(sr.bytes, float64(res.AllocedBytesPerOp()))
				sr.allocs = append(sr.allocs, float64(res.AllocsPerOp()))
			}
			for i := range systems {
				cr.systems[i].ratio = append(cr.systems[i].ratio, ns[i]/ns[0])
			}
			fmt.Fprintf(os.Stderr, "report: %s round %d/%d\n", c.Name, r+1, rounds)
		}
		env.Stop()
		out = append(out, cr)
	}
	return out
}

// quantile returns the q-quantile of xs, interpolating between ranks.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	pos := q * float64(len(s)-1)
	i := int(pos)
	if i+1 >= len(s) {
		return s[len(s)-1]
	}
	return s[i] + (pos-float64(i))*(s[i+1]-s[i])
}

// median returns the middle value of xs (the mean of the two middle ones
// for an even count), 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	m := len(s) / 2
	if len(s)%2 == 1 {
		return s[m]
	}
	return (s[m-1] + s[m]) / 2
}
