// Command custom tunes httpretry beyond its defaults, one knob per section:
//
//  1. a Classifier that retries a 500 on GET only and a 409 whose JSON body
//     says the failure is transient, falling back to DefaultClassifier, and
//     leaving the body whole for the caller;
//  2. the jitter kinds side by side, and a client with equal jitter and a
//     seeded Random, so that its waits are reproducible;
//  3. an AttemptTimeout that cuts a hung attempt short and retries it;
//  4. a request deadline that stops retries early: a wait that would end
//     after it is not started, and the last response returns at once.
//
// Run it with:
//
//	cd examples && go run ./custom
package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"time"

	"github.com/httpretry/httpretry"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "custom:", err)
		os.Exit(1)
	}
}

// run writes every section to w.
func run(w io.Writer) error {
	for _, section := range []func(io.Writer) error{classifierSection, jitterSection, attemptTimeoutSection, deadlineSection} {
		if err := section(w); err != nil {
			return err
		}
		fmt.Fprintln(w)
	}
	return nil
}

// withHooks sets OnRetry and OnGiveUp on t to print each retry and give-up.
func withHooks(w io.Writer, t *httpretry.Transport) *httpretry.Transport {
	t.OnRetry = func(e httpretry.RetryEvent) {
		fmt.Fprintf(w, "  %s %s: attempt %d failed (%s), retried after %v\n", e.Request.Method, e.Request.URL.Path, e.Attempt, e.Reason, e.Wait.Round(time.Microsecond))
	}
	t.OnGiveUp = func(e httpretry.RetryEvent) {
		fmt.Fprintf(w, "  %s %s: attempt %d failed (%s), giving up: %s\n", e.Request.Method, e.Request.URL.Path, e.Attempt, e.Reason, e.Stop)
	}
	return t
}

// do sends a request and prints its final status and body.
func do(w io.Writer, client *http.Client, req *http.Request) (*http.Response, error) {
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 256))
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(w, "  %s %s -> %s %s\n", req.Method, req.URL.Path, resp.Status, body)
	return resp, nil
}

// scripted starts a loopback server that answers each path's arrivals in
// turn with the handlers in script[path], and with the last one once the
// script runs out.
func scripted(script map[string][]http.HandlerFunc) *httptest.Server {
	var mu sync.Mutex
	arrivals := map[string]int{}
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Method + " " + r.URL.Path
		mu.Lock()
		n := arrivals[key]
		arrivals[key]++
		mu.Unlock()
		steps := script[key]
		if len(steps) == 0 {
			http.NotFound(w, r)
			return
		}
		steps[min(n, len(steps)-1)](w, r)
	}))
}

// status answers with code and a body.
func status(code int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		io.WriteString(w, body)
	}
}
