package httpretry

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

// Storm control as a user meets it: every test here runs on synctest's
// clock, beside the same requests with storm control off.

// seeded returns a Random source that gives the same values for the same
// seed, safe for concurrent use.
func seeded(seed uint64) func() float64 {
	var mu sync.Mutex
	r := rand.New(rand.NewPCG(seed, seed))
	return func() float64 {
		mu.Lock()
		defer mu.Unlock()
		return r.Float64()
	}
}

// outcome is one scripted answer of a base transport.
type outcome struct {
	code       int    // 0: a transport error
	retryAfter string // Retry-After, for a 429 or 503
}

func (o outcome) answer() (*http.Response, error) {
	if o.code == 0 {
		return nil, syscall.ECONNRESET
	}
	resp := response(o.code, http.StatusText(o.code))
	if o.retryAfter != "" {
		resp.Header.Set("Retry-After", o.retryAfter)
	}
	return resp, nil
}

// sequentialRun is what one goroutine saw making calls one after another.
type sequentialRun struct {
	attempts []time.Duration // when each attempt was sent, from the start
	results  []string        // each call's outcome
}

// runSequential makes calls requests one after another through a
// Transport with policy p and storm control c, answered in turn by
// script (the last entry repeats), and records what happened.
func runSequential(t *testing.T, p Policy, c StormControl, script []outcome, calls int, deadline time.Duration, seed uint64) sequentialRun {
	var run sequentialRun
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		i := 0
		tr := &Transport{Policy: p, Storm: c, Random: seeded(seed), Base: roundTripFunc(func(*http.Request) (*http.Response, error) {
			run.attempts = append(run.attempts, time.Since(start))
			o := script[min(i, len(script)-1)]
			i++
			return o.answer()
		})}
		for range calls {
			ctx, cancel := context.Background(), context.CancelFunc(func() {})
			if deadline > 0 {
				ctx, cancel = context.WithTimeout(ctx, deadline)
			}
			resp, err := tr.RoundTrip(httptest.NewRequest("GET", "http://lone/", nil).WithContext(ctx))
			cancel()
			if err != nil {
				run.results = append(run.results, err.Error())
				continue
			}
			resp.Body.Close()
			run.results = append(run.results, resp.Status)
		}
	})
	return run
}

// randomPolicy draws a Policy, jitter kind included.
func randomPolicy(r *rand.Rand) Policy {
	return Policy{
		MaxRetries: r.IntN(9) - 1,
		BaseDelay:  time.Duration(r.IntN(300)) * time.Millisecond,
		MaxDelay:   time.Duration(r.IntN(3000)) * time.Millisecond,
		Jitter:     Jitter(r.IntN(4)),
	}
}

// randomScript draws a sequence of outcomes: mostly retryable failures,
// some answers, a few Retry-Afters.
func randomScript(r *rand.Rand) []outcome {
	kinds := []outcome{{code: 503}, {code: 503}, {code: 502}, {code: 0}, {code: 200}, {code: 404}, {code: 429, retryAfter: "1"}, {code: 503, retryAfter: "2"}}
	s := make([]outcome, 5+r.IntN(40))
	for i := range s {
		s[i] = kinds[r.IntN(len(kinds))]
	}
	return s
}

// TestLoneRequestWaitsExactlyAsWithoutStormControl is rule 1 as a
// property: a client whose requests run one at a time, whatever its
// Policy and whatever the host answers, sends every attempt at the same
// moment with storm control on as with it off, for the same Random values,
// and gets the same outcomes, call after call.
func TestLoneRequestWaitsExactlyAsWithoutStormControl(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	for trial := range 300 {
		p, script := randomPolicy(r), randomScript(r)
		calls, seed := 1+r.IntN(6), r.Uint64()
		var deadline time.Duration
		if r.IntN(3) == 0 {
			deadline = time.Duration(100+r.IntN(3000)) * time.Millisecond
		}
		on := runSequential(t, p, StormControl{}, script, calls, deadline, seed)
		off := runSequential(t, p, stormOff, script, calls, deadline, seed)
		if fmt.Sprint(on) != fmt.Sprint(off) {
			t.Fatalf("trial %d, %+v, %d calls, deadline %v:\non  %v\noff %v", trial, p, calls, deadline, on, off)
		}
	}
}

// TestSequentialCallsToAFailingHost is the first row of the table in
// docs/storm-control.md: four calls in a row to a host that always
// answers 503 each take their own backoff, the later ones no longer than
// the first, and each makes all its attempts.
func TestSequentialCallsToAFailingHost(t *testing.T) {
	p := Policy{MaxRetries: 5, BaseDelay: 200 * time.Millisecond, MaxDelay: 2 * time.Second}
	script := []outcome{{code: 503}}
	on := runSequential(t, p, StormControl{}, script, 4, 0, 42)
	off := runSequential(t, p, stormOff, script, 4, 0, 42)
	if len(on.attempts) != 24 || fmt.Sprint(on.attempts) != fmt.Sprint(off.attempts) {
		t.Errorf("attempts with storm control on: %v\noff: %v", on.attempts, off.attempts)
	}
}

// TestFullJitterOfALoneRequest: a lone request's waits are its own full
// jitter, u·d, never snapped to a step or the cap.
func TestFullJitterOfALoneRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		us := []float64{0.9, 0.1, 0.5, 0.0, 0.99}
		i := 0
		var waits []time.Duration
		tr := &Transport{
			Policy:  Policy{MaxRetries: 5, BaseDelay: 100 * time.Millisecond, MaxDelay: 300 * time.Millisecond},
			Random:  func() float64 { u := us[i%len(us)]; i++; return u },
			OnRetry: func(e RetryEvent) { waits = append(waits, e.Wait) },
			Base:    roundTripFunc(func(*http.Request) (*http.Response, error) { return response(503, ""), nil }),
		}
		resp, err := tr.RoundTrip(httptest.NewRequest("GET", "http://lone/", nil))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		want := []time.Duration{90 * time.Millisecond, 20 * time.Millisecond, 150 * time.Millisecond, 0, 297 * time.Millisecond}
		if fmt.Sprint(waits) != fmt.Sprint(want) {
			t.Errorf("waits %v, want %v", waits, want)
		}
	})
}

// TestRetryAfterAboveTheRetryHorizonIsHonoured: a 429 asking for 2 s is
// waited for even though MaxRetries × MaxDelay is 1.5 s, alone and in a
// crowd of requests all told the same.
func TestRetryAfterAboveTheRetryHorizonIsHonoured(t *testing.T) {
	for _, n := range []int{1, 20} {
		t.Run(fmt.Sprintf("%d requests", n), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				var seen sync.Map // request → attempts
				var early atomic.Int32
				tr := &Transport{Policy: Policy{MaxRetries: 3, MaxDelay: 500 * time.Millisecond}, Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
					id := r.Header.Get("Id")
					if _, loaded := seen.LoadOrStore(id, true); !loaded {
						return outcome{code: 429, retryAfter: "2"}.answer()
					}
					if time.Since(start) < 2*time.Second {
						early.Add(1)
					}
					return response(200, "ok"), nil
				})}
				var wg sync.WaitGroup
				for i := range n {
					wg.Go(func() {
						req := httptest.NewRequest("GET", "http://limited/", nil)
						req.Header.Set("Id", fmt.Sprint(i))
						resp, err := tr.RoundTrip(req)
						if err != nil || resp.StatusCode != 200 {
							t.Errorf("got %v %v, want the 200 after the Retry-After", resp, err)
							return
						}
						resp.Body.Close()
						if d := time.Since(start); d < 2*time.Second || d > 3*time.Second {
							t.Errorf("done after %v, want 2 s to 3 s", d)
						}
					})
				}
				wg.Wait()
				if early.Load() > 0 {
					t.Errorf("%d retries before the Retry-After date", early.Load())
				}
			})
		})
	}
}

// TestDeadlineEndsHeldAndUnheldWaitsWithTheLastResponse: with a 300 ms
// deadline and a host that always answers 503, every request, alone or
// among twenty, returns its last 503 with a nil error, never later than
// its deadline, with StopDeadline as without storm control (a held
// request's life, cut short by the deadline, ends as its own backoff would
// have), and OnRetry is called only for retries that were sent.
func TestDeadlineEndsHeldAndUnheldWaitsWithTheLastResponse(t *testing.T) {
	for _, n := range []int{1, 20} {
		t.Run(fmt.Sprintf("%d requests", n), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var sent, retried, gaveUp atomic.Int32
				var mu sync.Mutex
				stops := map[StopReason]int{}
				tr := &Transport{
					Random:   seeded(3),
					Base:     roundTripFunc(func(*http.Request) (*http.Response, error) { sent.Add(1); return response(503, "down"), nil }),
					OnRetry:  func(RetryEvent) { retried.Add(1) },
					OnGiveUp: func(e RetryEvent) { gaveUp.Add(1); mu.Lock(); stops[e.Stop]++; mu.Unlock() },
				}
				var wg sync.WaitGroup
				for range n {
					wg.Go(func() {
						ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
						defer cancel()
						start := time.Now()
						resp, err := tr.RoundTrip(httptest.NewRequest("GET", "http://down/", nil).WithContext(ctx))
						if d := time.Since(start); d > 300*time.Millisecond {
							t.Errorf("returned %v after the start, past its deadline", d)
						}
						if err != nil {
							t.Errorf("got the error %v, want the last 503", err)
							return
						}
						body, _ := io.ReadAll(resp.Body)
						resp.Body.Close()
						if resp.StatusCode != 503 || string(body) != "down" {
							t.Errorf("got %d %q, want the last 503 whole", resp.StatusCode, body)
						}
					})
				}
				wg.Wait()
				if int(sent.Load()) != n+int(retried.Load()) || int(gaveUp.Load()) != n {
					t.Errorf("%d attempts for %d requests, %d OnRetry, %d OnGiveUp: every OnRetry must be a retry sent, every request one OnGiveUp", sent.Load(), n, retried.Load(), gaveUp.Load())
				}
				if stops[StopDeadline] != n { // as without storm control: the deadline, not a hold, ends them
					t.Errorf("stops %v, want all %d StopDeadline", stops, n)
				}
			})
		})
	}
}

// TestLifeEndedByTheDeadlineAsFailuresSlowStopsWithStopDeadline: a held
// request's life ends early enough for its last retry to fail before the
// deadline, as long as its own attempts take. When its failures slow down
// after the life was drawn, that margin, not the life's own steps, can end
// it, and the request stops with StopDeadline, as all of them do with
// storm control off; one held throughout, whose own attempts never
// slowed, is held to the deadline and stops with StopHostGate (rule 5).
// None ends after the deadline.
func TestLifeEndedByTheDeadlineAsFailuresSlowStopsWithStopDeadline(t *testing.T) {
	for _, c := range []StormControl{{}, stormOff} {
		synctest.Test(t, func(t *testing.T) {
			start := time.Now()
			var mu sync.Mutex
			stops := map[StopReason]int{}
			tr := &Transport{
				Storm:  c,
				Policy: Policy{MaxRetries: 3, BaseDelay: 100 * time.Millisecond, Jitter: JitterNone},
				Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
					if time.Since(start) > 250*time.Millisecond { // its failures slow from here on
						select {
						case <-time.After(190 * time.Millisecond): // virtual: synctest's clock
						case <-r.Context().Done():
							return nil, r.Context().Err()
						}
					}
					return response(503, "down"), nil
				}),
				OnGiveUp: func(e RetryEvent) { mu.Lock(); stops[e.Stop]++; mu.Unlock() },
			}
			var wg sync.WaitGroup
			for i := range 40 {
				wg.Go(func() {
					time.Sleep(time.Duration(i) * 5 * time.Millisecond) // virtual: synctest's clock
					ctx, cancel := context.WithTimeout(context.Background(), time.Second)
					defer cancel()
					if resp, err := tr.RoundTrip(httptest.NewRequest("GET", "http://slowing/", nil).WithContext(ctx)); err == nil {
						resp.Body.Close()
					}
					if late := time.Since(start) - time.Duration(i)*5*time.Millisecond - time.Second; late > 0 {
						t.Errorf("request %d ended %v after its deadline", i, late)
					}
				})
			}
			wg.Wait()
			if c == stormOff && stops[StopDeadline] != 40 {
				t.Errorf("off: stops %v, want all 40 StopDeadline", stops)
			}
			if c != stormOff && (stops[StopDeadline] == 0 || stops[StopDeadline]+stops[StopHostGate] != 40) {
				t.Errorf("on: stops %v, want StopDeadline for those whose own failures slowed, StopHostGate for the others", stops)
			}
		})
	}
}

// TestHeldRetryReturnsItsTransportErrorAtTheDeadline: a held retry whose
// last attempt failed with an error and whose hold the deadline ends
// returns an *Error naming the host gate that wraps both the cause and the
// deadline, at the deadline. The deadline is hidden from the Transport, as
// one its checks miss by a hair is, so that the context, not the life
// drawn to fit before it, ends the hold. Fresh requests keep coming, so
// the held retries do not probe.
func TestHeldRetryReturnsItsTransportErrorAtTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := &Transport{Random: seeded(1), Base: roundTripFunc(func(*http.Request) (*http.Response, error) { return nil, syscall.ECONNRESET })}
		var wg sync.WaitGroup
		var held atomic.Int32
		for i := range 40 {
			wg.Go(func() {
				time.Sleep(time.Duration(i) * 50 * time.Millisecond) // virtual: synctest's clock
				ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
				defer cancel()
				start := time.Now()
				_, err := tr.RoundTrip(httptest.NewRequest("GET", "http://down/", nil).WithContext(hiddenDeadline{ctx}))
				var e *Error
				if !errors.As(err, &e) || !errors.Is(err, syscall.ECONNRESET) {
					t.Errorf("got %v, want an *Error of the reset", err)
					return
				}
				if d := time.Since(start); d > 500*time.Millisecond {
					t.Errorf("returned %v after the start, past the deadline", d)
				}
				if e.Reason == StopHostGate && ctx.Err() != nil {
					held.Add(1)
					if !errors.Is(err, context.DeadlineExceeded) || !os.IsTimeout(&url.Error{Err: err}) {
						t.Errorf("%v: a hold the deadline ended does not wrap the deadline", err)
					}
				}
			})
		}
		wg.Wait()
		if held.Load() == 0 {
			t.Error("no request was held to its deadline: the test did not reach its case")
		}
	})
}

// TestCancelEndsAHoldAtOnce: cancelling a held request's context returns
// at once with the context's error. The backoff has no jitter, so that no
// request's own backoff runs out before the cancel.
func TestCancelEndsAHoldAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := &Transport{Policy: Policy{Jitter: JitterNone}, Base: roundTripFunc(func(*http.Request) (*http.Response, error) { return response(503, ""), nil })}
		ctx, cancel := context.WithCancel(context.Background())
		var heldCanceled atomic.Int32
		tr.OnGiveUp = func(e RetryEvent) {
			if e.Stop == StopCanceled && e.Held > 0 {
				heldCanceled.Add(1)
			}
		}
		var wg sync.WaitGroup
		for range 10 {
			wg.Go(func() {
				_, err := tr.RoundTrip(httptest.NewRequest("GET", "http://down/", nil).WithContext(ctx))
				if !errors.Is(err, context.Canceled) {
					t.Errorf("got %v, want the context's error", err)
				}
			})
		}
		time.Sleep(time.Second) // synctest's clock: the retries are held by now
		at := time.Now()
		cancel()
		wg.Wait()
		if d := time.Since(at); d != 0 {
			t.Errorf("returned %v after the cancel", d)
		}
		if heldCanceled.Load() == 0 {
			t.Error("no held retry was canceled: the test did not reach its case")
		}
	})
}

// TestRetryWithALongBodyIsHeldToo: a retry whose last response's body was
// too long to keep is held like any other, and its last retry is sent when
// its own backoff would send it, even while fresh requests probe the host,
// so that the caller gets a 503 as a response, body whole, as without
// storm control: with or without a deadline.
func TestRetryWithALongBodyIsHeldToo(t *testing.T) {
	for _, deadline := range []time.Duration{0, 1500 * time.Millisecond} {
		synctest.Test(t, func(t *testing.T) {
			long := strings.Repeat("x", drainLimit+1)
			var held atomic.Int64
			tr := &Transport{
				Random:  seeded(1),
				Base:    roundTripFunc(func(*http.Request) (*http.Response, error) { return response(503, long), nil }),
				OnRetry: func(e RetryEvent) { held.Add(int64(e.Held)) },
			}
			var wg sync.WaitGroup
			for i := range 40 { // fresh requests every 50 ms: they probe for the held
				wg.Go(func() {
					time.Sleep(time.Duration(i) * 50 * time.Millisecond)
					ctx := context.Background()
					if deadline > 0 {
						var cancel context.CancelFunc
						ctx, cancel = context.WithTimeout(ctx, deadline)
						defer cancel()
					}
					resp, err := tr.RoundTrip(httptest.NewRequest("GET", "http://down/", nil).WithContext(ctx))
					if err != nil {
						t.Errorf("deadline %v: got %v, want the 503", deadline, err)
						return
					}
					body, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 503 || len(body) != len(long) {
						t.Errorf("status %d, last body of %d bytes, want 503 and %d", resp.StatusCode, len(body), len(long))
					}
				})
			}
			wg.Wait()
			if held.Load() == 0 {
				t.Errorf("deadline %v: nothing held: the test did not reach its case", deadline)
			}
		})
	}
}

// TestOnRetryWaitsAddUp: every request's reported waits, OnRetry's and
// OnGiveUp's, add up to its elapsed time (the base answers at once), and
// every failed attempt has exactly one event.
func TestOnRetryWaitsAddUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		type tally struct {
			waits  time.Duration
			events int
		}
		var mu sync.Mutex
		tallies := map[*http.Request]*tally{}
		note := func(e RetryEvent) {
			mu.Lock()
			defer mu.Unlock()
			tl := tallies[e.Request]
			if tl == nil {
				tl = &tally{}
				tallies[e.Request] = tl
			}
			tl.waits += e.Wait
			tl.events++
		}
		var attempts atomic.Int32
		up := time.Now().Add(2 * time.Second)
		tr := &Transport{Random: seeded(5), OnRetry: note, OnGiveUp: note, Policy: Policy{MaxRetries: 8, BaseDelay: 20 * time.Millisecond, MaxDelay: time.Second},
			Base: roundTripFunc(func(*http.Request) (*http.Response, error) {
				attempts.Add(1)
				if time.Now().Before(up) {
					return response(503, ""), nil
				}
				return response(200, ""), nil
			})}
		var wg sync.WaitGroup
		var failed atomic.Int32
		for i := range 50 {
			wg.Go(func() {
				time.Sleep(time.Duration(i) * 30 * time.Millisecond)
				req := httptest.NewRequest("GET", "http://blip/", nil)
				start := time.Now()
				resp, err := tr.RoundTrip(req)
				elapsed := time.Since(start)
				if err == nil {
					if resp.StatusCode != 200 {
						failed.Add(1)
					}
					resp.Body.Close()
				}
				mu.Lock()
				defer mu.Unlock()
				if tl := tallies[req]; tl != nil && tl.waits != elapsed {
					t.Errorf("waits reported %v, elapsed %v", tl.waits, elapsed)
				}
			})
		}
		wg.Wait()
		events := 0
		for _, tl := range tallies {
			events += tl.events
		}
		if want := int(attempts.Load()) - 50 + int(failed.Load()); events != want {
			t.Errorf("%d events for %d attempts of 50 requests, %d failed: want one per failed attempt", events, attempts.Load(), failed.Load())
		}
	})
}

// TestBurstAfterABlip is the second row of the table: 200 goroutines
// share one Transport while the host is down for a second, then it has
// capacity for all. Over eight seeds storm control rescues as many as
// storm control off does (half a point of slack: a request whose own
// backoff runs out within the blip fails either way, and which ones do
// depends on the draws); in each, its median is within 1.25x of off's,
// its last request ends no more than half a second after off's, and it
// sends fewer attempts. And none of its requests lags: the last ends
// within a quarter of a second of the host's return, as the line lets
// every held retry go on the host's answers, a step left by a retry sent
// between steps included (waited out of line, that step put the last at
// 1.63-1.86 s in three of the seeds).
func TestBurstAfterABlip(t *testing.T) {
	t.Parallel() // virtual time only: runs beside the other simulations
	const seeds = 8
	var okOn, okOff float64
	for seed := uint64(1); seed <= seeds; seed++ {
		sc := fleetScenario{workers: 200, calls: 1, down: [2]time.Duration{0, time.Second}, duration: time.Second,
			timeout: 15 * time.Second, latency: time.Millisecond, seed: seed}
		on, off := runFleet(t, sc, StormControl{}).metrics(), runFleet(t, sc, stormOff).metrics()
		okOn, okOff = okOn+on.success/seeds, okOff+off.success/seeds
		if float64(on.p50) > 1.25*float64(off.p50) || on.last > off.last+500*time.Millisecond || on.attemptsPerRequest >= off.attemptsPerRequest {
			t.Errorf("seed %d:\non:  %v\noff: %v", seed, on, off)
		}
		if back := sc.down[1]; on.last > back+250*time.Millisecond {
			t.Errorf("seed %d: the last request ended at %v, the host back at %v", seed, on.last, back)
		}
	}
	if okOn < okOff-0.005 {
		t.Errorf("mean success %.2f%% with storm control, %.2f%% without", 100*okOn, 100*okOff)
	}
}

// TestBurstAgainstASlowServer: 200 goroutines through a 1 s blip against
// a server that takes 200 ms, or 500 ms, to answer. Held retries that
// waited for the line's slow start put the median at 1.57x of off's with
// 200 ms (2.13 s against 1.36 s over three seeds) and the last request
// 1.5 s after off's with 500 ms. Going at their own steps once the host
// answers again, and at its first answer when a step found it down, they
// finished within 1.25x of off's median with 200 ms and the last no later,
// but with 500 ms the median was still 1.44x of off's (1.84 s against
// 1.28 s): the blip lasts two attempts, and retries held in its second
// half would have found the host back. Held only once the outage is
// proven (the host's state two attempts' time old), they finish within
// 1.25x of off's median in both (1.55 s and 1.28 s), and the last no
// later (a tenth of a second of slack with 500 ms, where off's is 2.01 s
// and storm control's the same). With 200 ms, the grace after a step that
// found the host down (rule 5) now holds the median to plain backoff's
// (1.32 s against 1.36 s); without it, 1.46 s, which rule 8's 1.25x
// allowed, so the bound is 1.05x.
func TestBurstAgainstASlowServer(t *testing.T) {
	t.Parallel() // virtual time only: runs beside the other simulations
	for _, tc := range []struct {
		latency               time.Duration
		medianRatio, lastLate float64 // bounds: median ÷ off's, last − off's in seconds
	}{
		{200 * time.Millisecond, 1.05, 0},
		{500 * time.Millisecond, 1.25, 0.1},
	} {
		var p50On, p50Off, lastOn, lastOff float64
		for seed := uint64(1); seed <= 3; seed++ {
			sc := fleetScenario{workers: 200, calls: 1, down: [2]time.Duration{0, time.Second}, duration: time.Second,
				timeout: 15 * time.Second, latency: tc.latency, seed: seed}
			on, off := runFleet(t, sc, StormControl{}).metrics(), runFleet(t, sc, stormOff).metrics()
			if on.success < off.success {
				t.Errorf("%v, seed %d: %.1f%% succeed with storm control, %.1f%% without", tc.latency, seed, 100*on.success, 100*off.success)
			}
			p50On, p50Off = p50On+on.p50.Seconds()/3, p50Off+off.p50.Seconds()/3
			lastOn, lastOff = lastOn+on.last.Seconds()/3, lastOff+off.last.Seconds()/3
		}
		t.Logf("%v: median %.2f s against %.2f s, last %.2f s against %.2f s", tc.latency, p50On, p50Off, lastOn, lastOff)
		if p50On > tc.medianRatio*p50Off || lastOn > lastOff+tc.lastLate {
			t.Errorf("%v: median %.2f s with storm control, %.2f s without; last %.2f s, %.2f s", tc.latency, p50On, p50Off, lastOn, lastOff)
		}
	}
}

// TestConcurrentRequestsToADeadHostFailAsSoonAsWithoutStormControl: four
// goroutines calling a host that never answers each get their failure
// when their own backoff runs out, as without storm control, however many
// of their retries the host gate holds instead of sending: about 4.4 per
// call of the 6 plain backoff sends (3.6 while the step a retry was due at
// went only as a retry between steps would; 2.5 before a step went on
// stale news: docs/storm-control.md rule 5).
func TestConcurrentRequestsToADeadHostFailAsSoonAsWithoutStormControl(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		sc := fleetScenario{workers: 4, calls: 20, down: [2]time.Duration{0, time.Hour}, duration: time.Second, latency: time.Millisecond, seed: seed}
		on, off := runFleet(t, sc, StormControl{}), runFleet(t, sc, stormOff)
		mOn, mOff := on.metrics(), off.metrics()
		if ratio := meanLatency(on) / meanLatency(off); ratio > 1.15 || ratio < 0.85 || mOn.attemptsPerRequest > 0.8*mOff.attemptsPerRequest {
			t.Errorf("seed %d: mean time to fail %.2fx of off's; %.2f attempts per request, %.2f without", seed, ratio, mOn.attemptsPerRequest, mOff.attemptsPerRequest)
		}
	}
}

// TestSlowFailuresLengthenAHeldRequestsLife: when each failed attempt
// takes long (here 400 ms, as a host that times out does), a request's own
// backoff takes that long for every attempt it sends, so a held request,
// which sends fewer, keeps the same life: twenty goroutines rescued by a
// host that returns after 4 s are as many as without storm control.
func TestSlowFailuresLengthenAHeldRequestsLife(t *testing.T) {
	const seeds = 24 // one request of 20 is 5%: eight seeds left two points to chance
	var okOn, okOff float64
	for seed := uint64(1); seed <= seeds; seed++ {
		sc := fleetScenario{workers: 20, calls: 1, down: [2]time.Duration{0, 4 * time.Second}, duration: time.Second,
			timeout: time.Minute, latency: 400 * time.Millisecond, seed: seed}
		okOn += runFleet(t, sc, StormControl{}).metrics().success / seeds
		okOff += runFleet(t, sc, stormOff).metrics().success / seeds
	}
	if okOn < okOff-0.02 {
		t.Errorf("%.1f%% rescued with storm control, %.1f%% without", 100*okOn, 100*okOff)
	}
}

// TestOrdinaryClientsAreNoWorseOff: situations a user meets every day,
// found by trying the library as one, where holding retries past their
// own backoff once made requests fail that plain backoff rescues. In each,
// over several seeds, storm control rescues at least as many (within a
// request or two) as storm control off.
func TestOrdinaryClientsAreNoWorseOff(t *testing.T) {
	t.Parallel() // virtual time only: runs beside the other simulations
	fleetPolicy := defaultFleet().policy
	slowFleet := defaultFleet()
	slowFleet.latency = 500 * time.Millisecond
	for _, tc := range []struct {
		name  string
		sc    fleetScenario
		seeds uint64
		slack int // the rescues allowed short of off's: one in slack; zero means 200
	}{
		// The line once let one retry through per answer: 47% rescued.
		{"200 goroutines, 1 s blip, 200 ms responses", fleetScenario{workers: 200, calls: 1, down: [2]time.Duration{0, time.Second},
			duration: time.Second, timeout: 15 * time.Second, latency: 200 * time.Millisecond}, 3, 0},
		// The line's probes every 10 ms spent the budget: 26% rescued.
		{"200 goroutines, 1 s blip, 20 ms backoff", fleetScenario{workers: 200, calls: 1, down: [2]time.Duration{0, time.Second},
			duration: time.Second, timeout: 15 * time.Second, latency: time.Millisecond, policy: fleetPolicy}, 3, 0},
		// Held past their own backoff, waiting for fresh requests that
		// came seconds apart: 29 of 120 rescued, off 68.
		{"2 goroutines, 3 calls each, 5 s outage", fleetScenario{workers: 2, calls: 3, down: [2]time.Duration{0, 5 * time.Second},
			duration: time.Second, timeout: 10 * time.Second, latency: time.Millisecond}, 20, 0},
		// Attempts that take 500 ms to fail, never timed while fresh
		// requests probed: lives too short, 89% rescued against 99.6%.
		{"100 requests/s, 4 s outage, 500 ms failures", fleetScenario{clients: 1, rate: 100, down: [2]time.Duration{0, 4 * time.Second},
			duration: 6 * time.Second, timeout: 10 * time.Second, latency: 500 * time.Millisecond}, 6, 0},
		// A host down one second in two, 50 requests/s: held retries left
		// only at the line's pace or at their life's end, which fell in a
		// down second half the time: 3,278 of 3,592 rescued, off 3,498.
		{"50 requests/s, host down one second in two", fleetScenario{clients: 1, rate: 50, flap: time.Second,
			duration: 24 * time.Second, timeout: 10 * time.Second, latency: time.Millisecond}, 3, 0},
		// The same at 5 and 10 requests/s: an up second gave fewer than 16
		// answers in a row, and fresh requests kept coming, so a held retry
		// left only at its life's end, often into a down second: 689 of
		// 758 rescued over six seeds (off 734), and 1,379 of 1,485 (1,446).
		{"5 requests/s, host down one second in two", fleetScenario{clients: 1, rate: 5, flap: time.Second,
			duration: 24 * time.Second, timeout: 10 * time.Second, latency: time.Millisecond}, 6, 0},
		{"10 requests/s, host down one second in two", fleetScenario{clients: 1, rate: 10, flap: time.Second,
			duration: 24 * time.Second, timeout: 10 * time.Second, latency: time.Millisecond}, 6, 0},
		// The storm simulator's fleet against a server that takes 500 ms:
		// a held request's life counted only the latest attempt's time, and
		// a short one ended lives early: 14,117 of 14,794 rescued against
		// 14,325. Now 14,271-14,314 over 18 runs; the runs vary by a few
		// dozen, so this row allows 1% (148), not 0.5%.
		{"the fleet's outage, 500 ms answers", slowFleet, 3, 100},
		// Slow attempts against a deadline: a held step skipped on the
		// latest failure misses a return that plain backoff's attempt,
		// still out, would have met (a review's hunt: 2,864 of 3,000
		// against 2,894 with constant 500 ms attempts). Here, with
		// attempt times drawn around 200 and 500 ms: 974 and 983 of 1,000
		// against 979 and 978, so these rows allow 1%.
		{"20 goroutines, 5 calls, 2 s blip, 200 ms attempts, 3 s deadlines", fleetScenario{workers: 20, calls: 5,
			down: [2]time.Duration{time.Second, 3 * time.Second}, timeout: 3 * time.Second, latency: 200 * time.Millisecond}, 10, 100},
		{"20 goroutines, 5 calls, 2 s blip, 500 ms attempts, 3 s deadlines", fleetScenario{workers: 20, calls: 5,
			down: [2]time.Duration{time.Second, 3 * time.Second}, timeout: 3 * time.Second, latency: 500 * time.Millisecond}, 10, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var okOn, okOff, n int
			for seed := range tc.seeds {
				tc.sc.seed = seed + 1
				on, off := runFleet(t, tc.sc, StormControl{}).metrics(), runFleet(t, tc.sc, stormOff).metrics()
				okOn += int(math.Round(on.success * float64(on.requests)))
				okOff += int(math.Round(off.success * float64(off.requests)))
				n += on.requests
			}
			t.Logf("%d of %d rescued with storm control, %d without", okOn, n, okOff)
			if okOn < okOff-max(2, n/cmp.Or(tc.slack, 200)) { // which requests' own backoff runs out first depends on the draws
				t.Errorf("%d of %d rescued with storm control, %d without", okOn, n, okOff)
			}
		})
	}
}

// TestRetryAfterToSomeHoldsNoOneOnceTheHostAnswers: through a 2 s outage
// one 503 in ten says Retry-After: 30. Twenty goroutines make three calls
// each with 10 s deadlines. The host answers again after the outage, and
// the others' retries go then: a date told to one request once held every
// held retry of the host to it (177 of 300 rescued over five seeds, off
// 232).
func TestRetryAfterToSomeHoldsNoOneOnceTheHostAnswers(t *testing.T) {
	rescued := func(c StormControl, seed uint64) (ok int) {
		synctest.Test(t, func(t *testing.T) {
			start, rng, mu := time.Now(), rand.New(rand.NewPCG(seed, 1)), sync.Mutex{}
			tr := &Transport{Storm: c, Random: seeded(seed), Base: roundTripFunc(func(*http.Request) (*http.Response, error) {
				time.Sleep(time.Millisecond)
				if time.Since(start) >= 2*time.Second {
					return response(200, ""), nil
				}
				resp := response(503, "")
				mu.Lock()
				defer mu.Unlock()
				if rng.Float64() < 0.1 {
					resp.Header.Set("Retry-After", "30")
				}
				return resp, nil
			})}
			var wg sync.WaitGroup
			var n atomic.Int32
			for w := range 20 {
				wg.Go(func() {
					time.Sleep(time.Duration(w) * 20 * time.Millisecond)
					for range 3 {
						ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
						resp, err := tr.RoundTrip(httptest.NewRequest("GET", "http://ra/", nil).WithContext(ctx))
						if err == nil && resp.StatusCode == 200 {
							n.Add(1)
						}
						cancel()
					}
				})
			}
			wg.Wait()
			ok = int(n.Load())
		})
		return ok
	}
	var on, off int
	for seed := uint64(1); seed <= 5; seed++ {
		on, off = on+rescued(StormControl{}, seed), off+rescued(stormOff, seed)
	}
	t.Logf("%d of 300 rescued with storm control, %d without", on, off)
	if on < off-3 {
		t.Errorf("%d of 300 rescued with storm control, %d without", on, off)
	}
}

// meanLatency returns the mean time a run's requests took, in seconds.
func meanLatency(res fleetResult) float64 {
	var sum time.Duration
	for _, r := range res.requests {
		sum += r.latency
	}
	return sum.Seconds() / float64(len(res.requests))
}

// TestRandomFailuresWithClosedLoopWorkers: workers sharing a Transport
// against a host failing a share of attempts at random are no less
// successful with storm control, nor much slower.
func TestRandomFailuresWithClosedLoopWorkers(t *testing.T) {
	t.Parallel() // virtual time only: runs beside the other simulations
	for _, sc := range []fleetScenario{
		{workers: 20, failRate: 0.3, duration: 3 * time.Second, latency: time.Millisecond, policy: Policy{BaseDelay: 10 * time.Millisecond}, seed: 1},
		{workers: 8, failRate: 0.6, duration: 5 * time.Second, timeout: 5 * time.Second, latency: time.Millisecond, policy: Policy{BaseDelay: 10 * time.Millisecond}, seed: 1},
	} {
		t.Run(fmt.Sprintf("%d workers, %.0f%%", sc.workers, 100*sc.failRate), func(t *testing.T) {
			var on, off fleetMetrics
			on = runFleet(t, sc, StormControl{}).metrics()
			off = runFleet(t, sc, stormOff).metrics()
			t.Logf("on:  %v\noff: %v", on, off)
			if on.success < off.success-0.01 {
				t.Errorf("success %.2f%% with storm control, %.2f%% without", 100*on.success, 100*off.success)
			}
			if float64(on.p99) > 1.25*float64(off.p99) || float64(on.requests) < 0.8*float64(off.requests) {
				t.Errorf("p99 %v and %d requests with storm control, %v and %d without", on.p99, on.requests, off.p99, off.requests)
			}
		})
	}
}

// TestFleetOutage: the storm simulator's default fleet of 200 clients,
// each with its own Transport, riding out a 3-second outage: storm control
// bounds the load while the host is down and keeps the return within its
// capacity; the same with an ID in each request's path, where a path
// that fails twice in a row by chance is taken for a dead endpoint beside
// the others (see host.besideFailingPath: at one failure, 4.5x in the
// outage).
func TestFleetOutage(t *testing.T) {
	t.Parallel() // virtual time only: runs beside the other simulations
	for _, ids := range []bool{false, true} {
		sc := defaultFleet()
		sc.ids = ids
		fleetOutage(t, sc)
	}
}

// fleetOutage runs sc on and off and checks TestFleetOutage's bounds.
func fleetOutage(t *testing.T, sc fleetScenario) {
	var on, off fleetMetrics
	on = runFleet(t, sc, StormControl{}).metrics()
	off = runFleet(t, sc, stormOff).metrics()
	t.Logf("IDs %v\non:  %v\noff: %v", sc.ids, on, off)
	// Peak after: 3.4-4.1x of capacity over 60 runs, off 5.29x; 3.1-3.3x
	// before a held step went on the host's answers while fresh requests
	// came, which a single client's rescues needed (docs/storm-control.md,
	// rule 5), hence 0.8 of off's where it was 0.7. Load in the outage:
	// 2.96-3.06x over three seeds since an outage needs downAfter failures
	// in a row to be proven in a young state too, which clients of a few
	// requests a second at 60% random failures needed (docs/storm-control.md,
	// rule 1); 2.44-2.49x with 8, 2.0-2.1x before a flow of fresh requests
	// seen once counted for one gap, not eight, and a probe kept to its
	// life's steps, which a small group's rescues needed (rule 3); hence 3.2.
	if on.outageLoad > 3.2 || on.peakAfter > 0.8*off.peakAfter || on.success < off.success {
		t.Errorf("with storm control (IDs %v): load in outage %.2fx, peak after %.2fx, success %.1f%%", sc.ids, on.outageLoad, on.peakAfter, 100*on.success)
	}
	if off.outageLoad < 4 {
		t.Errorf("without storm control the load in the outage was only %.2fx: the scenario lost its storm", off.outageLoad)
	}
}

// TestRetryAfterHerd: a fleet told by Retry-After to come back when the
// outage ends sends no retry before that date, and comes back lower and
// rescues more than plain backoff. Its told steps go at the host's first
// answer, as a single small client's must (see
// TestClientToldTheOutagesEndEndsAsSoonAsPlainBackoff), and those skipped
// while the host, back, sheds wait their Retry-After again, up to
// MaxDelay. While the host, back, refuses again, the backlog's retries
// and those it refused are held as in an outage (see host.mayShed): seeds
// 1-4, peak after 2.6-3.0x of capacity against plain backoff's
// 13.7-14.6x, 100% rescued against 82% (5.1-6.0x and 97.1-97.6% with the
// refused alone held, 11.1-12.2x and 86.0-88.8% with neither; 1.5-3.0x
// and 100% when the line paced every told step).
func TestRetryAfterHerd(t *testing.T) {
	t.Parallel() // virtual time only: runs beside the other simulations
	sc := defaultFleet()
	sc.retryAfter = true
	var on, off fleetResult
	on = runFleet(t, sc, StormControl{})
	off = runFleet(t, sc, stormOff)
	mOn, mOff := on.metrics(), off.metrics()
	t.Logf("on:  %v\noff: %v", mOn, mOff)
	if on.early > 0 {
		t.Errorf("%d retries before the Retry-After date", on.early)
	}
	if mOn.peakAfter > 0.3*mOff.peakAfter || mOn.success < max(mOff.success+0.1, 0.99) {
		t.Errorf("after the date: peak %.2fx and %.1f%% rescued with storm control, %.2fx and %.1f%% without",
			mOn.peakAfter, 100*mOn.success, mOff.peakAfter, 100*mOff.success)
	}
}

// TestQuotaAfterAnOutageRescuesAsPlainBackoff: the held backlog of a
// host back at its capacity keeps the chances plain backoff's steps have,
// as the steps it skips while the host answers are owed, not spent (see
// host.owes). Spent, storm control rescued 97.1% and 96.9% on seeds 1
// and 2, plain backoff 98.5% and 99.3%; over seeds 1-6, 4,270 of 4,356
// requests against plain backoff's 4,294, and owed 4,326-4,338 (eleven
// runs). Counted over six seeds, as one seed's figure moves by a request
// or two with the order in which goroutines woken at one virtual instant
// run (seed 2: 99.0-99.7% in nine runs, under -race and not, plain
// backoff 99.3%).
func TestQuotaAfterAnOutageRescuesAsPlainBackoff(t *testing.T) {
	t.Parallel() // virtual time only: runs beside the other simulations
	var on, off, requests float64
	for seed := uint64(1); seed <= 6; seed++ {
		sc := quotaAfterOutage()
		sc.seed = seed
		mOn, mOff := runFleet(t, sc, StormControl{}).metrics(), runFleet(t, sc, stormOff).metrics()
		on, off, requests = on+mOn.success*float64(mOn.requests), off+mOff.success*float64(mOff.requests), requests+float64(mOn.requests)
	}
	t.Logf("of %.0f requests, storm control rescued %.0f, plain backoff %.0f", requests, on, off)
	if on < off {
		t.Errorf("of %.0f requests, storm control rescued %.0f, plain backoff %.0f", requests, on, off)
	}
}

// TestHeldRequestsLoseFewOfPlainBackoffsRescues: the default fleet with
// 12% spare capacity after its outage ("tight"), each request paired with
// itself under plain backoff. Held requests whose last step came while the
// host, back, shed sent it into the refusals, and storm control lost
// 4.25-4.55% of plain backoff's rescues over seeds 1 to 3 (511-547 of
// 12,020, three runs); owed and put off as their other steps are, they
// wait their turn in line, and it loses 3.10-3.47% (373-417, six runs,
// GOMAXPROCS 1 and 2).
func TestHeldRequestsLoseFewOfPlainBackoffsRescues(t *testing.T) {
	t.Parallel() // virtual time only: runs beside the other simulations
	var lost, rescued int
	for seed := uint64(1); seed <= 3; seed++ {
		sc := toldFleets()["tight"]
		sc.seed = seed
		p := pairRequests(runFleet(t, sc, StormControl{}).requests, runFleet(t, sc, stormOff).requests)
		lost, rescued = lost+p.lost, rescued+p.bothOK+p.lost
	}
	if share := float64(lost) / float64(rescued); share > 0.039 {
		t.Errorf("storm control lost %d of plain backoff's %d rescues (%.1f%%)", lost, rescued, 100*share)
	}
}

// TestOwedStepsWithAZeroRandomEnd: an owed step put off by its own
// backoff alone, which a Random returning 0 draws as nothing, came again
// at once, and the quota's held requests spun without end; it waits the
// policy's base delay at least.
func TestOwedStepsWithAZeroRandomEnd(t *testing.T) {
	t.Parallel() // virtual time only: runs beside the other simulations
	sc := quotaAfterOutage()
	var m fleetMetrics
	done := make(chan struct{})
	go func() {
		defer close(done)
		synctest.Test(t, func(*testing.T) {
			m = simulate(sc, func(base http.RoundTripper) http.RoundTripper {
				return &Transport{Base: base, Policy: sc.policy, Random: func() float64 { return 0 }}
			}).metrics()
		})
	}()
	select { // a watchdog: the bubble's clock does not move while it spins
	case <-done:
		if m.requests == 0 || m.success < 0.9 {
			t.Errorf("%v", m)
		}
	case <-time.After(time.Minute):
		t.Fatal("the fleet did not end")
	}
}

// TestStepsOwedKeepARequestWithinItsOwnBackoff: through a long outage
// and a host at its capacity after it, the steps owed to held requests
// (see host.owes), which have no deadline, are put off only while their
// life stays within plain backoff's longest: MaxRetries waits of
// MaxDelay, each after an attempt's drain at its longest, and its
// attempts. Without that bound a request was put off through the whole
// shed window, as long as the 20 s outage: one took 6.8 s.
func TestStepsOwedKeepARequestWithinItsOwnBackoff(t *testing.T) {
	t.Parallel() // virtual time only: runs beside the other simulations
	pol := Policy{MaxRetries: 3, BaseDelay: 100 * time.Millisecond, MaxDelay: 500 * time.Millisecond}
	sc := fleetScenario{clients: 1, rate: 100, capacity: 80, down: [2]time.Duration{0, 20 * time.Second},
		duration: 30 * time.Second, latency: time.Millisecond, policy: pol, seed: 1}
	res := runFleet(t, sc, StormControl{})
	bound := times(pol.retries(), pol.MaxDelay+drainTimeout) + times(pol.retries()+1, 3*sc.latency/2)
	var longest time.Duration
	for _, r := range res.requests {
		longest = max(longest, r.latency)
	}
	if longest > bound {
		t.Errorf("a request took %v, plain backoff %v at most", longest, bound)
	}
	if m := res.metrics(); m.success < 0.2 {
		t.Errorf("the scenario sheds little: %v", m)
	}
}

// TestNoStateKeptForHostsThatFailedOnce: one failing request each to 5000
// hosts leaves nothing behind once they are over.
func TestNoStateKeptForHostsThatFailedOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := &Transport{Policy: Policy{MaxRetries: 1, BaseDelay: time.Millisecond}, Base: roundTripFunc(func(*http.Request) (*http.Response, error) { return response(503, ""), nil })}
		for i := range 5000 {
			resp, err := tr.RoundTrip(httptest.NewRequest("GET", fmt.Sprintf("http://host%d/", i), nil))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
		if st := tr.StormState(); st.Hosts != 0 || st.Retrying != 0 || st.Held != 0 {
			t.Errorf("state kept after every request ended: %+v", st)
		}
	})
}

// roundTripH sends one GET to http://h/ through tr and closes the
// response, failing the test on an error.
func roundTripH(t *testing.T, tr *Transport) {
	t.Helper()
	resp, err := tr.RoundTrip(httptest.NewRequest("GET", "http://h/", nil))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}

// TestCopyOfATransportInUseHasItsOwnStormControl: a Transport copied
// after its first request, its Storm set to off, shared the original's
// budget and lines: its Storm was ignored. Now a copy builds its own on
// its first request, and the original keeps its own (here a budget, the
// gate off).
func TestCopyOfATransportInUseHasItsOwnStormControl(t *testing.T) {
	tr := &Transport{Policy: Policy{MaxRetries: 1, BaseDelay: time.Millisecond}, Storm: StormControl{NoHostGate: true},
		Base: roundTripFunc(func(*http.Request) (*http.Response, error) { return response(503, ""), nil })}
	roundTripH(t, tr)
	off := *tr
	off.Storm = stormOff
	roundTripH(t, &off)
	if st := off.StormState(); st.BudgetTokens != 0 {
		t.Errorf("the copy with storm control off has a budget of %v tokens: it kept the original's", st.BudgetTokens)
	}
	if st := tr.StormState(); !(st.BudgetTokens > 0) {
		t.Errorf("the original's budget is gone: %+v", st)
	}
	if off.ownStorm() == tr.ownStorm() || off.storm() != off.ownStorm() {
		t.Error("the copy does not have one storm control of its own")
	}
}

// TestCopysAnswersDoNotReachTheOriginalsGate: a copy of a Transport in
// use shares the original's storm control until its own first failure.
// Its answers, from a Base of its own that reached a healthy server,
// counted as the host answering the original, and the original's gate let
// its requests go at their own backoff to a host that was down (a
// review's find). Now the original's line stays held.
func TestCopysAnswersDoNotReachTheOriginalsGate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		down := &Transport{Policy: Policy{MaxRetries: 3, BaseDelay: time.Second, MaxDelay: time.Second, Jitter: JitterNone},
			Base: roundTripFunc(func(*http.Request) (*http.Response, error) { return response(503, ""), nil })}
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() {
				if resp, err := down.RoundTrip(httptest.NewRequest("GET", "http://h/", nil)); err == nil {
					resp.Body.Close()
				}
			})
		}
		synctest.Wait() // both have failed once, and wait
		h := down.ownStorm().hosts.snapshot()["h"]
		healthy := *down
		healthy.Base = roundTripFunc(func(*http.Request) (*http.Response, error) { return response(200, "ok"), nil })
		for range 20 {
			resp, err := healthy.RoundTrip(httptest.NewRequest("GET", "http://h/", nil))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
		h.mu.Lock()
		run, back := h.run, !h.backAt.IsZero()
		h.mu.Unlock()
		if run == 0 || back {
			t.Errorf("the original's host took the copy's 20 answers as its own: failed run %d, back %v", run, back)
		}
		wg.Wait()
	})
}

// TestCopySharingABudgetCountsInIt: a copy of a Transport in use, both
// naming one Budget, counts its requests in that Budget before its first
// failure, as a fresh Transport sharing it does (a review's find: after
// the copy stopped counting in the original's storm control, it counted
// in none).
func TestCopySharingABudgetCountsInIt(t *testing.T) {
	b := &Budget{}
	ok := roundTripFunc(func(*http.Request) (*http.Response, error) { return response(200, "ok"), nil })
	orig := &Transport{Storm: StormControl{Budget: b, NoHostGate: true}, Base: ok}
	roundTripH(t, orig)
	b.take(time.Now()) // short of a token: requests sent earn tokens, and are counted
	before, cp := b.requests.Load(), *orig
	for range 20 {
		roundTripH(t, &cp)
	}
	if n := b.requests.Load() - before; n != 20 {
		t.Errorf("the shared Budget counted %d of the copy's 20 requests", n)
	}
}

// okBase answers every request with one canned 200, allocating nothing.
type okBase struct{ resp http.Response }

func (b *okBase) RoundTrip(*http.Request) (*http.Response, error) { return &b.resp, nil }

// BenchmarkRoundTripSuccess measures a request that succeeds at once, with
// storm control on (the default) and off, side by side: the success path
// must cost no allocation and take no lock for it.
func BenchmarkRoundTripSuccess(b *testing.B) {
	cases := []struct {
		name    string
		tr      *Transport
		perCall bool // the request carries a Policy of its own (WithPolicy)
		limited bool // the request has a deadline
	}{
		{"bare", nil, false, false},
		{"storm-on", &Transport{}, false, false},
		{"storm-off", &Transport{Storm: stormOff}, false, false},
		{"per-call-policy", &Transport{}, true, false},
		{"bare-deadline", nil, false, true},
		{"storm-on-deadline", &Transport{}, false, true},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			base := &okBase{resp: http.Response{StatusCode: 200, Body: http.NoBody}}
			var rt http.RoundTripper = base
			if c.tr != nil {
				c.tr.Base = base
				rt = c.tr
			}
			req := httptest.NewRequest("GET", "http://x/", nil)
			if c.perCall {
				req = req.WithContext(WithPolicy(req.Context(), Policy{MaxRetries: 2}))
			}
			if c.limited {
				ctx, cancel := context.WithTimeout(req.Context(), time.Hour)
				defer cancel()
				req = req.WithContext(ctx)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := rt.RoundTrip(req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRoundTripSuccessBesideAFailingHost measures, on every core at
// once, a request that succeeds at once while a request to another host of
// the same Transport waits out a Retry-After, against none: the look-up of
// the host's state took a read lock that every success shared, 4x slower
// under load (a review's find).
func BenchmarkRoundTripSuccessBesideAFailingHost(b *testing.B) {
	for _, failing := range []bool{false, true} {
		b.Run(fmt.Sprintf("failing-host=%v", failing), func(b *testing.B) {
			ok := &okBase{resp: http.Response{StatusCode: 200, Body: http.NoBody}}
			tr := &Transport{Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
				if r.URL.Host == "down" {
					resp := response(503, "")
					resp.Header.Set("Retry-After", "50")
					return resp, nil
				}
				return ok.RoundTrip(r)
			})}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() {
				defer close(done)
				if failing {
					tr.RoundTrip(httptest.NewRequest("GET", "http://down/", nil).WithContext(ctx))
				}
			}()
			for failing && tr.StormState().Hosts == 0 {
				runtime.Gosched()
			}
			req := httptest.NewRequest("GET", "http://up/", nil)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					tr.RoundTrip(req)
				}
			})
			b.StopTimer()
			cancel()
			<-done
		})
	}
}

// TestBudgetNeverRefusesAReleasedRetry: with the host gate on, the budget
// is never asked, so a retry that storm control held is let through once
// the host is back even when a Budget its Storm names has run dry
// meanwhile (here spent by another Transport sharing it, the gate off),
// and no request ends with StopBudget.
func TestBudgetNeverRefusesAReleasedRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		budget := &Budget{Burst: 5, Ratio: -1, Reserve: -1}
		up := time.Now().Add(time.Second)
		var held, refused, lifeOver atomic.Int32
		var mu sync.Mutex
		least := 1.0
		tr := &Transport{
			Random: seeded(9),
			Storm:  StormControl{Budget: budget},
			Base: roundTripFunc(func(*http.Request) (*http.Response, error) {
				if time.Now().Before(up) {
					return response(503, ""), nil
				}
				return response(200, ""), nil
			}),
			OnRetry: func(e RetryEvent) {
				if e.Held > 0 {
					held.Add(1)
					mu.Lock()
					least = min(least, budget.available(time.Now())) // as this retry went
					mu.Unlock()
				}
			},
			OnGiveUp: func(e RetryEvent) {
				if e.Stop == StopHostGate {
					lifeOver.Add(1) // its own backoff ran out before the host came back
				}
				if e.Stop == StopBudget {
					refused.Add(1)
				}
			},
		}
		var wg sync.WaitGroup
		var ok atomic.Int32
		for i := range 150 { // fresh requests every 10 ms: they probe the host for the line
			wg.Go(func() {
				time.Sleep(time.Duration(i) * 10 * time.Millisecond)
				resp, err := tr.RoundTrip(httptest.NewRequest("GET", "http://blip/", nil))
				if err == nil {
					if resp.StatusCode == 200 {
						ok.Add(1)
					}
					resp.Body.Close()
				}
			})
		}
		// Another Transport on the same budget, the gate off, drains it
		// meanwhile: two requests retrying together.
		time.Sleep(600 * time.Millisecond)
		other := &Transport{Storm: StormControl{Budget: budget, NoHostGate: true}, Policy: Policy{MaxRetries: 20, BaseDelay: -1},
			Base: roundTripFunc(func(*http.Request) (*http.Response, error) {
				time.Sleep(time.Millisecond)
				return response(503, ""), nil
			})}
		for range 2 {
			wg.Go(func() {
				if resp, err := other.RoundTrip(httptest.NewRequest("GET", "http://elsewhere/", nil)); err == nil {
					resp.Body.Close()
				}
			})
		}
		wg.Wait()
		// Held retries went with the budget dry, and none was refused;
		// every request succeeded unless its own backoff ran out before
		// the host came back.
		if held.Load() < 50 || least >= 1 || refused.Load() > 0 || ok.Load()+lifeOver.Load() != 150 || lifeOver.Load() > 5 {
			t.Errorf("%d retries held and released, the fewest tokens as one went %v; %d refused by the budget; %d gave up as their backoff ran out; %d of 150 succeeded", held.Load(), least, refused.Load(), lifeOver.Load(), ok.Load())
		}
	})
}

// TestSuccessPathAllocatesNothing: a request that succeeds at once costs
// no allocation, storm control on, off, or with a Policy of its own; the
// benchmark measures its time.
func TestSuccessPathAllocatesNothing(t *testing.T) {
	for name, tr := range map[string]*Transport{"storm on": {}, "storm off": {Storm: stormOff}} {
		for _, perCall := range []bool{false, true} {
			base := &okBase{resp: http.Response{StatusCode: 200, Body: http.NoBody}}
			tr.Base = base
			req := httptest.NewRequest("GET", "http://x/", nil)
			if perCall {
				req = req.WithContext(WithPolicy(req.Context(), Policy{MaxRetries: 2}))
			}
			if n := testing.AllocsPerRun(100, func() { tr.RoundTrip(req) }); n != 0 {
				t.Errorf("%s, per-call policy %v: %v allocations per request", name, perCall, n)
			}
		}
	}
}

// TestRetryAfterInAnOutageRescuesAsManyAsWithoutStormControl: a host
// answers 503 with Retry-After: 1 for 4 s, then 200. A held request's life
// is its own backoff as a Retry-After lengthens it, so storm control
// rescues as many requests as plain backoff, whatever their number.
func TestRetryAfterInAnOutageRescuesAsManyAsWithoutStormControl(t *testing.T) {
	run := func(c StormControl, workers int, seed uint64) (ok int) {
		synctest.Test(t, func(t *testing.T) {
			start := time.Now()
			tr := &Transport{Storm: c, Random: seeded(seed), Base: downWithRetryAfter(start, 4*time.Second, nil)}
			var wg sync.WaitGroup
			var good atomic.Int32
			for i := range workers {
				wg.Go(func() {
					time.Sleep(time.Duration(i) * 10 * time.Millisecond)
					if resp, err := tr.RoundTrip(httptest.NewRequest("GET", "http://h/", nil)); err == nil {
						if resp.StatusCode == 200 {
							good.Add(1)
						}
						resp.Body.Close()
					}
				})
			}
			wg.Wait()
			ok = int(good.Load())
		})
		return ok
	}
	for seed := uint64(1); seed <= 3; seed++ {
		for _, workers := range []int{4, 20} {
			if on, off := run(StormControl{}, workers, seed), run(stormOff, workers, seed); on < off {
				t.Errorf("seed %d, %d workers: %d rescued with storm control, %d without", seed, workers, on, off)
			}
		}
	}
}

// TestHeldRequestsFollowAHostWhoseFailuresSpeedUp: four goroutines call a
// host that never comes back; its failures take 3 s, then, from 6 s, 1 ms
// (timeouts turned refusals). A held request's life counts the host's
// attempt time, and an average that followed it slowly (over about 8
// samples) kept the lives of the calls started after the change long:
// they failed in 3.98 s on average against off's 3.09 s. Over six seeds
// they fail within 1.15x of plain backoff's time.
func TestHeldRequestsFollowAHostWhoseFailuresSpeedUp(t *testing.T) {
	meanTimeToFail := func(c StormControl) (mean float64) {
		for seed := uint64(1); seed <= 6; seed++ {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				tr := &Transport{Storm: c, Random: seeded(seed), Base: roundTripFunc(func(*http.Request) (*http.Response, error) {
					if time.Since(start) < 6*time.Second {
						time.Sleep(3 * time.Second) // virtual: synctest's clock
					} else {
						time.Sleep(time.Millisecond)
					}
					return response(503, ""), nil
				})}
				var mu sync.Mutex
				var sum float64
				var n int
				var wg sync.WaitGroup
				for range 4 {
					wg.Go(func() {
						for time.Since(start) < 14*time.Second {
							began := time.Now()
							resp, err := tr.RoundTrip(httptest.NewRequest("GET", "http://dead/", nil))
							if err != nil {
								t.Error(err)
								return
							}
							resp.Body.Close()
							if began.Sub(start) >= 6*time.Second { // after the change
								mu.Lock()
								sum, n = sum+time.Since(began).Seconds(), n+1
								mu.Unlock()
							}
						}
					})
				}
				wg.Wait()
				mean += sum / float64(n) / 6
			})
		}
		return mean
	}
	if on, off := meanTimeToFail(StormControl{}), meanTimeToFail(stormOff); on > 1.15*off {
		t.Errorf("calls failed in %.2f s with storm control, %.2f s without", on, off)
	}
}

// TestFirstBlipOnANoisyHostIsNotHeld: one client sends 100 requests/s to
// a server that takes 500 ms and fails 5% of attempts at random, and is
// down for a second at 3 s. The random failures keep the host's state
// alive, so counting an outage's age from the state's first failure
// proved the blip at once and held its retries: p99 2.85 s on average over
// three seeds against off's 2.23 s. Counted from the blip's own first
// failure, the p99 is within 1.15x of off's.
func TestFirstBlipOnANoisyHostIsNotHeld(t *testing.T) {
	var on, off float64
	for seed := uint64(1); seed <= 3; seed++ {
		sc := fleetScenario{clients: 1, rate: 100, down: [2]time.Duration{3 * time.Second, 4 * time.Second}, failRate: 0.05,
			duration: 6 * time.Second, timeout: 10 * time.Second, latency: 500 * time.Millisecond, seed: seed}
		on += runFleet(t, sc, StormControl{}).metrics().p99.Seconds() / 3
		off += runFleet(t, sc, stormOff).metrics().p99.Seconds() / 3
	}
	if on > 1.15*off {
		t.Errorf("p99 %.2f s with storm control, %.2f s without", on, off)
	}
}

// TestRetryAfterAboveTheCapEndsAHeldRequest: B, held, probes the host
// between its steps at 8 s and is told Retry-After: 2 with a cap of 1 s.
// Its step was due at 12 s, past the Retry-After's end, and it went then:
// a held request's step skipped the cap (a review's harness found it).
// Every retry here is told 2 s, so no request sends more than two
// attempts.
func TestRetryAfterAboveTheCapEndsAHeldRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		attempts := map[string]int{}
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			time.Sleep(time.Millisecond)
			mu.Lock()
			attempts[r.URL.Path]++
			mu.Unlock()
			resp := response(503, "")
			if Attempt(r.Context()) > 1 {
				resp.Header.Set("Retry-After", "2")
			}
			return resp, nil
		})
		stops := map[string]StopReason{}
		tr := &Transport{Base: base, Random: half, MaxRetryAfter: time.Second,
			Policy:   Policy{MaxRetries: 3, BaseDelay: 4 * time.Second, MaxDelay: 10 * time.Second, Jitter: JitterNone},
			OnGiveUp: func(e RetryEvent) { mu.Lock(); stops[e.Request.URL.Path] = e.Stop; mu.Unlock() }}
		var wg sync.WaitGroup
		for i, p := range []string{"/a", "/b", "/c"} {
			wg.Go(func() {
				time.Sleep(time.Duration(i) * 10 * time.Millisecond) // virtual: B and C are timed
				resp, err := tr.RoundTrip(httptest.NewRequest("GET", "http://h"+p, nil))
				if err == nil {
					resp.Body.Close()
				}
			})
		}
		wg.Wait()
		for p, n := range attempts {
			if n > 2 || stops[p] != StopRetryAfter {
				t.Errorf("%s: %d attempts, stopped by %v; want at most 2, StopRetryAfter", p, n, stops[p])
			}
		}
	})
}

// TestLineProbesNoSlowerThanTheRetryAfterItWasTold: a group told
// Retry-After: 1 on every failure of an outage learns of the host's return
// no later than a Retry-After after the attempt before it. Paced by the
// prober's backoff alone (100, 200, 400, 800 ms and on), a probe once went
// 1.4 s after the one before it here, and a newcomer's 50 goroutines
// through a 4 s outage ended at 4.86 s against plain backoff's 4.28 s. A
// cap on the line's pace at the Retry-After fixed it; the rules that came
// after it fix it without that cap, which was dropped. The last call ends
// no later than plain backoff's, each request drawing its own values
// (seeds 1-4: 0.90-1.43 s after the return, against 2.58-3.20 s). A bound
// of a Retry-After after the return, with one random source shared,
// failed in about one run in a hundred: a request the line could not let
// go, as it had sent as many retries between its steps as it had skipped,
// waited for its own step, as plain backoff's does. A held step is now
// the line's attempt while the host says the same Retry-After to all (a
// retry between steps, told it again, would put its request past the step
// it stood for): its wait is the Retry-After spread, as plain backoff's,
// by up to a tenth, after the attempt before (seeds 1-4: gaps of up to
// 1.11 s, the last call 0.90-0.96 s after the return; 0.96-1.43 s before).
func TestLineProbesNoSlowerThanTheRetryAfterItWasTold(t *testing.T) {
	const back = 4200 * time.Millisecond
	for seed := uint64(1); seed <= 4; seed++ {
		var mu sync.Mutex
		var sent []time.Duration // with storm control, to the first after the return
		group := func(c StormControl, record bool) (last time.Duration, ok int) {
			ends, ok := callsThrough(t, c, 20, 0, seed, func(int) string { return "http://h/" },
				func(start time.Time) roundTripFunc {
					down := downWithRetryAfter(start, back, nil)
					return func(r *http.Request) (*http.Response, error) {
						mu.Lock()
						if record && (len(sent) == 0 || sent[len(sent)-1] < back) {
							sent = append(sent, time.Since(start))
						}
						mu.Unlock()
						return down(r)
					}
				})
			return slices.Max(ends), ok
		}
		lastOn, okOn := group(StormControl{}, true)
		lastOff, _ := group(stormOff, false)
		slices.Sort(sent)
		gap := time.Duration(0)
		for i := 1; i < len(sent); i++ {
			gap = max(gap, sent[i]-sent[i-1])
		}
		if gap > 1150*time.Millisecond || okOn < 20 || lastOn > lastOff {
			t.Errorf("seed %d: %v between attempts to the host until it was back (%v); %d of 20 answered, the last at %v, plain backoff's at %v", seed, gap, sent, okOn, lastOn, lastOff)
		}
	}
}

// downWithRetryAfter is a Base whose attempts take 1 ms and that answers
// 503 with Retry-After: 1 to those sent before back has passed since
// start, telling down (when set) of each by its time since start, and 200
// to the rest. Its tests run in a synctest bubble.
func downWithRetryAfter(start time.Time, back time.Duration, down func(time.Duration)) roundTripFunc {
	return roundTripFunc(func(*http.Request) (*http.Response, error) {
		at := time.Since(start)
		time.Sleep(time.Millisecond) // virtual: an attempt's time
		if at >= back {
			return response(200, "ok"), nil
		}
		if down != nil {
			down(at)
		}
		resp := response(503, "down")
		resp.Header.Set("Retry-After", "1")
		return resp, nil
	})
}

// TestBudgetActsOnlyWithTheHostGateOff: a Budget named in Storm is
// neither asked nor charged while the host gate is on, as Budget's doc
// says, and StormState shows no tokens; with the gate off, the same
// requests spend two: /a's retry, asked while /b retries too, and /b's,
// sent alone, which takes a token the bucket holds.
func TestBudgetActsOnlyWithTheHostGateOff(t *testing.T) {
	for _, tc := range []struct {
		gateOff    bool
		wantTokens float64
	}{{false, 10}, {true, 8}} {
		t.Run(fmt.Sprintf("gate off %v", tc.gateOff), func(t *testing.T) { budgetRun(t, tc.gateOff, tc.wantTokens) })
	}
}

// budgetRun runs TestBudgetActsOnlyWithTheHostGateOff's requests.
func budgetRun(t *testing.T, gateOff bool, wantTokens float64) {
	synctest.Test(t, func(t *testing.T) {
		b := &Budget{Ratio: -1, Reserve: -1, Burst: 10}
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.URL.Path == "/c" {
				return response(200, "ok"), nil
			}
			return response(503, ""), nil
		})
		tr := &Transport{Base: base, Storm: StormControl{Budget: b, NoHostGate: gateOff},
			Policy: Policy{MaxRetries: 1, BaseDelay: 100 * time.Millisecond, MaxDelay: 100 * time.Millisecond, Jitter: JitterNone}}
		get := func(path string, after time.Duration, pol Policy) {
			time.Sleep(after) // virtual
			req, _ := http.NewRequestWithContext(WithPolicy(context.Background(), pol), http.MethodGet, "http://h.test"+path, nil)
			resp, err := tr.RoundTrip(req)
			if err == nil {
				resp.Body.Close()
			}
		}
		var wg sync.WaitGroup
		wg.Go(func() { get("/a", 0, tr.Policy) })                   // fails, retries at 100 ms, fails
		wg.Go(func() { get("/c", 10*time.Millisecond, tr.Policy) }) // the host answers
		long := tr.Policy
		long.BaseDelay, long.MaxDelay = time.Second, time.Second
		wg.Go(func() { get("/b", 20*time.Millisecond, long) }) // retrying while /a's retry goes
		wg.Wait()
		if got := b.available(time.Now()); got != wantTokens {
			t.Errorf("the Budget holds %v of 10 tokens; want %v", got, wantTokens)
		}
		if got, gateOn := tr.StormState().BudgetTokens, !gateOff; gateOn && got != 0 {
			t.Errorf("StormState shows %v tokens with the gate on; want 0, no budget", got)
		}
	})
}

// TestAnAnswerToARetryTheLineLetGoLetsTwoMoreGo: once fresh requests have
// stopped, the answer to a retry the line released (not only its test
// retry) lets two held retries go at once (slow start, rule 4 of
// docs/storm-control.md), as the README and ReleaseShare's doc say.
func TestAnAnswerToARetryTheLineLetGoLetsTwoMoreGo(t *testing.T) {
	s, ms := failing(4)
	h := ms[0].h
	now := at(60_000) // fresh requests stopped long ago
	for _, m := range ms[1:] {
		if !holdAt(h, m, now) {
			t.Fatal("not held")
		}
	}
	h.credit = 1 // one release earned
	if send, _ := h.poll(ms[1], now, false, false); !send {
		t.Fatal("the credit released no one")
	}
	if h.probing != nil {
		t.Fatal("the released retry was taken for a probe")
	}
	h.answered(now.Add(time.Millisecond), "", ms[1], false, s.share, time.Time{}) // the released retry is answered
	released := 0
	for _, m := range ms[2:] {
		if m.released {
			released++
		}
	}
	if released != 2 {
		t.Errorf("one answer to a released retry let %d held retries go (share %v); want 2", released, h.share)
	}
}
