package httpretry

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// Groups of requests drawn at random, with storm control on and off side
// by side (saysRun): how many of plain backoff's rescues storm control
// keeps where the host is neither simply up nor simply down. The counts
// move by a request or two from run to run, as requests that act at the
// same virtual instant take the host's state in either order.

// groupTally counts, over drawn groups, the requests plain backoff
// rescues, those storm control rescues, and those it loses of the first;
// the attempts sent with storm control on and off; the requests that
// fail both ways but end later with storm control; and how long the
// requests rescued both ways took in all, on and off.
type groupTally struct {
	rescued, onRescued, lost, onSent, offSent, laterFailed int
	onTook, offTook                                        time.Duration
}

// add runs one group on and off (see saysRun), each run with a server
// from serve, and counts it.
func (g *groupTally) add(t *testing.T, pol Policy, seed int, starts []time.Duration, serve func() func(i int, at time.Duration) *http.Response) {
	g.addOn(t, clients{n: 1}, pol, seed, starts, nil, serve)
}

// addOn is add with the group's requests sent through cl, each to its
// path, all to one when paths is nil (see saysRunOn).
func (g *groupTally) addOn(t *testing.T, cl clients, pol Policy, seed int, starts []time.Duration, paths []string, serve func() func(i int, at time.Duration) *http.Response) {
	if paths == nil {
		paths = make([]string, len(starts))
	}
	on := saysRunOn(t, cl, StormControl{}, pol, uint64(seed), starts, paths, serve())
	off := saysRunOn(t, cl, stormOff, pol, uint64(seed), starts, paths, serve())
	for i := range starts {
		g.onSent, g.offSent = g.onSent+len(on[i].sends), g.offSent+len(off[i].sends)
		if off[i].code == 200 {
			g.rescued++
			if on[i].code != 200 {
				g.lost++
			}
		}
		if on[i].code == 200 {
			g.onRescued++
		}
		if on[i].code == 200 && off[i].code == 200 {
			g.onTook, g.offTook = g.onTook+on[i].end, g.offTook+off[i].end
		}
		if on[i].code != 200 && off[i].code != 200 && on[i].end > off[i].end {
			g.laterFailed++
		}
	}
}

// byAttempt returns a server factory whose answer to request i's k-th
// attempt (from 0), sent at at, is answer(i, k, at); only request i's
// goroutine counts its attempts.
func byAttempt(n int, answer func(i, k int, at time.Duration) *http.Response) func() func(i int, at time.Duration) *http.Response {
	return func() func(i int, at time.Duration) *http.Response {
		attempts := make([]int, n)
		return func(i int, at time.Duration) *http.Response {
			attempts[i]++
			return answer(i, attempts[i]-1, at)
		}
	}
}

// byFails returns a server factory whose answer to request i's k-th
// attempt is 503 when fails[i][k], 200 otherwise.
func byFails(fails [][]bool) func() func(i int, at time.Duration) *http.Response {
	return byAttempt(len(fails), func(i, k int, _ time.Duration) *http.Response {
		if fails[i][k] {
			return response(503, "busy")
		}
		return response(200, "ok")
	})
}

// TestRandomFailuresAreNotTakenForAnOutage: groups of 20 to 220 requests
// on a host that fails each attempt at random, 60% of them, the same
// attempts on and off (each request's k-th attempt fails on both or on
// neither). A few failures in a row from a host whose state had only just
// been created were enough to prove an outage once it was two attempts'
// time old, and held retries skipped steps whose attempts would have been
// answered: 41 of 31,915 rescues lost in 300 groups (7 of 6,191 in the
// first 60). An outage was then proven by its age only once 8 attempts
// in a row had failed: 9 of 31,915 (1 of 6,191; 56 of 217,877 in 2,000
// groups); it takes 16 now, as many small clients needed (see
// TestManySmallClientsDoNotTakeRandomFailuresForAnOutage): 0 of 217,877.
func TestRandomFailuresAreNotTakenForAnOutage(t *testing.T) {
	t.Parallel() // virtual time only: runs beside the other simulations
	g := randomFailureGroups(t, rand.New(rand.NewPCG(81, 82)), 5, func(*rand.Rand) float64 { return 0.6 })
	t.Logf("storm control lost %d of plain backoff's %d rescues", g.lost, g.rescued)
	if g.lost*2000 > g.rescued {
		t.Errorf("storm control lost %d of plain backoff's %d rescues from a host failing 60%% at random", g.lost, g.rescued)
	}
}

// TestHostsFailingMostAttemptsAtRandomKeepTheirRescues: as
// TestRandomFailuresAreNotTakenForAnOutage, on hosts that fail 70% to 95%
// of attempts at random. Their runs of 16 failures in a row, which come
// often, were taken for outages, and the held retries skipped steps that
// plain backoff sent and had answered: 308 of 4,978 rescues lost in these
// 60 groups, 2,156 of 23,640 in 300. A run makes such a host down now
// only once it is as rare at its rate as 16 are at 60% (see
// host.downRun): 10 and 120 lost, from states too young to know their
// rate (10 and 155 now, 13 and 151 at ac8aefe; at 600 groups, 380 of
// 46,859, over 1% with the shed window kept through a relapse before the
// run that opens one scaled with downRun: see shedAfterRun; 400-402 since
// a young state's window opens after 24).
func TestHostsFailingMostAttemptsAtRandomKeepTheirRescues(t *testing.T) {
	t.Parallel() // virtual time only: runs beside the other simulations
	g := randomFailureGroups(t, rand.New(rand.NewPCG(83, 84)), 8, func(r *rand.Rand) float64 { return 0.7 + 0.25*r.Float64() })
	t.Logf("storm control lost %d of plain backoff's %d rescues", g.lost, g.rescued)
	if g.lost*100 > g.rescued {
		t.Errorf("storm control lost %d of plain backoff's %d rescues from hosts failing 70-95%% at random", g.lost, g.rescued)
	}
}

// randomFailureGroups runs propertySeeds(60) groups of 20 to 220 requests
// started over 0.1 to 3.1 s, each with a Policy of 2 to 1+moreRetries
// retries, on a host failing each attempt at random at the group's rate
// (drawn by rate from r), the same attempts on and off.
func randomFailureGroups(t *testing.T, r *rand.Rand, moreRetries int, rate func(*rand.Rand) float64) (g groupTally) {
	for seed := range propertySeeds(60) {
		base := time.Duration(5+r.IntN(50)) * time.Millisecond
		pol := Policy{MaxRetries: 2 + r.IntN(moreRetries), BaseDelay: base, MaxDelay: base * time.Duration(2+r.IntN(50)), Jitter: Jitter(r.IntN(4))}
		n := 20 + r.IntN(200)
		span := time.Duration(100+r.IntN(3000)) * time.Millisecond
		failRate := rate(r)
		starts, fails := make([]time.Duration, n), make([][]bool, n)
		for i := range n {
			starts[i] = time.Duration(r.Int64N(int64(span)))
			for range 1 + pol.retries() {
				fails[i] = append(fails[i], r.Float64() < failRate)
			}
		}
		g.add(t, pol, seed, starts, byFails(fails))
	}
	return g
}

// TestManySmallClientsDoNotTakeRandomFailuresForAnOutage: 5 to 205
// clients of one host, each with its own Transport and a few requests a
// second (100 to 1,000 in all), the host failing 60% of attempts at
// random, the same attempts on and off. A client's host state is made at
// a failure and dropped when its last retrying request ends, so a small
// client's state is young again and again; when 8 failures in a row
// proved an outage in a young state (as they did until a host had
// answered), held retries skipped steps whose attempts would have been
// answered: 21 of 7,753 rescues lost over these 5 groups (108 of 29,630
// over 20; in a review's harness with deadlines, 53 of 21,913, and none
// with the same requests through one Transport). An outage needs 16
// failures in a row to be proven now, however young the state: 1 or 2,
// from run to run (3 of
// 29,630; 7 of 101,182 over 40 of the review's groups).
func TestManySmallClientsDoNotTakeRandomFailuresForAnOutage(t *testing.T) {
	t.Parallel() // virtual time only: runs beside the other simulations
	r := rand.New(rand.NewPCG(601, 602))
	var g groupTally
	for seed := range propertySeeds(5) {
		pol := Policy{MaxRetries: 8, BaseDelay: 20 * time.Millisecond, MaxDelay: time.Second, Jitter: Jitter(r.IntN(4))}
		rate := 100 + 900*r.Float64()
		var starts []time.Duration
		for at := time.Duration(r.ExpFloat64() / rate * float64(time.Second)); at < 3*time.Second; at += time.Duration(r.ExpFloat64() / rate * float64(time.Second)) {
			starts = append(starts, at)
		}
		fails := make([][]bool, len(starts))
		for i := range fails {
			for range 1 + pol.retries() {
				fails[i] = append(fails[i], r.Float64() < 0.6)
			}
		}
		g.addOn(t, clients{n: 5 + r.IntN(200)}, pol, seed, starts, nil, byFails(fails))
	}
	t.Logf("storm control lost %d of plain backoff's %d rescues", g.lost, g.rescued)
	if g.lost*1000 > g.rescued { // 1 or 2 lost of 7,753 from run to run; 21 with proof at 8
		t.Errorf("storm control lost %d of plain backoff's %d rescues from a host failing 60%% at random", g.lost, g.rescued)
	}
}

// TestSomeRetryAftersAreWaitedBySkippedSteps: groups of 2 to 30 requests
// on a host down for 1 to 7 s, whose failures say Retry-After (1 to 3 s)
// now and then, a share q of them drawn per group. A held request never
// told one skipped its steps at its own backoff's pace, while plain
// backoff's attempts there were told the Retry-After and carried past
// the outage: its last step went long before the host was back (1,054
// rescued of plain backoff's 1,185 in 100 groups; in a review's groups
// with deadlines, 2,148 of 2,432). A skipped step now waits what the
// host says, as plain backoff's attempt there would be told, whatever the
// request was told itself: 1,176 of 1,185 (2,424 of 2,432); 1,186
// (2,458) since a retry let go between steps keeps the last step
// (TestHostBackSheddingRescuesAsPlainBackoff), and 1,195 since a step
// left by one still out at it waits its own backoff
// (TestRetryStillOutAtItsStepMakesNoAttemptMore); 1,198 since an outage
// needs 16 failures in a row to be proven.
func TestSomeRetryAftersAreWaitedBySkippedSteps(t *testing.T) {
	t.Parallel() // virtual time only: runs beside the other simulations
	r := rand.New(rand.NewPCG(131, 132))
	var g groupTally
	for seed := range propertySeeds(100) {
		base := time.Duration(10+r.IntN(300)) * time.Millisecond
		pol := Policy{MaxRetries: 2 + r.IntN(7), BaseDelay: base, MaxDelay: base * time.Duration(1+r.IntN(8)), Jitter: Jitter(r.IntN(4))}
		n, upAt, q := 2+r.IntN(29), time.Duration(1000+r.IntN(6000))*time.Millisecond, r.Float64()
		starts, says := make([]time.Duration, n), make([][]string, n)
		for i := range n {
			starts[i] = time.Duration(r.IntN(3000)) * time.Millisecond
			for range 1 + pol.retries() {
				ra := ""
				if r.Float64() < q {
					ra = strconv.Itoa(1 + r.IntN(3))
				}
				says[i] = append(says[i], ra)
			}
		}
		g.add(t, pol, seed, starts, byAttempt(n, func(i, k int, at time.Duration) *http.Response {
			switch {
			case at >= upAt:
				return response(200, "ok")
			case says[i][k] == "":
				return response(503, "down")
			}
			return says429(says[i][k])
		}))
	}
	t.Logf("storm control rescued %d, plain backoff %d (%d of them lost held)", g.onRescued, g.rescued, g.lost)
	if g.onRescued*100 < g.rescued*98 {
		t.Errorf("storm control rescued %d, plain backoff %d: under 98%%", g.onRescued, g.rescued)
	}
}

// TestHostBackSheddingRescuesAsPlainBackoff: groups of 5 to 80 requests on
// a host down for 0.5 to 5.5 s that comes back shedding: it answers 1 to
// 4 attempts in each 100 ms and refuses the rest with 429 and
// Retry-After: 1 or 2. A held request let go between its steps and
// refused stood, told a Retry-After that outlasts its next step, for that
// step sent early; when that was its last, the request ended at once,
// where plain backoff's last step went later and often found a free slot:
// 2,205 rescued against plain backoff's 2,243 in 100 groups (a review's
// groups with deadlines: 3,828 of 3,966). It now waits the Retry-After
// out and sends its last step then: 2,313 (2,316 of 2,244 since an outage
// needs 16 failures in a row to be proven).
func TestHostBackSheddingRescuesAsPlainBackoff(t *testing.T) {
	t.Parallel() // virtual time only: runs beside the other simulations
	r := rand.New(rand.NewPCG(111, 112))
	var g groupTally
	for seed := range propertySeeds(100) {
		base := time.Duration(10+r.IntN(300)) * time.Millisecond
		pol := Policy{MaxRetries: 2 + r.IntN(7), BaseDelay: base, MaxDelay: base * time.Duration(1+r.IntN(8)), Jitter: Jitter(r.IntN(4))}
		n, upAt, k, ra := 5+r.IntN(76), time.Duration(500+r.IntN(5000))*time.Millisecond, 1+r.IntN(4), strconv.Itoa(1+r.IntN(2))
		starts := make([]time.Duration, n)
		for i := range n {
			starts[i] = time.Duration(r.IntN(3000)) * time.Millisecond
		}
		g.add(t, pol, seed, starts, func() func(i int, at time.Duration) *http.Response {
			var mu sync.Mutex
			answered := map[time.Duration]int{} // per 100 ms of the run
			return func(_ int, at time.Duration) *http.Response {
				if at < upAt {
					return response(503, "down")
				}
				mu.Lock()
				defer mu.Unlock()
				if slot := at / (100 * time.Millisecond); answered[slot] < k {
					answered[slot]++
					return response(200, "ok")
				}
				return says429(ra)
			}
		})
	}
	t.Logf("storm control rescued %d, plain backoff %d (%d of them lost held)", g.onRescued, g.rescued, g.lost)
	if g.onRescued < g.rescued {
		t.Errorf("storm control rescued %d, plain backoff %d", g.onRescued, g.rescued)
	}
}

// TestSteadyClientThroughAnOutageRescuesAsPlainBackoff: one Transport whose
// requests arrive at random, 20 a second for 7 s (about 140), through a
// host down from 1 s to 4 s, with the simulator's fleet Policy or the
// default one: the steady client of docs/storm-control.md, whose virtual
// fleet figure differs from plain backoff's by a few requests from seed
// to seed as the two draw their random values in different orders. With
// the same values, request by request, storm control rescues every
// request plain backoff does, none that fails ends later, and it sends
// fewer attempts: over 8 groups, 856 of
// 856 in 1,669 attempts against 4,262 (fleet Policy), 1,092 of 1,092 in
// 1,712 against 3,136 (default Policy); over 2,000, 226,974 and 263,952
// rescues, none lost (1,631 and 1,675 attempts when 8 failures in a row
// proved an outage in a young state).
func TestSteadyClientThroughAnOutageRescuesAsPlainBackoff(t *testing.T) {
	t.Parallel() // virtual time only: runs beside the other simulations
	r := rand.New(rand.NewPCG(91, 92))
	for _, pol := range []Policy{{MaxRetries: 8, BaseDelay: 20 * time.Millisecond, MaxDelay: time.Second}, {}} {
		var g groupTally
		for seed := range propertySeeds(8) {
			var starts []time.Duration
			for at := time.Duration(r.ExpFloat64() / 20 * float64(time.Second)); at < 7*time.Second; at += time.Duration(r.ExpFloat64() / 20 * float64(time.Second)) {
				starts = append(starts, at)
			}
			g.add(t, pol, seed, starts, func() func(int, time.Duration) *http.Response {
				return func(_ int, at time.Duration) *http.Response {
					if at >= time.Second && at < 4*time.Second {
						return response(503, "down")
					}
					return response(200, "ok")
				}
			})
		}
		t.Logf("%+v: storm control rescued %d, plain backoff %d (%d of them lost); attempts %d, plain backoff %d",
			pol, g.onRescued, g.rescued, g.lost, g.onSent, g.offSent)
		if g.lost > 0 || g.onSent >= g.offSent || g.laterFailed > 0 {
			t.Errorf("%+v: storm control lost %d of plain backoff's %d rescues, sending %d attempts against %d; %d failed requests ended later",
				pol, g.lost, g.rescued, g.onSent, g.offSent, g.laterFailed)
		}
	}
}

// TestSkippedStepsTakeAsLongAsASlowOnRetry: groups of 3 to 32 requests
// through a host down for 0.5 to 8.5 s, OnRetry taking 10 to 500 ms
// (a callback that logs somewhere slow). Plain backoff's retry at each
// step takes the callback's time before it goes; a held request's
// skipped step counted only its attempt's, so its steps ran ahead, and
// its last went before the host was back where plain backoff's found it:
// 26 of 377 rescues lost over these 40 groups, 220 of 1,497 over 150 (a
// review's groups with deadlines: 308 of 1,669). A skipped step now
// counts the Transport's latest OnRetry time too: none (19 of the
// review's 1,669).
func TestSkippedStepsTakeAsLongAsASlowOnRetry(t *testing.T) {
	t.Parallel() // virtual time only: runs beside the other simulations
	r := rand.New(rand.NewPCG(701, 702))
	var g groupTally
	for seed := range propertySeeds(40) {
		base := time.Duration(10+r.IntN(300)) * time.Millisecond
		pol := Policy{MaxRetries: 2 + r.IntN(8), BaseDelay: base, MaxDelay: base * time.Duration(1+r.IntN(8)), Jitter: Jitter(r.IntN(4))}
		n, upAt := 3+r.IntN(30), time.Duration(500+r.IntN(8000))*time.Millisecond
		onRetry := time.Duration(10+r.IntN(490)) * time.Millisecond
		starts := make([]time.Duration, n)
		for i := range n {
			starts[i] = time.Duration(r.Int64N(int64(upAt)))
		}
		g.addOn(t, clients{n: 1, onRetry: onRetry}, pol, seed, starts, nil, func() func(int, time.Duration) *http.Response {
			return func(_ int, at time.Duration) *http.Response {
				if at < upAt {
					return response(503, "down")
				}
				return response(200, "ok")
			}
		})
	}
	t.Logf("storm control lost %d of plain backoff's %d rescues", g.lost, g.rescued)
	if g.lost*100 > g.rescued {
		t.Errorf("storm control lost %d of plain backoff's %d rescues to a slow OnRetry", g.lost, g.rescued)
	}
}

// TestEndpointBesideADeadOneKeepsItsRescues: groups of 4 to 43 requests
// to one host, some to an endpoint that fails half its attempts at
// random, the rest to one that is down, the same attempts on and off.
// The dead endpoint's failures made the host look down, and the other
// endpoint's retries were held and skipped steps that would have been
// answered: 33 of 1,253 rescues lost in these 150 groups (75 of 2,560
// in 300). A path that answered lately, and has not failed 16 attempts
// since, is not down for its requests (see host.pathFailed): 9 (22).
func TestEndpointBesideADeadOneKeepsItsRescues(t *testing.T) {
	t.Parallel() // virtual time only: runs beside the other simulations
	r := rand.New(rand.NewPCG(93, 94))
	var g groupTally
	for seed := range propertySeeds(150) {
		base := time.Duration(5+r.IntN(100)) * time.Millisecond
		pol := Policy{MaxRetries: 2 + r.IntN(6), BaseDelay: base, MaxDelay: base * time.Duration(2+r.IntN(10)), Jitter: Jitter(r.IntN(4))}
		n, live := 4+r.IntN(40), 0.1+0.5*r.Float64()
		span := time.Duration(100+r.IntN(4000)) * time.Millisecond
		starts, paths, fails := make([]time.Duration, n), make([]string, n), make([][]bool, n)
		for i := range n {
			starts[i], paths[i] = time.Duration(r.Int64N(int64(span))), "dead"
			if r.Float64() < live {
				paths[i] = "live"
			}
			for range 1 + pol.retries() {
				fails[i] = append(fails[i], paths[i] == "dead" || r.Float64() < 0.5)
			}
		}
		g.addOn(t, clients{n: 1}, pol, seed, starts, paths, byFails(fails))
	}
	t.Logf("storm control lost %d of plain backoff's %d rescues", g.lost, g.rescued)
	if g.lost*60 > g.rescued {
		t.Errorf("storm control lost %d of plain backoff's %d rescues beside a dead endpoint", g.lost, g.rescued)
	}
}

// TestPathBesideADeadEndpointIsFoundBack: groups of 1 to 30 requests to
// an endpoint that is down until a drawn moment, never having answered,
// sent beside a steady flow of requests to one that is always down, the
// same attempts on and off. The dead endpoint's failures kept the host
// down, and the other endpoint's held retries skipped their steps until
// their last, long after it was back: in these 80 groups, none of plain
// backoff's 1,107 rescues was lost, but they took 3.27x as long in all.
// The dead endpoint's failures and fresh requests now tell nothing of the
// other's path (see host.besideFailingPath), a step goes once its own
// path has answered, and the line's probe is the other path's: 0.95x.
func TestPathBesideADeadEndpointIsFoundBack(t *testing.T) {
	t.Parallel() // virtual time only: runs beside the other simulations
	r := rand.New(rand.NewPCG(95, 96))
	var g groupTally
	for seed := range propertySeeds(80) {
		pol := Policy{MaxRetries: 3 + r.IntN(5), Jitter: Jitter(r.IntN(4))}
		blips, dead, upAt := 1+r.IntN(30), 20+r.IntN(40), time.Duration(200+r.IntN(1500))*time.Millisecond
		starts, paths := make([]time.Duration, blips+dead), make([]string, blips+dead)
		for i := range starts {
			starts[i], paths[i] = time.Duration(r.Int64N(int64(3*time.Second))), "dead"
			if i < blips {
				starts[i], paths[i] = 100*time.Millisecond+time.Duration(r.Int64N(int64(upAt/2))), "blip"
			}
		}
		g.addOn(t, clients{n: 1}, pol, seed, starts, paths, func() func(int, time.Duration) *http.Response {
			return func(i int, at time.Duration) *http.Response {
				if i >= blips || at < upAt {
					return response(503, "down")
				}
				return response(200, "ok")
			}
		})
	}
	ratio := float64(g.onTook) / float64(g.offTook)
	t.Logf("storm control lost %d of plain backoff's %d rescues; the rest took %.2fx as long", g.lost, g.rescued, ratio)
	if g.lost*100 > g.rescued || ratio > 1.05 {
		t.Errorf("beside a dead endpoint, storm control lost %d of plain backoff's %d rescues, and the rest took %.2fx as long", g.lost, g.rescued, ratio)
	}
}

// TestFirstCallsBesideADeadEndpointAreNotHeld: 10 goroutines call a dead
// endpoint of a host, 5 calls each, and 2 call another whose every call's
// first attempt fails and whose retry is answered. The second endpoint's
// path had not answered when its first call failed, so its retry was
// held for the dead endpoint's outage: calls up to 3.7 s, 1.6-8.5 s in
// all per seed, against plain backoff's 0.2 s and 0.8-1.3 s. Beside a
// path that keeps failing its news is its own (see
// host.besideFailingPath): as plain backoff's.
func TestFirstCallsBesideADeadEndpointAreNotHeld(t *testing.T) {
	run := func(c StormControl, seed uint64) (total time.Duration) {
		synctest.Test(t, func(t *testing.T) {
			streams := newRequestStreams(seed)
			var mu sync.Mutex
			answered := map[string]bool{}
			tr := &Transport{Storm: c, Random: streams.random, Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
				time.Sleep(2 * time.Millisecond) // virtual
				mu.Lock()
				defer mu.Unlock()
				call := r.Header.Get("X-Call")
				if r.URL.Path == "/dead" || !answered[call] {
					answered[call] = r.URL.Path != "/dead"
					return response(503, "down"), nil
				}
				return response(200, "ok"), nil
			})}
			var wg sync.WaitGroup
			for g := range 12 {
				wg.Go(func() {
					streams.join(uint64(g))
					for k := range 5 {
						path := "/dead"
						if g >= 10 {
							path = "/flaky"
							time.Sleep(50 * time.Millisecond) // virtual: the dead endpoint's calls fail first
						}
						req := httptest.NewRequest("GET", "http://h"+path, nil)
						req.Header.Set("X-Call", fmt.Sprint(g, "-", k))
						start := time.Now()
						if resp, err := tr.RoundTrip(req); err == nil {
							resp.Body.Close()
						}
						if g >= 10 {
							mu.Lock()
							total += time.Since(start)
							mu.Unlock()
						}
					}
				})
			}
			wg.Wait()
		})
		return total
	}
	for seed := uint64(1); seed <= 3; seed++ {
		on, off := run(StormControl{}, seed), run(stormOff, seed)
		if float64(on) > 1.1*float64(off) {
			t.Errorf("seed %d: the calls beside a dead endpoint took %v in all, %v with plain backoff", seed, on, off)
		}
	}
}
