package storm

import (
	"context"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-cleanhttp"
	"github.com/httpretry/httpretry/bench"
)

// Results are a scenario's runs, one per system, in the order given.
type Results struct {
	// Scenario is what ran.
	Scenario Scenario
	// Systems holds one result per system.
	Systems []SystemResult
}

// SystemResult is one system's run.
type SystemResult struct {
	// Name is the system's name.
	Name string
	// Windows are the run's counts, one per Scenario.Window from the start.
	Windows []Window
	// Metrics sum the run up.
	Metrics Metrics
}

// Run runs sc once per system, one after the other, each against a fresh
// loopback server with fresh clients. All traffic stays on 127.0.0.1.
func Run(sc Scenario, systems []bench.System) (Results, error) {
	if err := sc.Validate(); err != nil {
		return Results{}, err
	}
	res := Results{Scenario: sc, Systems: make([]SystemResult, len(systems))}
	if sc.inParallel() {
		var wg sync.WaitGroup
		for i, s := range systems {
			wg.Go(func() { res.Systems[i] = runSteady(sc, s) })
		}
		wg.Wait()
		return res, nil
	}
	for i, s := range systems {
		res.Systems[i] = runSteady(sc, s)
	}
	return res, nil
}

// runSteady runs the scenario for one system, again up to Reruns times
// while the simulator lagged more than LagLimit behind its schedule (the
// machine, busy with other work, starved it), and keeps the run that
// lagged least. Metrics.Runs says how many runs it took.
func runSteady(sc Scenario, sys bench.System) SystemResult {
	var best SystemResult
	for i := 0; i <= max(sc.Reruns, 0); i++ {
		r := runOne(sc, sys)
		if i == 0 || r.Metrics.Lag < best.Metrics.Lag {
			best = r
		}
		best.Metrics.Runs = i + 1
		if best.Metrics.Lag <= sc.LagLimit {
			break
		}
	}
	return best
}

// runOne runs the scenario for one system.
func runOne(sc Scenario, sys bench.System) SystemResult {
	rec := newRecorder(sc)
	start := time.Now() // reset below, once the fleet is built
	since := func() time.Duration { return time.Since(start) }

	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, _ := strconv.ParseUint(r.Header.Get(requestIDHeader), 10, 64)
		// The verdict comes after the service time, not on arrival: a
		// real server that finds its backend back while it works on an
		// attempt answers 200. The attempt is counted when answered.
		if sc.ServiceTime > 0 {
			time.Sleep(sc.ServiceTime)
		}
		rep := rec.Reply(since(), id)
		if h := rep.Header(); h != "" {
			w.Header().Set("Retry-After", h)
		}
		switch rep.Verdict {
		case Served:
			w.Write([]byte("ok"))
		case Throttled:
			http.Error(w, "slow down", http.StatusTooManyRequests)
		default:
			http.Error(w, "unavailable", http.StatusServiceUnavailable)
		}
	}))
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	// Real servers close idle keep-alive connections; here it also keeps a
	// system that never closes the responses it discards, and so leaks
	// their connections, from exhausting the process's file descriptors.
	srv.Config.IdleTimeout = serverIdleTimeout
	srv.Start()
	defer srv.Close()

	// A fleet: each client its own system instance and connection pool.
	bases := make([]*http.Transport, sc.Clients)
	clients := make([]http.RoundTripper, sc.Clients)
	for i := range clients {
		bases[i] = cleanhttp.DefaultPooledTransport()
		p := sc.Params
		p.RandomSeed = sc.Seed<<32 | uint64(i+1) // each client its own draws, the same in every variant
		clients[i] = sys.New(bases[i], p)
	}
	c := &fleet{sc: sc, url: srv.URL, clients: clients, rec: rec, since: since}

	start = time.Now()
	switch sc.Mode {
	case Closed:
		c.closedLoop()
	case Sequential, RetryAfterLong:
		c.inRow()
	case Burst:
		c.burst()
	case RandomClosed:
		c.backToBack()
	default:
		c.openLoop()
	}
	for _, b := range bases {
		b.CloseIdleConnections()
	}

	rec.mu.Lock()
	defer rec.mu.Unlock()
	var downUntil time.Duration
	if rec.anyDown {
		downUntil = rec.lastDown
	}
	windows := rec.Windows()
	m := compute(sc, windows, rec.requests, int(conns.Load()), downUntil)
	m.Lag = time.Duration(rec.maxLag.Load())
	return SystemResult{Name: sys.Name, Windows: windows, Metrics: m}
}

// serverIdleTimeout is how long the server keeps an idle connection.
const serverIdleTimeout = time.Second

// fleet is the clients of one run.
type fleet struct {
	sc      Scenario
	url     string
	clients []http.RoundTripper
	rec     *recorder
	since   func() time.Duration
	ids     atomic.Uint64 // the last logical request's number
}

// openLoop sends the Poisson arrivals of the whole run, each from a client
// chosen at random, whatever happens to earlier ones, then waits for all.
func (f *fleet) openLoop() {
	r := rand.New(rand.NewPCG(f.sc.Seed, 0))
	var wg sync.WaitGroup
	for _, at := range Arrivals(r, f.sc.Rate, f.sc.Duration) {
		client := f.clients[r.IntN(len(f.clients))]
		if d := at - f.since(); d > 0 {
			time.Sleep(d)
		}
		wg.Go(func() { f.do(client, at) })
	}
	wg.Wait()
}

// closedLoop runs every client as a loop of think, send, wait for the
// answer, until the end of arrivals. The mean think time makes the fleet's
// rate Scenario.Rate while answers are fast.
func (f *fleet) closedLoop() {
	perClient := f.sc.Rate / float64(len(f.clients))
	var wg sync.WaitGroup
	for i, client := range f.clients {
		r := rand.New(rand.NewPCG(f.sc.Seed, uint64(i)+1))
		wg.Go(func() {
			at := expGap(r, perClient)
			for at < f.sc.Duration {
				if d := at - f.since(); d > 0 {
					time.Sleep(d)
				}
				f.do(client, at)
				at = max(at, f.since()) + expGap(r, perClient)
			}
		})
	}
	wg.Wait()
}

// do sends one logical request that arrived at at and records its outcome.
func (f *fleet) do(rt http.RoundTripper, at time.Duration) {
	id := f.ids.Add(1)
	sent := f.since()
	f.rec.Arrive(at, sent)
	ctx, cancel := context.WithTimeout(context.Background(), f.sc.RequestTimeout)
	defer cancel()
	ok := false
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.url, nil)
	if err == nil {
		req.Header.Set(requestIDHeader, strconv.FormatUint(id, 10))
		var resp *http.Response
		if resp, err = rt.RoundTrip(req); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			ok = resp.StatusCode == http.StatusOK
		}
	}
	f.rec.Done(id, sent, f.since(), ok)
}
