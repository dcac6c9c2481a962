package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/httpretry/httpretry"
)

// call is one logical request of the demo.
type call struct {
	name   string // as printed
	method string
	path   string
	body   string
	key    string // Idempotency-Key, when set
}

var calls = []call{
	{name: "GET /catalog", method: http.MethodGet, path: "/catalog"},
	{name: "PUT /carts/7", method: http.MethodPut, path: "/carts/7", body: `{"sku":"tea-42","qty":2}`},
	{name: "POST /orders (Idempotency-Key)", method: http.MethodPost, path: "/orders", body: `{"cart":7}`, key: "order-7-a1"},
	{name: "POST /payments (no key)", method: http.MethodPost, path: "/payments", body: `{"order":7}`},
}

// outcome is what one logical request went through. It is written only by
// the goroutine that sends the request: the hooks run on the goroutine that
// called RoundTrip, so it needs no lock.
type outcome struct {
	log      bytes.Buffer
	logger   *slog.Logger
	attempts int
	wait     time.Duration        // total of the waits OnRetry reported
	elapsed  time.Duration        // the whole logical request, as the caller saw it
	final    string               // "200 OK" or "error: <reason>"
	ok       bool                 // final is a 2xx response
	stop     httpretry.StopReason // why it gave up on a retryable outcome
	reason   string               // and the classifier's reason for that outcome
}

// outcomeKey is the context key of a request's *outcome, which is how the
// hooks, given the caller's request, find the request's own logger.
type outcomeKey struct{}

func outcomeOf(req *http.Request) *outcome {
	return req.Context().Value(outcomeKey{}).(*outcome)
}

// newTransport returns httpretry's Transport with the given policy and hooks
// that log each retry and each give-up to the request's own logger.
func newTransport(policy httpretry.Policy) *httpretry.Transport {
	return &httpretry.Transport{
		Policy: policy,
		OnRetry: func(e httpretry.RetryEvent) {
			o := outcomeOf(e.Request)
			o.attempts = e.Attempt + 1
			o.wait += e.Wait
			// OnRetry comes after the wait, just before the retry is sent:
			// the wait is what it took, its held part what storm control
			// added to the request's own backoff (see StormControl).
			attrs := eventAttrs(e, slog.Duration("wait", e.Wait.Round(time.Millisecond)))
			if held := e.Held.Round(time.Millisecond); held > 0 { // a hold of microseconds (another request's Retry-After date) rounds away
				attrs = append(attrs, slog.Duration("held", held))
			}
			o.logger.Info("retry", attrs...)
		},
		OnGiveUp: func(e httpretry.RetryEvent) {
			o := outcomeOf(e.Request)
			o.attempts = e.Attempt
			o.stop, o.reason = e.Stop, e.Reason
			o.logger.Info("give up", eventAttrs(e, slog.String("stop", e.Stop.String()))...)
		},
	}
}

// eventAttrs describes a failed attempt: its number, outcome and the
// classifier's reason, plus the server's Retry-After when it sent one.
func eventAttrs(e httpretry.RetryEvent, last slog.Attr) []any {
	attrs := []any{slog.Int("attempt", e.Attempt), slog.String("outcome", describe(e.Response)), slog.String("reason", e.Reason)}
	if e.Response != nil {
		if ra := e.Response.Header.Get("Retry-After"); ra != "" {
			attrs = append(attrs, slog.String("retry_after", ra+"s"))
		}
	}
	return append(attrs, last)
}

// describe names an attempt's outcome: its status, or "error" when the
// attempt got no response (the reason then says which error).
func describe(resp *http.Response) string {
	if resp != nil {
		return resp.Status
	}
	return "error"
}

// sendAll starts a fresh flaky server, sends every call to it at once
// through a Transport with the given policy, and returns their outcomes.
func sendAll(cfg config, policy httpretry.Policy) []*outcome {
	srv := newFlakyServer(cfg.retryAfter)
	defer srv.Close()
	tr := newTransport(policy)
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}

	outs := make([]*outcome, len(calls))
	var wg sync.WaitGroup
	for i, c := range calls {
		o := &outcome{attempts: 1}
		o.logger = slog.New(newLineHandler(&o.log))
		outs[i] = o
		wg.Go(func() { send(client, srv.URL, c, o) })
	}
	wg.Wait()
	return outs
}

// send makes one logical request and records how it ended.
func send(client *http.Client, base string, c call, o *outcome) {
	ctx := context.WithValue(context.Background(), outcomeKey{}, o)
	var body io.Reader
	if c.body != "" {
		body = strings.NewReader(c.body)
	}
	req, err := http.NewRequestWithContext(ctx, c.method, base+c.path, body)
	if err != nil {
		o.final = "error: " + err.Error()
		return
	}
	if c.key != "" {
		req.Header.Set("Idempotency-Key", c.key)
	}
	start := time.Now()
	resp, err := client.Do(req)
	o.elapsed = time.Since(start)
	if err != nil {
		o.final = "error: " + o.errorReason(err)
		if o.stop == httpretry.StopNone {
			o.logger.Info("done", slog.Int("attempt", o.attempts), slog.String("outcome", o.final))
		}
		return
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(io.LimitReader(resp.Body, 64))
	o.final = resp.Status
	o.ok = resp.StatusCode/100 == 2
	if o.stop == httpretry.StopNone {
		o.logger.Info("done", slog.Int("attempt", o.attempts), slog.String("outcome", o.final), slog.String("body", string(got)))
	}
}

// errorReason shortens a transport error for the table: the classifier's
// reason when the Transport gave up on it, else the error itself.
func (o *outcome) errorReason(err error) string {
	if o.reason != "" {
		return o.reason
	}
	return err.Error()
}
