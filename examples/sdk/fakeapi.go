package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
)

// fault is an injected failure; none means the real answer.
type fault int

const (
	none fault = iota
	unavailable
	badGateway
	reset
)

// faults are what each endpoint does to its first arrivals.
var faults = map[string][]fault{
	"GET /repos/httpretry/httpretry":         {unavailable, reset},
	"GET /repos/httpretry/httpretry/issues":  {badGateway},
	"POST /repos/httpretry/httpretry/issues": {unavailable},
}

// answers are the fake API's JSON bodies, a small part of GitHub's.
var answers = map[string]struct {
	status int
	body   string
}{
	"GET /repos/httpretry/httpretry":         {200, `{"id":1,"name":"httpretry","full_name":"httpretry/httpretry","stargazers_count":42}`},
	"GET /repos/httpretry/httpretry/issues":  {200, `[{"number":3,"title":"Examples and make demo","state":"open"},{"number":1,"title":"Core","state":"open"}]`},
	"POST /repos/httpretry/httpretry/issues": {201, `{"number":4,"title":"Flaky CI","state":"open"}`},
}

// fakeAPI is a loopback GitHub API that injects faults.
type fakeAPI struct {
	*httptest.Server
	mu       sync.Mutex
	arrivals map[string]int
	total    int
}

func newFakeAPI() *fakeAPI {
	api := &fakeAPI{arrivals: map[string]int{}}
	api.Server = httptest.NewServer(api)
	return api
}

// requests returns how many requests reached the API.
func (api *fakeAPI) requests() int {
	api.mu.Lock()
	defer api.mu.Unlock()
	return api.total
}

// next returns the fault for this arrival at the endpoint.
func (api *fakeAPI) next(endpoint string) fault {
	api.mu.Lock()
	defer api.mu.Unlock()
	api.total++
	n := api.arrivals[endpoint]
	api.arrivals[endpoint]++
	if f := faults[endpoint]; n < len(f) {
		return f[n]
	}
	return none
}

// ServeHTTP answers one API request.
func (api *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body) // unread data would turn a close into a reset
	endpoint := r.Method + " " + r.URL.Path
	w.Header().Set("Content-Type", "application/json")
	f := api.next(endpoint)
	if f != none {
		// A failing server drops its connections, so the client's next
		// attempt dials a fresh one (see resetConnection).
		w.Header().Set("Connection", "close")
	}
	switch f {
	case unavailable:
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprint(w, `{"message":"Service Unavailable"}`)
		return
	case badGateway:
		w.WriteHeader(http.StatusBadGateway)
		fmt.Fprint(w, `{"message":"Bad Gateway"}`)
		return
	case reset:
		resetConnection(w)
		return
	}
	a, ok := answers[endpoint]
	if !ok {
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"message":"Not Found"}`)
		return
	}
	w.WriteHeader(a.status)
	fmt.Fprint(w, a.body)
}

// resetConnection resets the connection without answering (SO_LINGER 0
// makes Close send a RST), as a crashing proxy does. The client reads
// ECONNRESET. It comes on a fresh connection, after a fault that closed the
// previous one: on a reused connection, net/http would replay an idempotent
// request by itself, and the point here is to show what httpretry does.
func resetConnection(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	conn.Close()
}
