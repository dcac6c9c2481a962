package httpretry

import (
	"context"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

// Regressions found by a review's differential harness: a held request L
// that fails in the end ended later, or after more attempts, than with
// storm control off. Each runs L among goroutines that call the same host
// in a loop, on and off side by side, L drawing its own random values in
// both (see goroutineRandom), so that only storm control differs.

// lRun is what became of L in one run.
type lRun struct {
	end   time.Duration
	sends []time.Duration
	code  int
}

// lAmong is one scenario: the Transport's Policy and MaxElapsed, L's
// request, the base (told whether the attempt is L's and when it goes),
// and the goroutines calling the host in a loop.
type lAmong struct {
	policy     Policy
	maxElapsed time.Duration
	lStart     time.Duration
	lReq       func() *http.Request
	answer     func(isL bool, n int, at time.Duration) (*http.Response, error) // n: L's attempt number
	loopers    int
	seed       uint64 // of the random streams
}

// run runs s with storm control c in a synctest bubble.
func (s lAmong) run(t *testing.T, c StormControl) (l lRun) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		var mu sync.Mutex
		tr := &Transport{Policy: s.policy, MaxElapsed: s.maxElapsed, Storm: c, Random: goroutineRandom(s.seed),
			Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
				isL, n := r.Header.Get("X-Who") == "L", 0
				if isL {
					mu.Lock()
					l.sends = append(l.sends, time.Since(t0)-s.lStart)
					n = len(l.sends)
					mu.Unlock()
				}
				return s.answer(isL, n, time.Since(t0))
			})}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for i := range s.loopers {
			wg.Go(func() {
				time.Sleep(time.Duration(i) * 7 * time.Millisecond) // virtual: synctest's clock
				for {
					select {
					case <-stop:
						return
					default:
					}
					if resp, err := tr.RoundTrip(httptest.NewRequest("GET", "http://h/", nil)); err == nil {
						resp.Body.Close()
					}
				}
			})
		}
		time.Sleep(s.lStart) // virtual: synctest's clock
		req := s.lReq()
		req.Header.Set("X-Who", "L")
		resp, err := tr.RoundTrip(req)
		l.end = time.Since(t0) - s.lStart
		if err == nil {
			l.code = resp.StatusCode
			resp.Body.Close()
		}
		close(stop)
		wg.Wait()
	})
	return l
}

// endsNoLaterOn checks that L, failing in both runs, ends no later and
// after no more attempts with storm control on than off.
func (s lAmong) endsNoLaterOn(t *testing.T) {
	t.Helper()
	on, off := s.run(t, StormControl{}), s.run(t, stormOff)
	if on.code == 200 || off.code == 200 {
		t.Fatalf("L succeeded: on %d, off %d; the scenario must make it fail", on.code, off.code)
	}
	if on.end > off.end || len(on.sends) > len(off.sends) {
		t.Errorf("L ended at %v after %d attempts %v; off at %v after %d %v", on.end, len(on.sends), on.sends, off.end, len(off.sends), off.sends)
	}
}

// goroutineRandom gives each goroutine a random stream of its own, seeded
// by the order in which goroutines first draw, so that L's waits use the
// same values on and off however the others' draws interleave with its.
func goroutineRandom(seed uint64) func() float64 {
	var mu sync.Mutex
	streams := map[uint64]*rand.Rand{}
	return func() float64 {
		id := goroutineID()
		mu.Lock()
		defer mu.Unlock()
		r := streams[id]
		if r == nil {
			r = rand.New(rand.NewPCG(seed, uint64(len(streams))))
			streams[id] = r
		}
		return r.Float64()
	}
}

// goroutineID reads the running goroutine's id from its stack header.
func goroutineID() uint64 {
	var buf [64]byte
	s := strings.TrimPrefix(string(buf[:runtime.Stack(buf[:], false)]), "goroutine ")
	id, _ := strconv.ParseUint(s[:strings.IndexByte(s, ' ')], 10, 64)
	return id
}

// deadFor answers 503 to every attempt, after lat (L's after lLat).
func deadFor(lat, lLat time.Duration) func(bool, int, time.Duration) (*http.Response, error) {
	return func(isL bool, _ int, _ time.Duration) (*http.Response, error) {
		d := lat
		if isL {
			d = lLat
		}
		time.Sleep(d) // virtual: synctest's clock
		return response(503, ""), nil
	}
}

// TestHeldPOSTIsNotHeldForRetriesItCannotMake: a POST's first attempt is
// refused (never sent, so it may be retried), its retry reaches the
// server and gets a 503, and a POST that reached the server is not retried
// again. Its retry was held for the life of the five retries its Policy
// allows: it ended 630 ms after its start where plain backoff ends it at
// 220 ms.
func TestHeldPOSTIsNotHeldForRetriesItCannotMake(t *testing.T) {
	lAmong{
		policy: Policy{MaxRetries: 5, BaseDelay: 200 * time.Millisecond, MaxDelay: 2 * time.Second, Jitter: JitterNone},
		lStart: time.Second, loopers: 8,
		lReq: func() *http.Request { return httptest.NewRequest("POST", "http://h/", strings.NewReader("x")) },
		answer: func(isL bool, n int, _ time.Duration) (*http.Response, error) {
			time.Sleep(10 * time.Millisecond) // virtual: synctest's clock
			if isL && n == 1 {
				return nil, syscall.ECONNREFUSED
			}
			return response(503, ""), nil
		},
	}.endsNoLaterOn(t)
}

// TestReleasedHeldRequestStopsWhereItsOwnBackoffWould: L, held while the
// others fail, is let go by the line between the host's answers (300 ms
// in every 700); its later waits, fresh draws of decorrelated jitter cut
// to its life's end, fitted under MaxElapsed where its own backoff's did
// not, and it sent 6 attempts where plain backoff sends 5 (9 of 40 seeds).
// Its waits now end at its life's steps, and a wait plain backoff would
// not start is not started, cut or not.
func TestReleasedHeldRequestStopsWhereItsOwnBackoffWould(t *testing.T) {
	for seed := range uint64(releaseSeeds) {
		lAmong{seed: seed,
			policy:     Policy{MaxRetries: 5, BaseDelay: 100 * time.Millisecond, MaxDelay: time.Second},
			maxElapsed: 3500 * time.Millisecond, lStart: time.Second, loopers: 8,
			lReq: func() *http.Request {
				p := Policy{MaxRetries: 8, BaseDelay: 200 * time.Millisecond, MaxDelay: 800 * time.Millisecond, Jitter: JitterDecorrelated}
				return httptest.NewRequest("GET", "http://h/", nil).WithContext(WithPolicy(context.Background(), p))
			},
			answer: func(isL bool, _ int, at time.Duration) (*http.Response, error) {
				time.Sleep(10 * time.Millisecond) // virtual: synctest's clock
				if !isL && at%(700*time.Millisecond) < 300*time.Millisecond {
					return response(200, ""), nil
				}
				return response(503, ""), nil
			},
		}.endsNoLaterOn(t)
	}
}

// TestHeldLifeEndsAtItsLastStepThatFitsTheDeadline: L's attempts take
// 300 ms, the others' 5 ms, and L's life was fitted to its 4 s deadline
// by the host's attempt time. Once its own attempts were timed, its life's
// end was put at the deadline less one attempt, 3.7 s, not at a step of
// its own backoff: its last retry failed at the deadline, 0.3 s after
// plain backoff's last. Now the life ends at its last step whose attempt
// fails before the deadline.
func TestHeldLifeEndsAtItsLastStepThatFitsTheDeadline(t *testing.T) {
	lAmong{
		policy:  Policy{MaxRetries: 5, BaseDelay: 100 * time.Millisecond, MaxDelay: time.Second, Jitter: JitterNone},
		loopers: 1,
		lReq: func() *http.Request {
			p := Policy{MaxRetries: 8, BaseDelay: 200 * time.Millisecond, MaxDelay: 800 * time.Millisecond, Jitter: JitterNone}
			ctx, cancel := context.WithTimeout(WithPolicy(context.Background(), p), 4*time.Second)
			t.Cleanup(cancel)
			return httptest.NewRequest("GET", "http://h/", nil).WithContext(ctx)
		},
		answer: deadFor(5*time.Millisecond, 300*time.Millisecond),
	}.endsNoLaterOn(t)
}

// releaseSeeds is how many seeds of the random streams the release test
// runs: 9 of 40 failed before its rule.
const releaseSeeds = 40
