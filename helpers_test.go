package httpretry

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// roundTripFunc adapts a function to http.RoundTripper.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// scripted is a base transport that answers attempt i with script[i] (the
// last entry repeats), reads and closes every request body as a
// well-behaved transport must, and records what it saw.
type scripted struct {
	mu      sync.Mutex
	script  []func(*http.Request) (*http.Response, error)
	reqs    []*http.Request
	bodies  []string
	attempt []int
}

func newScripted(steps ...func(*http.Request) (*http.Response, error)) *scripted {
	return &scripted{script: steps}
}

func (s *scripted) RoundTrip(r *http.Request) (*http.Response, error) {
	var body []byte
	if r.Body != nil {
		body, _ = io.ReadAll(r.Body)
		r.Body.Close()
	}
	s.mu.Lock()
	i := min(len(s.reqs), len(s.script)-1)
	s.reqs = append(s.reqs, r)
	s.bodies = append(s.bodies, string(body))
	s.attempt = append(s.attempt, Attempt(r.Context()))
	step := s.script[i]
	s.mu.Unlock()
	return step(r)
}

func (s *scripted) calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.reqs)
}

// status answers with code, an optional header pair and a body.
func status(code int, kv ...string) func(*http.Request) (*http.Response, error) {
	return func(r *http.Request) (*http.Response, error) {
		resp := response(code, "body of "+http.StatusText(code))
		for i := 0; i+1 < len(kv); i += 2 {
			resp.Header.Set(kv[i], kv[i+1])
		}
		resp.Request = r
		return resp, nil
	}
}

// fail answers with err.
func fail(err error) func(*http.Request) (*http.Response, error) {
	return func(*http.Request) (*http.Response, error) { return nil, err }
}

// response builds a response whose body records its closing.
func response(code int, body string) *http.Response {
	return &http.Response{
		StatusCode:    code,
		Status:        http.StatusText(code),
		Header:        http.Header{},
		Body:          &trackedBody{Reader: strings.NewReader(body)},
		ContentLength: int64(len(body)),
	}
}

// trackedBody is a body that counts its Close calls and how much was read.
type trackedBody struct {
	io.Reader
	read   atomic.Int64
	closes atomic.Int32
}

func (b *trackedBody) Read(p []byte) (int, error) {
	n, err := b.Reader.Read(p)
	b.read.Add(int64(n))
	return n, err
}

func (b *trackedBody) Close() error {
	b.closes.Add(1)
	return nil
}

// closes returns how often resp's tracked body was closed.
func closes(resp *http.Response) int32 {
	var tb *trackedBody
	if b, ok := resp.Body.(*trackedBody); ok {
		tb = b
	}
	if tb == nil {
		return -1
	}
	return tb.closes.Load()
}

// plainBody hides any type a transport could recognise (no bytes.Reader,
// no WriterTo) and counts its Close calls.
type plainBody struct {
	r      io.Reader
	closes atomic.Int32
}

func newPlainBody(b []byte) *plainBody { return &plainBody{r: bytes.NewReader(b)} }

func (b *plainBody) Read(p []byte) (int, error) { return b.r.Read(p) }
func (b *plainBody) Close() error               { b.closes.Add(1); return nil }

// failingBody returns some bytes, then an error.
type failingBody struct {
	n      int
	closes atomic.Int32
}

var errBodyRead = errors.New("disk on fire")

func (b *failingBody) Read(p []byte) (int, error) {
	if b.n <= 0 {
		return 0, errBodyRead
	}
	k := min(b.n, len(p))
	for i := range p[:k] {
		p[i] = 'x'
	}
	b.n -= k
	return k, nil
}
func (b *failingBody) Close() error { b.closes.Add(1); return nil }

// noWait is a Policy without waits, for tests about what is retried.
var noWait = Policy{BaseDelay: -1}

// propertySeeds returns how many random seeds a property test runs:
// HTTPRETRY_PROPERTY_SEEDS when it is set to a number, def otherwise.
func propertySeeds(def int) int {
	if n, err := strconv.Atoi(os.Getenv("HTTPRETRY_PROPERTY_SEEDS")); err == nil {
		return n
	}
	return def
}

// startServer starts a loopback server of h, over HTTP/2 with TLS when h2
// is set, closed when the test ends.
func startServer(t *testing.T, h2 bool, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	if h2 {
		srv.EnableHTTP2 = true
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	return srv
}

// snapshot returns the hosts with requests retrying, by name.
func (s *hostSet) snapshot() map[string]*host {
	out := map[string]*host{}
	s.byName.Range(func(k, v any) bool {
		out[k.(string)] = v.(*host)
		return true
	})
	return out
}
