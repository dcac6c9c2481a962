// Command demo shows httpretry riding out a short blip of a flaky server.
//
// It sends a handful of concurrent requests (a GET, a PUT with a body, a
// POST with an Idempotency-Key and one without) to a local server that
// answers with 503s, a 429 and dropped connections before it recovers. It
// prints every attempt of every logical request, as logged by the OnRetry
// and OnGiveUp hooks through log/slog, and a summary table; then it sends the
// same requests without retries to a server going through the same blip.
//
//	cd examples && go run ./demo
package main

import (
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/httpretry/httpretry"
)

func main() {
	if err := run(os.Stdout, config{retryAfter: 1}); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// config holds what a test shortens so that it need not sleep.
type config struct {
	policy     httpretry.Policy // the retrying client's policy; zero is the default
	retryAfter int              // seconds the server asks for in its Retry-After
}

// run sends the demo's requests with and without retries and writes the
// report to w.
func run(w io.Writer, cfg config) error {
	fmt.Fprintf(w, "A flaky server goes through a short blip: 503s (with and without Retry-After: %d),\n", cfg.retryAfter)
	fmt.Fprintln(w, "a 429 and dropped connections, then it recovers. Each endpoint sees the same blip on every run.")
	fmt.Fprintln(w)

	fmt.Fprintf(w, "== With httpretry (default policy), %d requests at once\n\n", len(calls))
	start := time.Now()
	with := sendAll(cfg, cfg.policy)
	for i, c := range calls {
		fmt.Fprintln(w, c.name)
		w.Write(with[i].log.Bytes())
	}
	fmt.Fprintln(w)
	if err := table(w, with); err != nil {
		return err
	}
	fmt.Fprintf(w, "(all done in %v)\n\n", time.Since(start).Round(10*time.Millisecond))

	fmt.Fprintln(w, "== Without retries (Policy{MaxRetries: httpretry.NoRetries}), same blip")
	fmt.Fprintln(w)
	without := sendAll(cfg, httpretry.Policy{MaxRetries: httpretry.NoRetries})
	if err := table(w, without); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nSucceeded: %d of %d with httpretry, %d of %d without.\n",
		succeeded(with), len(calls), succeeded(without), len(calls))
	return nil
}

// table writes the summary: one row per logical request.
func table(w io.Writer, outs []*outcome) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "REQUEST\tATTEMPTS\tTOTAL WAIT\tELAPSED\tFINAL\tSTOPPED BECAUSE")
	for i, o := range outs {
		stop := "-"
		if o.stop != httpretry.StopNone {
			stop = o.stop.String()
		}
		fmt.Fprintf(tw, "%s\t%d\t%v\t%v\t%s\t%s\n", calls[i].name, o.attempts, o.wait.Round(time.Millisecond), o.elapsed.Round(time.Millisecond), o.final, stop)
	}
	return tw.Flush()
}

// succeeded counts the requests that ended in a 2xx response.
func succeeded(outs []*outcome) int {
	n := 0
	for _, o := range outs {
		if o.ok {
			n++
		}
	}
	return n
}
