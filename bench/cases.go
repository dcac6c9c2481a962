package bench

import (
	"bytes"
	"context"

	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/hashicorp/go-cleanhttp"
)

// Case is one success-path benchmark: a base transport and an operation
// that sends one logical request through a system built on that base.
type Case struct {
	// Name labels the case's table.
	Name string
	// Setup builds the base transport, the operation and a func freeing
	// them. One setup serves every system, so all share warm connections.
	Setup func() Env
}

// Env is a Case's running environment.
type Env struct {
	// Base is what every system wraps.
	Base http.RoundTripper
	// Op sends one logical request through rt and consumes the response
	// as a caller would: body read to EOF, then closed.
	Op func(rt http.RoundTripper) error
	// Stop frees the environment.
	Stop func()
}

// Cases are the success-path benchmarks, in the order of the report.
var Cases = []Case{
	{Name: "GET in-memory", Setup: getInMemory},
	{Name: "POST 1 KiB GetBody", Setup: post1KiB},
	{Name: "POST 1 MiB plain reader", Setup: post1MiBPlain},
	{Name: "GET loopback", Setup: getLoopback},
}

// Loop returns the benchmark body that runs op through rt b.N times.
func Loop(op func(http.RoundTripper) error, rt http.RoundTripper) func(*testing.B) {
	return func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := op(rt); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// cannedOK is an in-memory base: it reads the request body to EOF, as a
// real transport would, and answers 200 with an empty body. The response
// is new each time because some systems rewrap its Body.
type cannedOK struct{}

// RoundTrip implements http.RoundTripper.
func (cannedOK) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		if _, err := io.Copy(io.Discard, req.Body); err != nil {
			return nil, err
		}
		req.Body.Close()
	}
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, ContentLength: 0, Request: req}, nil
}

// consume reads and closes a response as a caller does and checks for 200.
func consume(resp *http.Response, err error) error {
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("status %d", resp.StatusCode)
	}
	return err
}

// noStop is a Stop that frees nothing.
func noStop() {}

// getInMemory measures the middleware alone: a GET to a canned 200,
// reusing one request, as RoundTrip must not modify it.
func getInMemory() Env {
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://bench.invalid/", nil)
	return Env{Base: cannedOK{}, Stop: noStop, Op: func(rt http.RoundTripper) error {
		return consume(rt.RoundTrip(req))
	}}
}

// post1KiB is a POST whose 1 KiB body is a bytes.Reader, so GetBody is set
// and a retrying transport needs no copy of it.
func post1KiB() Env {
	payload := bytes.Repeat([]byte("x"), 1<<10)
	tmpl, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, "http://bench.invalid/", bytes.NewReader(payload))
	return Env{Base: cannedOK{}, Stop: noStop, Op: func(rt http.RoundTripper) error {
		// A shallow copy with a fresh body, which is what the caller's
		// http.NewRequest would produce, minus parsing the URL again.
		req := *tmpl
		req.Body, _ = tmpl.GetBody()
		return consume(rt.RoundTrip(&req))
	}}
}

// post1MiBPlain is a POST of 1 MiB from a reader of no known type: no
// GetBody, no length, so a retrying transport must buffer it to replay it.
func post1MiBPlain() Env {
	tmpl, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, "http://bench.invalid/", nil)
	return Env{Base: cannedOK{}, Stop: noStop, Op: func(rt http.RoundTripper) error {
		req := *tmpl
		req.Body = io.NopCloser(&PatternReader{N: 1 << 20})
		return consume(rt.RoundTrip(&req))
	}}
}

// getLoopback is a GET to a keep-alive server on the loopback interface
// through a pooled transport: what a retrying transport costs in a real
// request.
func getLoopback() Env {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok"))
	}))
	base := cleanhttp.DefaultPooledTransport()
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, srv.URL, nil)
	return Env{Base: base, Op: func(rt http.RoundTripper) error {
		return consume(rt.RoundTrip(req))
	}, Stop: func() {
		base.CloseIdleConnections()
		srv.Close()
	}}
}

// PatternReader yields N bytes of a fixed pattern without allocating: a
// body that is neither a bytes.Reader nor a strings.Reader, so
// http.NewRequest sets no GetBody and no length for it.
type PatternReader struct {
	// N is how many bytes remain.
	N int64
}

// pattern is what a PatternReader repeats.
var pattern = bytes.Repeat([]byte("0123456789abcdef"), 2048)

// Read implements io.Reader.
func (r *PatternReader) Read(p []byte) (int, error) {
	if r.N <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > r.N {
		p = p[:r.N]
	}
	n := 0
	for n < len(p) {
		n += copy(p[n:], pattern)
	}
	r.N -= int64(n)
	return n, nil
}
