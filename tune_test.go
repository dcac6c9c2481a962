package httpretry

import (
	"cmp"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"
)

// TestTuneFleet prints the simulator's scenarios with storm control on and
// off; set HTTPRETRY_TUNE=1 to run it, HTTPRETRY_TUNE_ONLY to run one
// scenario, HTTPRETRY_TUNE_SEED to draw another run of each, and
// HTTPRETRY_TUNE_ROWS (on, off) to run only one setting. Where both
// on and off ran, it fails a scenario in which storm control rescues a
// point less than plain backoff, or sends more into the outage.
func TestTuneFleet(t *testing.T) {
	if os.Getenv("HTTPRETRY_TUNE") == "" {
		t.Skip("set HTTPRETRY_TUNE=1")
	}
	def := Policy{}
	long := time.Hour
	scenarios := map[string]fleetScenario{}
	scenarios["default"] = defaultFleet()
	sh := defaultFleet()
	sh.clients = 1
	scenarios["shared"] = sh
	rnd := defaultFleet()
	rnd.down = [2]time.Duration{}
	rnd.failRate = 0.05
	scenarios["random5"] = rnd
	st := defaultFleet()
	st.clients, st.rate, st.capacity = 1, 20, 0
	scenarios["steady"] = st
	maps.Copy(scenarios, toldFleets())
	st2 := st
	st2.policy = def
	scenarios["steadydef"] = st2
	scenarios["burst"] = fleetScenario{workers: 200, calls: 1, down: [2]time.Duration{0, time.Second}, duration: time.Second, timeout: 15 * time.Second, latency: time.Millisecond, policy: def, seed: 1}
	for _, ms := range []time.Duration{200, 500} { // a blip of five attempts' time, and of two
		slow := scenarios["burst"]
		slow.latency = ms * time.Millisecond
		scenarios[fmt.Sprintf("burst%d", ms)] = slow
	}
	scenarios["seq"] = fleetScenario{workers: 1, calls: 4, down: [2]time.Duration{0, long}, duration: time.Second, latency: time.Millisecond, policy: Policy{MaxRetries: 5, BaseDelay: 200 * time.Millisecond, MaxDelay: 2 * time.Second}, seed: 1}
	fast := Policy{BaseDelay: 10 * time.Millisecond}
	scenarios["rand30"] = fleetScenario{workers: 20, failRate: 0.3, duration: 15 * time.Second, latency: time.Millisecond, policy: fast, seed: 1}
	scenarios["rand60"] = fleetScenario{workers: 8, failRate: 0.6, duration: 15 * time.Second, timeout: 5 * time.Second, latency: time.Millisecond, policy: fast, seed: 1}
	scenarios["rand60slow"] = fleetScenario{workers: 8, failRate: 0.6, duration: 15 * time.Second, timeout: 5 * time.Second, latency: time.Millisecond, policy: def, seed: 1}
	for _, name := range []string{"default", "shared", "burst"} { // the same, each request's path its own, or one of three
		withIDs, threePaths := scenarios[name], scenarios[name]
		withIDs.ids, threePaths.paths = true, 3
		scenarios[name+"-ids"], scenarios[name+"-3paths"] = withIDs, threePaths
	}
	only, onlyRow := os.Getenv("HTTPRETRY_TUNE_ONLY"), os.Getenv("HTTPRETRY_TUNE_ROWS")
	seed, _ := strconv.ParseUint(os.Getenv("HTTPRETRY_TUNE_SEED"), 10, 64)
	for name, sc := range scenarios {
		if only != "" && only != name {
			continue
		}
		sc.seed = cmp.Or(seed, sc.seed)
		rows := map[string]fleetMetrics{}
		for _, v := range []struct {
			name string
			c    StormControl
		}{{"on", StormControl{}}, {"off", stormOff}} {
			if onlyRow == "" || onlyRow == v.name {
				rows[v.name] = runFleet(t, sc, v.c).metrics()
			}
		}
		t.Logf("%s:\n%s", name, fleetTable(rows))
		on, okOn := rows["on"]
		off, okOff := rows["off"]
		if okOn && okOff && (on.success < off.success-0.01 || on.outageLoad > off.outageLoad+0.01) {
			t.Errorf("%s: storm control rescued %.1f%% and sent %.2fx into the outage; off %.1f%%, %.2fx",
				name, 100*on.success, on.outageLoad, 100*off.success, off.outageLoad)
		}
	}
}

// TestTunePairs compares storm control with plain backoff request by
// request, each request of an open-loop fleet paired by its arrival with
// itself in the other run: of plain backoff's rescues, how many storm
// control loses and how many it adds, and how much later, on average, it
// ends the requests both rescue. Set HTTPRETRY_TUNE=1 to run it,
// HTTPRETRY_TUNE_SEED to draw another run, HTTPRETRY_TUNE_ONLY to run one
// scenario. It only prints: the figures of docs/storm-control.md (The
// backlog too) come from it.
func TestTunePairs(t *testing.T) {
	if os.Getenv("HTTPRETRY_TUNE") == "" {
		t.Skip("set HTTPRETRY_TUNE=1")
	}
	seed, _ := strconv.ParseUint(os.Getenv("HTTPRETRY_TUNE_SEED"), 10, 64)
	scenarios := toldFleets()
	scenarios["default"] = defaultFleet()
	scenarios["quota-after-outage"] = quotaAfterOutage()
	// Five small clients whose host fails a fifth of attempts at random
	// after a 3 s outage: taken for a host at its capacity, their held
	// requests end later (docs/storm-control.md, Where storm control can
	// cost a request).
	scenarios["random-after-outage"] = fleetScenario{clients: 5, rate: 50, down: [2]time.Duration{time.Second, 4 * time.Second},
		failRate: 0.2, duration: 7 * time.Second, latency: time.Millisecond, policy: defaultFleet().policy, seed: 1}
	for name, sc := range scenarios {
		if only := os.Getenv("HTTPRETRY_TUNE_ONLY"); only != "" && only != name {
			continue
		}
		sc.seed = cmp.Or(seed, sc.seed)
		on, off := runFleet(t, sc, StormControl{}), runFleet(t, sc, stormOff)
		p := pairRequests(on.requests, off.requests)
		t.Logf("%s: %d requests, plain backoff rescues %d; storm control loses %d of them and adds %d; rescued both ways, it ends them %v later on average; %d fail both ways\n  on:  %v\n  off: %v",
			name, p.paired, p.bothOK+p.lost, p.lost, p.won, p.later.Round(time.Millisecond), p.bothFailed, on.metrics(), off.metrics())
	}
}

// toldFleets returns the default fleet with 12% spare capacity
// ("tight"), and the Retry-After herds: told the outage's end as a date
// ("retryafter"), as a delay of 1 s and 2 s, and told the date with 12%
// spare capacity.
func toldFleets() map[string]fleetScenario {
	told, tight := defaultFleet(), defaultFleet()
	told.retryAfter, tight.rate = true, 880
	fleets := map[string]fleetScenario{"retryafter": told, "tight": tight}
	for secs := 1; secs <= 2; secs++ {
		sc := told
		sc.retryAfter, sc.retryAfterSecs = false, secs
		fleets[fmt.Sprintf("retryafter%ds", secs)] = sc
	}
	told.rate = tight.rate
	fleets["tight-retryafter"] = told
	return fleets
}

// requestPairs counts the requests of two runs of one open-loop fleet,
// paired by their arrivals (see TestTunePairs).
type requestPairs struct {
	paired, bothOK, lost, won, bothFailed int
	later                                 time.Duration // mean, over bothOK
}

// pairRequests pairs on's requests with off's by their arrival.
func pairRequests(on, off []simRequest) (p requestPairs) {
	byStart := make(map[time.Duration]simRequest, len(off))
	for _, r := range off {
		byStart[r.start] = r
	}
	var later time.Duration
	for _, r := range on {
		o, ok := byStart[r.start]
		if !ok {
			continue
		}
		p.paired++
		switch {
		case r.ok && o.ok:
			p.bothOK++
			later += r.latency - o.latency
		case o.ok:
			p.lost++
		case r.ok:
			p.won++
		default:
			p.bothFailed++
		}
	}
	if p.bothOK > 0 {
		p.later = later / time.Duration(p.bothOK)
	}
	return p
}

// TestTuneReleaseShare prints the ReleaseShare sweep of
// docs/storm-control.md; set HTTPRETRY_TUNE=1 to run it, and
// HTTPRETRY_TUNE_SEED to draw another run. It fails a share that rescues
// a point less than plain backoff, but for the steady client: one
// Transport's random values go to its requests in the order they draw
// them, which storm control changes, so that its figure and plain
// backoff's differ by a few requests from seed to seed whatever the share
// (TestSteadyClientThroughAnOutageRescuesAsPlainBackoff compares them
// with the same values, request by request).
func TestTuneReleaseShare(t *testing.T) {
	if os.Getenv("HTTPRETRY_TUNE") == "" {
		t.Skip("set HTTPRETRY_TUNE=1")
	}
	seed, _ := strconv.ParseUint(os.Getenv("HTTPRETRY_TUNE_SEED"), 10, 64)
	for _, share := range []float64{0.1, 0.25, 0.5, 1} {
		for _, name := range []string{"default", "shared", "retryafter", "steady"} {
			sc := defaultFleet()
			sc.seed = cmp.Or(seed, sc.seed)
			switch name {
			case "shared":
				sc.clients = 1
			case "retryafter":
				sc.retryAfter = true
			case "steady":
				sc.clients, sc.rate, sc.capacity = 1, 20, 0
			}
			m := runFleet(t, sc, StormControl{ReleaseShare: share}).metrics()
			t.Logf("share %.2f %-10s %v", share, name, m)
			if off := runFleet(t, sc, stormOff).metrics(); name != "steady" && m.success < off.success-0.01 {
				t.Errorf("share %.2f %s: %.1f%% rescued, off %.1f%%", share, name, 100*m.success, 100*off.success)
			}
		}
	}
}

// TestTuneLifeBound prints the success a design that keeps every request
// to its own backoff's life can reach at most, for the default fleet and
// the burst of docs/storm-control.md: a request that arrives during the
// outage is rescued only if its life (its waits, and its attempts at the
// scenario's latency) outlasts the outage. Set HTTPRETRY_TUNE=1 to run it.
// It fails if the simulator's default fleet, storm control on or off,
// rescues more than the bound allows.
func TestTuneLifeBound(t *testing.T) {
	if os.Getenv("HTTPRETRY_TUNE") == "" {
		t.Skip("set HTTPRETRY_TUNE=1")
	}
	r := rand.New(rand.NewPCG(1, 2))
	life := func(p Policy, latency time.Duration) time.Duration {
		var sum, prev time.Duration
		for n := 1; n <= p.retries(); n++ {
			prev = p.Delay(n, prev, r.Float64())
			sum += prev + latency
		}
		return sum + latency
	}
	bound := func(sc fleetScenario) float64 {
		const draws = 400_000
		lost := 0 // arrivals spread evenly over the outage
		outage := sc.down[1] - sc.down[0]
		for range draws {
			arrival := sc.down[0] + time.Duration(r.Float64()*float64(outage))
			if arrival+life(sc.policy, sc.latency) < sc.down[1] {
				lost++
			}
		}
		return 1 - float64(lost)/draws*min(float64(outage)/float64(sc.duration), 1)
	}
	fleet, equal := defaultFleet(), defaultFleet()
	equal.policy.Jitter = JitterEqual
	burstLost := 0 // the burst's requests all start as the blip does
	for range 400_000 {
		if life(Policy{}, time.Millisecond) < time.Second {
			burstLost++
		}
	}
	t.Logf("default fleet %.1f%%, with equal jitter %.1f%%; burst %.2f%%", 100*bound(fleet), 100*bound(equal), 100-float64(burstLost)/4000)
	limit := bound(fleet)
	for _, c := range []StormControl{{}, stormOff} {
		if got := runFleet(t, fleet, c).metrics().success; got > limit+0.01 {
			t.Errorf("the default fleet rescued %.1f%%, above the bound of %.1f%%", 100*got, 100*limit)
		}
	}
}
