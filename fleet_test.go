package httpretry

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// The fleet simulator: the storm simulator's scenarios (bench/storm) in
// virtual time, inside a synctest bubble, so that a storm of seconds runs
// in a moment and the same seed gives the same run. The server is a base
// RoundTripper: a token bucket of fixed capacity that answers 503 while it
// is down, sheds what exceeds its capacity with 503, and may fail a share
// of attempts at random.

// fleetScenario is one simulated storm.
type fleetScenario struct {
	clients  int              // Transports, each a client of its own
	rate     float64          // open loop: logical requests per second, all clients together
	workers  int              // closed loop instead: goroutines sharing one Transport, back to back
	calls    int              // closed loop: calls per worker; 0 means until duration
	capacity float64          // requests per second served; 0 means unlimited
	down     [2]time.Duration // the outage, [start, end)
	duration time.Duration    // how long new requests start
	timeout  time.Duration    // every request's deadline; 0 means none
	failRate float64          // share of attempts answered 503 at random
	// retryAfter, when set, is sent with every 503 of the outage: the
	// date at which it ends.
	retryAfter bool
	// retryAfterSecs, when set, is sent instead with every 503 of the
	// outage, as a delay in seconds.
	retryAfterSecs int
	latency        time.Duration // of every attempt
	flap           time.Duration // when set, the host is also down in every other flap-long interval, the first included
	ids            bool          // each request's path carries an ID of its own, as a REST API's do
	paths          int64         // when over 1, requests go to that many paths in turn
	policy         Policy
	seed           uint64
	// quotaRetryAfter, when set, makes a refusal of the capacity (not of
	// the outage) a 429 with Retry-After: quotaRetryAfter seconds, as a
	// rate limiter answers.
	quotaRetryAfter int
}

// defaultFleet is bench/storm's default scenario.
func defaultFleet() fleetScenario {
	return fleetScenario{
		clients: 200, rate: 700, capacity: 1000,
		down: [2]time.Duration{time.Second, 4 * time.Second}, duration: 7 * time.Second,
		timeout: 10 * time.Second, latency: time.Millisecond,
		policy: Policy{MaxRetries: 8, BaseDelay: 20 * time.Millisecond, MaxDelay: time.Second},
		seed:   1,
	}
}

// quotaAfterOutage is 10 clients through a 2 s outage told Retry-After:
// 1, whose host then refuses what exceeds its capacity, with 10% to
// spare, with 429 and Retry-After: 1, as a rate limiter does.
func quotaAfterOutage() fleetScenario {
	return fleetScenario{clients: 10, rate: 90, capacity: 100, down: [2]time.Duration{time.Second, 3 * time.Second},
		retryAfterSecs: 1, quotaRetryAfter: 1, duration: 8 * time.Second, timeout: 10 * time.Second, latency: time.Millisecond, seed: 1}
}

// simWindow is one 100 ms window of a run.
type simWindow struct {
	attempts, served, shed, down, arrivals int
}

// simWindowLen is the width of the counting windows.
const simWindowLen = 100 * time.Millisecond

// simServer is the server, as a base RoundTripper.
type simServer struct {
	sc    fleetScenario
	start time.Time

	mu       sync.Mutex
	tokens   float64
	last     time.Time
	rng      *rand.Rand
	windows  []simWindow
	early    int // retries sent before the Retry-After date they were told
	lastDown time.Duration
}

func newSimServer(sc fleetScenario) *simServer {
	span := sc.duration + sc.timeout + 30*time.Second
	return &simServer{sc: sc, start: time.Now(), last: time.Now(), tokens: sc.capacity / 10,
		rng: rand.New(rand.NewPCG(sc.seed, 7)), windows: make([]simWindow, span/simWindowLen+1)}
}

func (s *simServer) window(at time.Duration) *simWindow {
	return &s.windows[min(max(int(at/simWindowLen), 0), len(s.windows)-1)]
}

func (s *simServer) RoundTrip(r *http.Request) (*http.Response, error) {
	s.mu.Lock()
	latency := time.Duration((0.5 + s.rng.Float64()) * float64(s.sc.latency))
	s.mu.Unlock()
	time.Sleep(latency) // virtual (see runFleet); half to one and a half times the scenario's: no lockstep
	now := time.Now()
	at := now.Sub(s.start)
	s.mu.Lock()
	w := s.window(at)
	w.attempts++
	code := 200
	switch {
	case at >= s.sc.down[0] && at < s.sc.down[1], s.sc.flap > 0 && at < s.sc.duration && at/s.sc.flap%2 == 0:
		code = 503
		w.down++
		s.lastDown = at
	case s.sc.failRate > 0 && s.rng.Float64() < s.sc.failRate:
		code = 503
		w.down++
	case s.sc.capacity > 0 && !s.take(now):
		code = 503
		w.shed++
	default:
		w.served++
	}
	if s.sc.retryAfter && Attempt(r.Context()) > 1 && at < s.sc.down[1] && at >= s.sc.down[0]+s.sc.latency {
		s.early++ // told to come back at the outage's end, it came before
	}
	s.mu.Unlock()
	resp := response(code, http.StatusText(code))
	if code == 503 && s.sc.retryAfter && at < s.sc.down[1] {
		resp.Header.Set("Retry-After", s.start.Add(s.sc.down[1]).UTC().Format(http.TimeFormat))
		resp.Header.Set("Date", now.UTC().Format(http.TimeFormat))
	}
	if code == 503 && s.sc.quotaRetryAfter > 0 && !(at >= s.sc.down[0] && at < s.sc.down[1]) {
		resp = response(http.StatusTooManyRequests, "quota")
		resp.Header.Set("Retry-After", strconv.Itoa(s.sc.quotaRetryAfter))
	}
	if code == 503 && s.sc.retryAfterSecs > 0 && at < s.sc.down[1] {
		resp.Header.Set("Retry-After", strconv.Itoa(s.sc.retryAfterSecs))
	}
	return resp, nil
}

// take takes a token from the bucket at now. s.mu is held.
func (s *simServer) take(now time.Time) bool {
	s.tokens = min(s.tokens+s.sc.capacity*now.Sub(s.last).Seconds(), s.sc.capacity/10)
	s.last = now
	if s.tokens < 1 {
		return false
	}
	s.tokens--
	return true
}

// simRequest is one finished logical request.
type simRequest struct {
	start, latency time.Duration
	ok             bool
}

// fleetResult sums up a run.
type fleetResult struct {
	sc       fleetScenario
	windows  []simWindow
	requests []simRequest
	early    int
	lastDown time.Duration
}

// runFleet runs sc in a synctest bubble of its own, so that its sleeps
// (the server's latency, the arrivals' schedule) pass in virtual time: each
// client is a Transport with sc's Policy, storm control c and a Random
// seeded from sc.
func runFleet(t *testing.T, sc fleetScenario, c StormControl) (res fleetResult) {
	t.Helper()
	synctest.Test(t, func(*testing.T) { res = simulate(sc, transportWith(sc.policy, c, sc.seed)) })
	return res
}

// simulate runs sc; it must run in a synctest bubble (see runFleet).
func simulate(sc fleetScenario, newClient func(base http.RoundTripper) http.RoundTripper) fleetResult {
	srv := newSimServer(sc)
	var mu sync.Mutex
	var reqs []simRequest
	var ids atomic.Int64
	do := func(rt http.RoundTripper) {
		start := time.Since(srv.start)
		srv.mu.Lock()
		srv.window(start).arrivals++
		srv.mu.Unlock()
		ctx := context.Background()
		if sc.timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, sc.timeout)
			defer cancel()
		}
		url := "http://storm/"
		switch n := ids.Add(1); {
		case sc.ids:
			url += strconv.FormatInt(n, 10)
		case sc.paths > 1:
			url += strconv.FormatInt(n%sc.paths, 10)
		}
		req := httptest.NewRequest("GET", url, nil).WithContext(ctx)
		resp, err := rt.RoundTrip(req)
		ok := false
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			ok = resp.StatusCode == 200
		}
		mu.Lock()
		reqs = append(reqs, simRequest{start: start, latency: time.Since(srv.start) - start, ok: ok})
		mu.Unlock()
	}
	var wg sync.WaitGroup
	r := rand.New(rand.NewPCG(sc.seed, 0))
	if sc.workers > 0 {
		rt := newClient(srv)
		for range sc.workers {
			wg.Go(func() {
				for i := 0; sc.calls > 0 && i < sc.calls || sc.calls == 0 && time.Since(srv.start) < sc.duration; i++ {
					do(rt)
				}
			})
		}
	} else {
		clients := make([]http.RoundTripper, sc.clients)
		for i := range clients {
			clients[i] = newClient(srv)
		}
		for at := time.Duration(0); ; {
			at += time.Duration(r.ExpFloat64() / sc.rate * float64(time.Second))
			if at >= sc.duration {
				break
			}
			time.Sleep(at - time.Since(srv.start)) // virtual time (see runFleet)
			c := clients[r.IntN(len(clients))]
			wg.Go(func() { do(c) })
		}
	}
	wg.Wait()
	srv.mu.Lock()
	defer srv.mu.Unlock()
	return fleetResult{sc: sc, windows: srv.windows, requests: reqs, early: srv.early, lastDown: srv.lastDown}
}

// fleetMetrics are a run's figures, as bench/storm reports them.
type fleetMetrics struct {
	outageLoad, peakAfter, peak float64 // × arrivals; ÷ capacity per window
	recovery                    time.Duration
	recovered                   bool
	success                     float64
	p50, p99, last              time.Duration
	attemptsPerRequest          float64
	requests                    int
}

func (res fleetResult) metrics() fleetMetrics {
	sc := res.sc
	var m fleetMetrics
	perWindow := sc.capacity * simWindowLen.Seconds()
	var outA, outR, attempts int
	back := sc.down[1]
	for i, w := range res.windows {
		at := time.Duration(i) * simWindowLen
		attempts += w.attempts
		if at >= sc.down[0] && at < sc.down[1] {
			outA += w.attempts
			outR += w.arrivals
		}
		if perWindow > 0 {
			m.peak = max(m.peak, float64(w.attempts)/perWindow)
			if at >= sc.down[1] && sc.down[1] > 0 {
				m.peakAfter = max(m.peakAfter, float64(w.attempts)/perWindow)
			}
		}
		if at >= sc.down[1] && at < sc.duration && w.attempts > 0 && float64(w.served) < 0.95*float64(w.attempts) {
			back = at + simWindowLen
		}
	}
	if outR > 0 {
		m.outageLoad = float64(outA) / float64(outR)
	}
	m.recovery, m.recovered = back-sc.down[1], back < sc.duration
	lat := make([]time.Duration, 0, len(res.requests))
	ok := 0
	for _, r := range res.requests {
		lat = append(lat, r.latency)
		m.last = max(m.last, r.start+r.latency)
		if r.ok {
			ok++
		}
	}
	slices.Sort(lat)
	m.requests = len(res.requests)
	if m.requests > 0 {
		m.success = float64(ok) / float64(m.requests)
		m.p50, m.p99 = lat[int(0.50*float64(len(lat)-1))], lat[int(0.99*float64(len(lat)-1))]
		m.attemptsPerRequest = float64(attempts) / float64(m.requests)
	}
	return m
}

func (m fleetMetrics) String() string {
	return fmt.Sprintf("load in outage %.2fx, peak after %.2fx (peak %.2fx), back to 95%% %v (%v), success %.1f%%, p50 %v p99 %v, last done %v, %.2f attempts/request, %d requests",
		m.outageLoad, m.peakAfter, m.peak, m.recovery.Round(time.Millisecond), m.recovered, 100*m.success,
		m.p50.Round(time.Millisecond), m.p99.Round(time.Millisecond), m.last.Round(time.Millisecond), m.attemptsPerRequest, m.requests)
}

// transportWith returns a client builder: httpretry with policy p and
// storm control c, its jitter drawn from a seeded source.
func transportWith(p Policy, c StormControl, seed uint64) func(http.RoundTripper) http.RoundTripper {
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(seed, 99))
	random := func() float64 {
		mu.Lock()
		defer mu.Unlock()
		return rng.Float64()
	}
	return func(base http.RoundTripper) http.RoundTripper {
		return &Transport{Base: base, Policy: p, Storm: c, Random: random}
	}
}

// stormOff is storm control turned off.
var stormOff = StormControl{NoBudget: true, NoHostGate: true}

// fleetTable formats runs side by side.
func fleetTable(rows map[string]fleetMetrics) string {
	var b strings.Builder
	names := make([]string, 0, len(rows))
	for n := range rows {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		fmt.Fprintf(&b, "%-10s %v\n", n, rows[n])
	}
	return b.String()
}
