package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/httpretry/httpretry"
)

// hang answers only when the client gives up on the request, as a server
// stuck on a lock does.
func hang(w http.ResponseWriter, r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-time.After(10 * time.Second):
	}
}

func attemptTimeoutSection(w io.Writer) error {
	fmt.Fprintln(w, "== 3. AttemptTimeout: a hung attempt is cut short after 100ms and retried")
	srv := scripted(map[string][]http.HandlerFunc{
		"GET /quote": {hang, status(200, `{"price":42}`)},
	})
	defer srv.Close()
	tr := withHooks(w, &httpretry.Transport{
		Policy:         httpretry.Policy{BaseDelay: -1},
		AttemptTimeout: 100 * time.Millisecond,
	})
	defer tr.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodGet, srv.URL+"/quote", nil)
	if err != nil {
		return err
	}
	_, err = do(w, &http.Client{Transport: tr}, req)
	return err
}

// deadline is the request deadline of section 4.
const deadline = 250 * time.Millisecond

func deadlineSection(w io.Writer) error {
	fmt.Fprintf(w, "== 4. Deadline: a %v context deadline, backoff 100ms, 200ms, 400ms (JitterNone)\n", deadline)
	srv := scripted(map[string][]http.HandlerFunc{
		"GET /status": {status(503, `{"error":"down"}`)},
	})
	defer srv.Close()
	tr := withHooks(w, &httpretry.Transport{
		Policy: httpretry.Policy{BaseDelay: 100 * time.Millisecond, Jitter: httpretry.JitterNone},
	})
	defer tr.CloseIdleConnections()

	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/status", nil)
	if err != nil {
		return err
	}
	start := time.Now()
	if _, err := do(w, &http.Client{Transport: tr}, req); err != nil {
		return err
	}
	// The second wait (200ms) would end past the deadline, so the 503
	// returns after the first wait, with time left for the caller.
	fmt.Fprintf(w, "  returned before the deadline: %v\n", time.Since(start) < deadline)
	return nil
}
