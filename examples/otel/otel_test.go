package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine outlives them.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// attempt is what one attempt's span must say.
type attempt struct {
	status int64
	resend int64 // -1: no http.request.resend_count, as on a first attempt
}

var attempts = []attempt{{503, -1}, {503, 1}, {200, 2}}

func TestPerRequest(t *testing.T) {
	spans := mustRecord(t, stacks[0], 1)
	checkLogical(t, spans[0])
}

func TestPerAttempt(t *testing.T) {
	spans := mustRecord(t, stacks[1], 3)
	checkAttempts(t, spans)
	for _, s := range spans {
		if s.Parent().IsValid() {
			t.Errorf("attempt span has parent %v, want a root span", s.Parent().SpanID())
		}
	}
}

func TestNested(t *testing.T) {
	spans := mustRecord(t, stacks[2], 4)
	// The attempts end first, each when httpretry or the caller closes its
	// response body; the logical span ends with the caller's close.
	logical := spans[3]
	checkLogical(t, logical)
	checkAttempts(t, spans[:3])
	for i, s := range spans[:3] {
		if s.Parent().SpanID() != logical.SpanContext().SpanID() {
			t.Errorf("attempt %d: parent %v, want the logical span %v", i+1, s.Parent().SpanID(), logical.SpanContext().SpanID())
		}
	}
}

func TestRunPrints(t *testing.T) {
	var b strings.Builder
	if err := run(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	t.Log("\n" + out)
	for _, want := range []string{
		"one span per logical request\n1 span(s):",
		"one span per attempt\n3 span(s):",
		"child span per attempt\n4 span(s):",
		`span "HTTP GET" http.request.resend_count=2 http.response.status_code=200`,
		`event "retry" attempt=2 reason="status 503" wait="0s"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

func mustRecord(t *testing.T, s stack, n int) []sdktrace.ReadOnlySpan {
	t.Helper()
	spans, err := record(s)
	if err != nil {
		t.Fatal(err)
	}
	if len(spans) != n {
		t.Fatalf("%s: %d spans, want %d", s.name, len(spans), n)
	}
	return spans
}

// checkLogical checks the span of the whole logical request: the final
// status, no resend count, and one retry event per failed attempt.
func checkLogical(t *testing.T, s sdktrace.ReadOnlySpan) {
	t.Helper()
	if got := intAttr(s, semconv.HTTPResponseStatusCodeKey); got != 200 {
		t.Errorf("logical span status %d, want 200", got)
	}
	if got := intAttr(s, semconv.HTTPRequestResendCountKey); got != -1 {
		t.Errorf("logical span has resend_count %d, want none", got)
	}
	events := s.Events()
	if len(events) != 2 {
		t.Fatalf("logical span has %d events, want 2 retries", len(events))
	}
	for i, e := range events {
		if e.Name != "retry" || !hasAttr(e.Attributes, attribute.Int("attempt", i+1)) || !hasAttr(e.Attributes, attribute.String("reason", "status 503")) {
			t.Errorf("event %d = %s %v, want retry after attempt %d, status 503", i, e.Name, e.Attributes, i+1)
		}
	}
}

// checkAttempts checks one span per attempt, in order.
func checkAttempts(t *testing.T, spans []sdktrace.ReadOnlySpan) {
	t.Helper()
	for i, s := range spans {
		got := attempt{intAttr(s, semconv.HTTPResponseStatusCodeKey), intAttr(s, semconv.HTTPRequestResendCountKey)}
		if got != attempts[i] {
			t.Errorf("attempt %d span: %+v, want %+v", i+1, got, attempts[i])
		}
	}
}

// intAttr returns the span's int attribute key, or -1 when it has none.
func intAttr(s sdktrace.ReadOnlySpan, key attribute.Key) int64 {
	for _, kv := range s.Attributes() {
		if kv.Key == key {
			return kv.Value.AsInt64()
		}
	}
	return -1
}

func hasAttr(attrs []attribute.KeyValue, want attribute.KeyValue) bool {
	for _, kv := range attrs {
		if kv == want {
			return true
		}
	}
	return false
}

// TestTrailersAndRequestThroughEachStack: through each stack, after a 503
// and a retry, the caller's response carries the trailer the server sent
// without announcing it, as plain net/http's does; with httpretry
// outermost it also names the caller's request, though otelhttp as Base
// sends a clone of each attempt, whose response httpretry gives back as a
// copy (otelhttp outermost names its own clone, as it does over plain
// net/http).
func TestTrailersAndRequestThroughEachStack(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1)%2 == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "items")
		w.(http.Flusher).Flush()                         // chunked, so that a trailer can follow
		w.Header().Set(http.TrailerPrefix+"X-Sum", "42") // not announced
	}))
	defer srv.Close()
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a guard, never reached
	defer cancel()
	for i, s := range stacks {
		outermost := i == 1 // perAttempt
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		resp, err := s.build(srv.Client().Transport, tp).RoundTrip(req)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != "items" || resp.Trailer.Get("X-Sum") != "42" || outermost && resp.Request != req {
			t.Errorf("%s: body %q, trailer X-Sum %q, names the caller's request %v; want \"items\", \"42\" (and the caller's request with httpretry outermost)",
				s.name, body, resp.Trailer.Get("X-Sum"), resp.Request == req)
		}
	}
}
