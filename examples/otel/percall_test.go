package main

import (
	"context"
	"io"
	"net/http"
	"testing"

	"github.com/httpretry/httpretry"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestPerCallControlThroughOtelhttp: a Policy set on the request's context
// reaches httpretry whichever side of otelhttp it sits on, since otelhttp
// passes the request's context down with its span in it.
func TestPerCallControlThroughOtelhttp(t *testing.T) {
	for _, s := range stacks {
		for _, tc := range []struct {
			name   string
			ctx    context.Context
			status int
			sent   int // requests the server saw
		}{
			{"the Transport's policy", context.Background(), http.StatusOK, 3},
			{"WithoutRetries", httpretry.WithoutRetries(context.Background()), http.StatusServiceUnavailable, 1},
			{"WithPolicy, one retry", httpretry.WithPolicy(context.Background(), httpretry.Policy{MaxRetries: 1, BaseDelay: -1}), http.StatusServiceUnavailable, 2},
		} {
			t.Run(s.name+"/"+tc.name, func(t *testing.T) {
				srv := newFlakyServer(2)
				defer srv.Close()
				tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tracetest.NewSpanRecorder()))
				defer tp.Shutdown(context.Background())
				var sent int
				counting := countingTransport{base: srv.Client().Transport, n: &sent}
				client := &http.Client{Transport: s.build(counting, tp)}
				req, _ := http.NewRequestWithContext(tc.ctx, "GET", srv.URL+"/items", nil)
				resp, err := client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != tc.status || sent != tc.sent {
					t.Errorf("got %s after %d requests, want %d after %d", resp.Status, sent, tc.status, tc.sent)
				}
			})
		}
	}
}

// countingTransport counts the requests it sends.
type countingTransport struct {
	base http.RoundTripper
	n    *int
}

func (c countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	*c.n++
	return c.base.RoundTrip(r)
}
