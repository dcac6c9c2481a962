// Command otel stacks httpretry with OpenTelemetry's otelhttp transport in
// both orders, and both at once, and prints the client spans each stack
// records for the same logical request, which fails twice before it
// succeeds:
//
//   - otelhttp.NewTransport(&httpretry.Transport{...}): one span per logical
//     request, its retries as span events added by OnRetry;
//   - &httpretry.Transport{Base: otelhttp.NewTransport(...)}: one span per
//     attempt, each retry's tagged with http.request.resend_count;
//   - both: a logical span with a child span per attempt.
//
// Spans are kept by the OpenTelemetry SDK's in-memory recorder, so nothing
// leaves the machine.
//
//	cd examples && go run ./otel
package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/httpretry/httpretry"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "otel:", err)
		os.Exit(1)
	}
}

// stack builds a client transport from the base that reaches the server
// and the tracer provider that records the spans.
type stack struct {
	name  string
	build func(base http.RoundTripper, tp trace.TracerProvider) http.RoundTripper
}

var stacks = []stack{
	{"otelhttp.NewTransport(&httpretry.Transport{...}): one span per logical request", perRequest},
	{"&httpretry.Transport{Base: otelhttp.NewTransport(...)}: one span per attempt", perAttempt},
	{"both: a logical span with a child span per attempt", nested},
}

func perRequest(base http.RoundTripper, tp trace.TracerProvider) http.RoundTripper {
	return otelhttp.NewTransport(retrying(base), otelhttp.WithTracerProvider(tp))
}

func perAttempt(base http.RoundTripper, tp trace.TracerProvider) http.RoundTripper {
	return retrying(otelhttp.NewTransport(resendCount{base}, otelhttp.WithTracerProvider(tp)))
}

func nested(base http.RoundTripper, tp trace.TracerProvider) http.RoundTripper {
	return perRequest(otelhttp.NewTransport(resendCount{base}, otelhttp.WithTracerProvider(tp)), tp)
}

// retrying is httpretry without waits (the point here is the spans), whose
// OnRetry records each retry as an event on the span of the logical
// request, when a tracing transport outside it started one.
func retrying(base http.RoundTripper) *httpretry.Transport {
	return &httpretry.Transport{
		Base:   base,
		Policy: httpretry.Policy{BaseDelay: -1},
		OnRetry: func(e httpretry.RetryEvent) {
			trace.SpanFromContext(e.Request.Context()).AddEvent("retry", trace.WithAttributes(
				attribute.Int("attempt", e.Attempt),
				attribute.String("reason", e.Reason),
				attribute.String("wait", e.Wait.String()),
			))
		},
	}
}

// resendCount tags the span of each retry with http.request.resend_count.
// otelhttp does not know of retries made outside it, so this sits inside
// otelhttp's transport, where the attempt's span is in the request's context
// along with httpretry's attempt number.
type resendCount struct{ base http.RoundTripper }

// RoundTrip implements http.RoundTripper.
func (t resendCount) RoundTrip(req *http.Request) (*http.Response, error) {
	if n := httpretry.Attempt(req.Context()); n > 1 {
		trace.SpanFromContext(req.Context()).SetAttributes(semconv.HTTPRequestResendCount(n - 1))
	}
	return t.base.RoundTrip(req)
}

// run sends one logical request through each stack and prints its spans.
func run(w io.Writer) error {
	for _, s := range stacks {
		spans, err := record(s)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "== %s\n%d span(s):\n", s.name, len(spans))
		printSpans(w, spans)
		fmt.Fprintln(w)
	}
	return nil
}

// record sends GET /items through the stack to a server that fails twice,
// and returns the spans recorded, in the order they ended.
func record(s stack) ([]sdktrace.ReadOnlySpan, error) {
	srv := newFlakyServer(2)
	defer srv.Close() // also closes the idle connections of srv.Client()

	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())

	client := &http.Client{Transport: s.build(srv.Client().Transport, tp)}
	resp, err := client.Get(srv.URL + "/items")
	if err != nil {
		return nil, err
	}
	// otelhttp ends a span when its response body is read to EOF or closed.
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: got %s", s.name, resp.Status)
	}
	return rec.Ended(), nil
}

// newFlakyServer starts a loopback server that answers 503 to its first
// fails requests and 200 after that.
func newFlakyServer(fails int) *httptest.Server {
	var mu sync.Mutex
	n := 0
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n++
		failed := n <= fails
		mu.Unlock()
		if failed {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, "ok")
	}))
}

// printSpans writes one line per span, children indented under their
// parent, with the attributes that tell the stacks apart.
func printSpans(w io.Writer, spans []sdktrace.ReadOnlySpan) {
	ids := map[trace.SpanID]bool{}
	for _, s := range spans {
		ids[s.SpanContext().SpanID()] = true
	}
	for _, s := range spans {
		indent := "  "
		if ids[s.Parent().SpanID()] {
			indent = "      " // a child of a span printed here
		}
		fmt.Fprintf(w, "%s%s\n", indent, describe(s))
	}
}

// describe is a span's name, status, resend count and events.
func describe(s sdktrace.ReadOnlySpan) string {
	var b strings.Builder
	fmt.Fprintf(&b, "span %q", s.Name())
	for _, kv := range s.Attributes() {
		switch kv.Key {
		case semconv.HTTPResponseStatusCodeKey, semconv.HTTPRequestResendCountKey:
			fmt.Fprintf(&b, " %s=%s", kv.Key, kv.Value.String())
		}
	}
	for _, e := range s.Events() {
		fmt.Fprintf(&b, "\n        event %q", e.Name)
		for _, kv := range e.Attributes {
			v := kv.Value.String()
			if kv.Value.Type() == attribute.STRING {
				v = strconv.Quote(v)
			}
			fmt.Fprintf(&b, " %s=%s", kv.Key, v)
		}
	}
	return b.String()
}
