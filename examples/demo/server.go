package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
)

// step is one scripted answer of the flaky server.
type step int

const (
	recovered   step = iota // the normal answer
	unavailable             // 503 with Retry-After, as a server shedding load sends
	noBackend               // 503 without Retry-After, as a proxy with no backend sends
	tooMany                 // 429 Too Many Requests
	drop                    // the connection closes in the middle of the response
)

// blip is what each endpoint answers to its first arrivals before it
// recovers. Scripting it per endpoint, rather than by the clock, makes every
// run print the same attempts although the requests run concurrently and
// their waits are random.
var blip = map[string][]step{
	"GET /catalog":   {unavailable, noBackend, tooMany},
	"PUT /carts/7":   {drop, noBackend},
	"POST /orders":   {unavailable, drop},
	"POST /payments": {drop},
}

// flakyServer answers each endpoint's arrivals by its blip script.
type flakyServer struct {
	retryAfter string
	mu         sync.Mutex
	arrivals   map[string]int
}

// newFlakyServer starts a loopback server at the start of its blip.
func newFlakyServer(retryAfter int) *httptest.Server {
	s := &flakyServer{retryAfter: strconv.Itoa(retryAfter), arrivals: map[string]int{}}
	return httptest.NewServer(s)
}

// next returns the step for this arrival at the endpoint.
func (s *flakyServer) next(endpoint string) step {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.arrivals[endpoint]
	s.arrivals[endpoint]++
	if script := blip[endpoint]; n < len(script) {
		return script[n]
	}
	return recovered
}

// ServeHTTP answers one request.
func (s *flakyServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Read the whole body first: it is what a PUT's answer reports, and
	// closing a connection with unread data would reset it instead.
	body, _ := io.ReadAll(r.Body)
	switch s.next(r.Method + " " + r.URL.Path) {
	case unavailable:
		w.Header().Set("Retry-After", s.retryAfter)
		http.Error(w, "shedding load", http.StatusServiceUnavailable)
	case noBackend:
		http.Error(w, "no healthy backend", http.StatusServiceUnavailable)
	case tooMany:
		http.Error(w, "slow down", http.StatusTooManyRequests)
	case drop:
		dropConnection(w)
	default:
		s.answer(w, r, body)
	}
}

// answer is the recovered server's reply.
func (s *flakyServer) answer(w http.ResponseWriter, r *http.Request, body []byte) {
	switch r.Method {
	case http.MethodGet:
		fmt.Fprint(w, `{"items":3}`)
	case http.MethodPost:
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":1,"got":%d}`, len(body))
	default:
		fmt.Fprintf(w, `{"stored":%d}`, len(body))
	}
}

// dropConnection sends the start of a response and closes the connection,
// as a server that crashes mid-request does. The client sees the
// connection end before a whole response arrived.
func dropConnection(w http.ResponseWriter) {
	conn, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		http.Error(w, "cannot drop", http.StatusInternalServerError)
		return
	}
	buf.WriteString("HTTP/1.1 200 OK\r\n")
	buf.Flush()
	conn.Close()
}
