package httpretry

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Tests of when a request counts as one of its host's retrying requests,
// and of the life a hold draws for it: a request is held only while
// another request to its host fails with it (rule 1), and what a hold
// draws never outlasts the hold's reason.

// sendLog records when the attempts of the request tagged "L" go.
type sendLog struct {
	mu    sync.Mutex
	start time.Time
	sends []time.Duration
}

func (l *sendLog) note(r *http.Request) {
	if r.Header.Get("X-Who") == "L" {
		l.mu.Lock()
		l.sends = append(l.sends, time.Since(l.start))
		l.mu.Unlock()
	}
}

// upAt answers 503 until up, then 200, noting L's attempts.
func upAt(log *sendLog, up time.Duration) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		log.note(r)
		if time.Since(log.start) < up {
			return response(503, ""), nil
		}
		return response(200, ""), nil
	})
}

// callAfter sends, after a pause in the bubble's virtual time, a GET
// tagged who with context ctx, and closes what comes back.
func callAfter(ctx context.Context, tr *Transport, after time.Duration, who string) {
	time.Sleep(after) // virtual: every caller runs in a synctest bubble
	req := httptest.NewRequest("GET", "http://h/", nil).WithContext(ctx)
	req.Header.Set("X-Who", who)
	if resp, err := tr.RoundTrip(req); err == nil {
		resp.Body.Close()
	}
}

// failOnce sends n POSTs to host h through tr, after a pause in the
// bubble's virtual time; each fails and is not retried, so that, while
// the arrangement's requests retry, the host has failed downAfter
// attempts in a row, enough to prove an outage.
func failOnce(tr *Transport, after time.Duration, n int) {
	time.Sleep(after) // virtual: every caller runs in a synctest bubble
	for range n {
		if resp, err := tr.RoundTrip(httptest.NewRequest("POST", "http://h/", nil)); err == nil {
			resp.Body.Close()
		}
	}
}

// callL sends L's GET through tr and returns its status (0 on an error).
func callL(tr *Transport) int {
	req := httptest.NewRequest("GET", "http://h/", nil)
	req.Header.Set("X-Who", "L")
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// hangThenReset holds an attempt d of the bubble's virtual time, or until
// its context ends, and then fails it as a reset connection.
func hangThenReset(r *http.Request, d time.Duration) (*http.Response, error) {
	select {
	case <-time.After(d): // virtual: every caller runs in a synctest bubble
	case <-r.Context().Done():
		return nil, r.Context().Err()
	}
	return nil, syscall.ECONNRESET
}

// endsNoLaterThanOff runs L's scenario with storm control on and off and
// fails t when L ended later, or after more attempts, with it on.
func endsNoLaterThanOff(t *testing.T, run func(StormControl) (end time.Duration, sends []time.Duration)) {
	t.Helper()
	onEnd, onSends := run(StormControl{})
	offEnd, offSends := run(stormOff)
	if onEnd > offEnd || len(onSends) > len(offSends) {
		t.Errorf("L ended at %v after %d attempts %v; off: at %v after %d %v", onEnd, len(onSends), onSends, offEnd, len(offSends), offSends)
	}
}

// TestHeldRequestGoesOnceAlone: L is held while B fails too; B gives up
// at 500 ms, and L, alone from then on, goes at once and then keeps its
// own backoff's steps: its next retry goes at 1,050 ms, as plain
// backoff's does. It once stayed in line to the end of its life: its
// third attempt went at 2.7 s instead of 500 ms; and it once waited a
// whole backoff from its send at 500 ms, to 1,100 ms.
func TestHeldRequestGoesOnceAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := &sendLog{start: time.Now()}
		tr := &Transport{Base: upAt(log, time.Second), Policy: Policy{MaxRetries: 5, BaseDelay: 150 * time.Millisecond, MaxDelay: time.Second, Jitter: JitterNone}}
		var wg sync.WaitGroup
		var status int
		wg.Go(func() { status = callL(tr) })
		for i := range downAfter { // 15 or 35 ms apart: fresh requests flowing, so that no probe goes
			wg.Go(func() { failOnce(tr, time.Duration((i+1)*25+i%2*10)*time.Millisecond, 1) })
		}
		wg.Go(func() {
			time.Sleep(300 * time.Millisecond)
			ctx := WithPolicy(context.Background(), Policy{MaxRetries: 1, BaseDelay: 200 * time.Millisecond, Jitter: JitterNone})
			resp, err := tr.RoundTrip(httptest.NewRequest("GET", "http://h/", nil).WithContext(ctx))
			require.NoError(t, err)
			resp.Body.Close()
		})
		wg.Wait()
		assert.Equal(t, 200, status)
		// own waits 150, 300, 600 ms: the second ends at 450 ms, held until B leaves at 500 ms
		assert.Equal(t, []time.Duration{0, 150 * time.Millisecond, 500 * time.Millisecond, 1050 * time.Millisecond}, log.sends)
		assert.Equal(t, StormState{}, tr.StormState())
	})
}

// TestGivenUpRequestHoldsNoOneDuringItsOnGiveUp: a POST that fails is not
// retried; while its OnGiveUp ran (a slow log write, 100 ms) it still
// counted as retrying, so the GET alone retrying on its host was held, and
// stayed held for 2.8 s. It leaves its host before OnGiveUp now, and the
// GET's attempts are those of storm control off.
func TestGivenUpRequestHoldsNoOneDuringItsOnGiveUp(t *testing.T) {
	run := func(c StormControl) (sends []time.Duration, held time.Duration) {
		synctest.Test(t, func(t *testing.T) {
			log := &sendLog{start: time.Now()}
			tr := &Transport{Base: upAt(log, time.Second), Storm: c,
				Policy:  Policy{MaxRetries: 5, BaseDelay: 200 * time.Millisecond, MaxDelay: time.Second, Jitter: JitterNone},
				OnRetry: func(e RetryEvent) { held += e.Held },
				OnGiveUp: func(e RetryEvent) {
					if e.Request.Method == "POST" {
						time.Sleep(100 * time.Millisecond)
					}
				}}
			var wg sync.WaitGroup
			wg.Go(func() { assert.Equal(t, 200, callL(tr)) })
			wg.Go(func() {
				time.Sleep(550 * time.Millisecond)
				resp, err := tr.RoundTrip(httptest.NewRequest("POST", "http://h/", nil))
				require.NoError(t, err)
				resp.Body.Close()
			})
			wg.Wait()
			sends = log.sends
		})
		return sends, held
	}
	on, held := run(StormControl{})
	off, _ := run(stormOff)
	assert.Equal(t, off, on)
	assert.Zero(t, held)
}

// TestLoneRequestOutlivesALifeDrawnAtAHold: L's first retry went at once
// from a hold while B was retrying too, which drew L a life; a Retry-After
// then carried L past it, alone. L stopped with StopHostGate, two retries
// unsent, where storm control off got the 200 at 1.3 s. A life is drawn
// only for a retry that a hold holds, and a Retry-After wait past a life
// ends it.
func TestLoneRequestOutlivesALifeDrawnAtAHold(t *testing.T) {
	run := func(c StormControl) (sends []time.Duration, status int, stops []StopReason) {
		synctest.Test(t, func(t *testing.T) {
			log := &sendLog{start: time.Now()}
			base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
				resp, _ := upAt(log, 1200*time.Millisecond).RoundTrip(r)
				if r.Header.Get("X-Who") == "L" && len(log.sends) == 2 && resp.StatusCode == 503 {
					resp.Header.Set("Retry-After", "1")
				}
				return resp, nil
			})
			tr := &Transport{Base: base, Storm: c, Random: func() float64 { return 0 },
				Policy: Policy{MaxRetries: 4, BaseDelay: 100 * time.Millisecond, MaxDelay: 200 * time.Millisecond, Jitter: JitterNone},
				OnGiveUp: func(e RetryEvent) {
					if e.Request.Header.Get("X-Who") == "L" {
						stops = append(stops, e.Stop)
					}
				}}
			var wg sync.WaitGroup
			wg.Go(func() { status = callL(tr) })
			wg.Go(func() {
				time.Sleep(time.Millisecond)
				ctx := WithPolicy(context.Background(), Policy{MaxRetries: 1, BaseDelay: 200 * time.Millisecond, Jitter: JitterNone})
				req := httptest.NewRequest("GET", "http://h/", nil).WithContext(ctx)
				req.Header.Set("X-Who", "B")
				resp, err := tr.RoundTrip(req)
				require.NoError(t, err)
				resp.Body.Close()
			})
			wg.Wait()
			sends = log.sends
		})
		return sends, status, stops
	}
	onSends, onStatus, onStops := run(StormControl{})
	offSends, offStatus, _ := run(stormOff)
	assert.Equal(t, offSends, onSends)
	assert.Equal(t, 200, offStatus)
	assert.Equal(t, offStatus, onStatus)
	assert.Empty(t, onStops)
}

// TestPanicLeavesNoState: a panic out of a callback (or Base) unwinds
// RoundTrip; the request still leaves its host. It once stayed a member
// for good: StormState never went back to zero, and a lone request to the
// host a minute later was held as if another were retrying.
func TestPanicLeavesNoState(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var panicked atomic.Bool
		log := &sendLog{start: time.Now()}
		tr := &Transport{Base: upAt(log, time.Hour), Policy: Policy{MaxRetries: 5, BaseDelay: 200 * time.Millisecond, MaxDelay: time.Second, Jitter: JitterNone},
			OnRetry: func(RetryEvent) {
				if !panicked.Swap(true) {
					panic("a metrics exporter's bug")
				}
			}}
		func() {
			defer func() { assert.NotNil(t, recover()) }() // as net/http's server recovers a handler's panic
			callL(tr)
		}()
		assert.Equal(t, StormState{}, tr.StormState())
		time.Sleep(time.Minute) // virtual (synctest)
		log.start, log.sends = time.Now(), nil
		assert.Equal(t, 503, callL(tr))
		ms := time.Millisecond
		assert.Equal(t, []time.Duration{0, 200 * ms, 600 * ms, 1400 * ms, 2400 * ms, 3400 * ms}, log.sends, "its own backoff, unheld")
	})
}

// TestHeldThenFailingAloneEndsNoLaterThanOff: L is held while another
// request fails with it for two seconds; alone again, it keeps the life
// its hold drew, so that its failure comes no later than plain backoff's.
// Dropping the life when it failed alone sent its last retry at 4.3 s
// against plain backoff's 3.05 s; so did a Retry-After: 0 on every 503,
// when any Retry-After let the wait run past the life.
func TestHeldThenFailingAloneEndsNoLaterThanOff(t *testing.T) {
	for _, ra := range []string{"", "0"} {
		t.Run("Retry-After "+ra, func(t *testing.T) { heldThenFailingAlone(t, ra) })
	}
}

func heldThenFailingAlone(t *testing.T, retryAfter string) {
	run := func(c StormControl) (sends []time.Duration) {
		synctest.Test(t, func(t *testing.T) {
			log := &sendLog{start: time.Now()}
			base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
				resp, _ := upAt(log, time.Hour).RoundTrip(r)
				if retryAfter != "" {
					resp.Header.Set("Retry-After", retryAfter)
				}
				return resp, nil
			})
			tr := &Transport{Base: base, Storm: c, Policy: Policy{MaxRetries: 5, BaseDelay: 150 * time.Millisecond, MaxDelay: time.Second, Jitter: JitterNone}}
			var wg sync.WaitGroup
			wg.Go(func() { assert.Equal(t, 503, callL(tr)) })
			wg.Go(func() { failOnce(tr, 200*time.Millisecond, downAfter) })
			wg.Go(func() {
				time.Sleep(300 * time.Millisecond)
				ctx, cancel := context.WithTimeout(context.Background(), 2200*time.Millisecond)
				defer cancel()
				ctx = WithPolicy(ctx, Policy{MaxRetries: 10, BaseDelay: 200 * time.Millisecond, Jitter: JitterNone})
				if resp, err := tr.RoundTrip(httptest.NewRequest("GET", "http://h/", nil).WithContext(ctx)); err == nil {
					resp.Body.Close()
				}
			})
			wg.Wait()
			sends = log.sends
		})
		return sends
	}
	on, off := run(StormControl{}), run(stormOff)
	require.NotEmpty(t, on)
	assert.LessOrEqual(t, on[len(on)-1], off[len(off)-1], "on %v, off %v", on, off)
	assert.NotEqual(t, off, on, "L was not held: the test lost its hold")
	assert.LessOrEqual(t, len(on), len(off), "more attempts into a host that is down")
}

// TestDateToldOnlyByARequestThatWaitsForIt: B is answered 503 with a
// Retry-After, and will not wait for it: it is sent once (WithoutRetries),
// its own backoff (10 s) ends past its deadline (5.3 s), or the 90 ms its
// 503's body takes to drain carries its wait past its deadline (4.35 s);
// or B waits for it but is canceled at 400 ms, and its date goes with it.
// So the date does not hold the others. It once held L, whose host was
// back at 1 s, until the date (4.35 s when the drain carried B's wait past
// its deadline: the date was told before the drain; 5.3 s when B was
// canceled).
func TestDateToldOnlyByARequestThatWaitsForIt(t *testing.T) {
	once := func() (context.Context, context.CancelFunc) {
		return WithoutRetries(context.Background()), func() {}
	}
	slow := func() (context.Context, context.CancelFunc) {
		ctx, cancel := context.WithTimeout(context.Background(), 5300*time.Millisecond)
		return WithPolicy(ctx, Policy{MaxRetries: 3, BaseDelay: 10 * time.Second, Jitter: JitterNone}), cancel
	}
	drainedPast := func() (context.Context, context.CancelFunc) {
		ctx, cancel := context.WithTimeout(context.Background(), 4350*time.Millisecond)
		return WithPolicy(ctx, Policy{MaxRetries: 3, BaseDelay: time.Millisecond, Jitter: JitterNone}), cancel
	}
	t.Run("sent once", func(t *testing.T) { dateToldBy(t, once, "5", 0) })
	t.Run("backoff past the deadline", func(t *testing.T) { dateToldBy(t, slow, "4", 0) })
	canceledBefore := func() (context.Context, context.CancelFunc) {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(400*time.Millisecond, cancel)
		return ctx, cancel
	}
	t.Run("drain past the deadline", func(t *testing.T) { dateToldBy(t, drainedPast, "4", 90*time.Millisecond) })
	t.Run("canceled before the date", func(t *testing.T) { dateToldBy(t, canceledBefore, "5", 0) })
}

// dateToldBy runs L, C and B, B's 503s telling retryAfter, their bodies
// taking bodyDelay to arrive.
func dateToldBy(t *testing.T, bContext func() (context.Context, context.CancelFunc), retryAfter string, bodyDelay time.Duration) {
	synctest.Test(t, func(t *testing.T) {
		log := &sendLog{start: time.Now()}
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			resp, _ := upAt(log, time.Second).RoundTrip(r)
			if r.Header.Get("X-Who") == "B" {
				if bodyDelay > 0 {
					resp, _ = slowBody503(bodyDelay)(r)
				}
				resp.Header.Set("Retry-After", retryAfter)
			}
			return resp, nil
		})
		tr := &Transport{Base: base, Policy: Policy{MaxRetries: 6, BaseDelay: 150 * time.Millisecond, MaxDelay: 10 * time.Second, Jitter: JitterNone},
			Random: func() float64 { return 0 }} // Retry-After spread by nothing: B's wait is 4 s to the nanosecond
		var wg sync.WaitGroup
		wg.Go(func() { assert.Equal(t, 200, callL(tr)) })
		wg.Go(func() { callAfter(context.Background(), tr, 100*time.Millisecond, "C") }) // fails with L
		wg.Go(func() {
			ctx, cancel := bContext()
			defer cancel()
			callAfter(ctx, tr, 300*time.Millisecond, "B")
		})
		wg.Wait()
		// L goes at 1.15 s, after its probes (once, held to its steps, at
		// 1.5 s); B's date is 4 s or more.
		require.NotEmpty(t, log.sends)
		assert.LessOrEqual(t, log.sends[len(log.sends)-1], 1500*time.Millisecond, "L held past its own steps, to B's date: %v", log.sends)
	})
}

// TestAnswerAfterAFailureClearsItsDate: B is answered 503 with
// Retry-After: 30, and F, a fresh request, 200 a millisecond later. B's
// date is told to the line once B's wait has passed its checks, which take
// a Random draw; when that draw is slow, F's answer comes in between. The
// answer came after B's failure, so it clears the date either way: it once
// held L, whose host was back, to the end of its life (9.45 s, not 1.1 s).
func TestAnswerAfterAFailureClearsItsDate(t *testing.T) {
	fast := dateAfterAnAnswer(t, false)
	slow := dateAfterAnAnswer(t, true)
	assert.Equal(t, fast, slow)
	assert.Less(t, slow[len(slow)-1], 2*time.Second, "L held by a date that an answer cleared: %v", slow)
}

// dateAfterAnAnswer returns L's attempts, with B's plan slowed until F's
// answer or not.
func dateAfterAnAnswer(t *testing.T, slowB bool) (sends []time.Duration) {
	synctest.Test(t, func(t *testing.T) {
		log := &sendLog{start: time.Now()}
		var armed atomic.Bool
		release := make(chan struct{})
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			resp, _ := upAt(log, time.Second).RoundTrip(r)
			switch r.Header.Get("X-Who") {
			case "F":
				resp = response(200, "")
			case "B":
				resp = response(503, "")
				resp.Header.Set("Retry-After", "30")
				armed.Store(slowB)
			}
			return resp, nil
		})
		tr := &Transport{Base: base, Policy: Policy{MaxRetries: 6, BaseDelay: 150 * time.Millisecond, MaxDelay: 10 * time.Second, Jitter: JitterNone},
			Random: func() float64 {
				if armed.CompareAndSwap(true, false) {
					<-release
				}
				return 0.5
			}}
		var wg sync.WaitGroup
		wg.Go(func() { callL(tr) })
		wg.Go(func() { callAfter(context.Background(), tr, 100*time.Millisecond, "C") })
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
			defer cancel()
			callAfter(WithPolicy(ctx, Policy{MaxRetries: 1, BaseDelay: time.Millisecond, Jitter: JitterNone}), tr, 300*time.Millisecond, "B")
		})
		wg.Go(func() {
			callAfter(context.Background(), tr, 301*time.Millisecond, "F")
			if slowB {
				close(release)
			}
		})
		wg.Wait()
		sends = log.sends
	})
	return sends
}

// TestHeldLifeIsTimedByItsOwnAttempts: L's 503s come in 1 ms while five
// other requests to its host hang 2 s before their connection resets. L's
// life is its own backoff's, timed by its own attempts: timed by the
// host's average, it ended at 20.85 s against plain backoff's 13.1 s.
func TestHeldLifeIsTimedByItsOwnAttempts(t *testing.T) {
	others := Policy{MaxRetries: 30, BaseDelay: 100 * time.Millisecond, MaxDelay: time.Second, Jitter: JitterNone}
	l := Policy{MaxRetries: 5, BaseDelay: 100 * time.Millisecond, MaxDelay: 10 * time.Second, Jitter: JitterNone}
	endsNoLaterThanOff(t, func(c StormControl) (time.Duration, []time.Duration) {
		return fastAmongResets(t, c, others, l, 10*time.Second, make([]time.Duration, 5))
	})
}

// fastAmongResets runs L, whose 503s come in 1 ms, sent with Policy l
// after lAfter, among others to its host whose attempts hang 2 s before a
// reset, one sent at each of othersAt with the Transport's Policy; it
// returns when L ended and when its attempts went.
func fastAmongResets(t *testing.T, c StormControl, others, l Policy, lAfter time.Duration, othersAt []time.Duration) (end time.Duration, sends []time.Duration) {
	synctest.Test(t, func(t *testing.T) {
		log := &sendLog{start: time.Now()}
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.Header.Get("X-Who") == "L" {
				log.note(r)
				time.Sleep(time.Millisecond) // virtual: synctest's clock
				return response(503, ""), nil
			}
			return hangThenReset(r, 2*time.Second)
		})
		tr := &Transport{Base: base, Storm: c, Policy: others}
		var wg sync.WaitGroup
		for _, at := range othersAt {
			wg.Go(func() { callAfter(context.Background(), tr, at, "other") })
		}
		wg.Go(func() {
			callAfter(WithPolicy(context.Background(), l), tr, lAfter, "L")
			end = time.Since(log.start)
		})
		wg.Wait()
		sends = log.sends
	})
	return end, sends
}

// TestHeldLifesDeadlineMarginIsItsOwn: L (1 ms failures, a 3 s deadline)
// is held while A fails; four other requests' 800 ms failures then come
// in. Its life's margin before the deadline is its own attempts' time:
// the host's average moved it later with each of L's fast failures, and
// L's retries went on past plain backoff's end (3.18 s against 2.81 s).
func TestHeldLifesDeadlineMarginIsItsOwn(t *testing.T) {
	run := func(c StormControl) (end time.Duration, sends []time.Duration) {
		synctest.Test(t, func(t *testing.T) {
			log := &sendLog{start: time.Now()}
			base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
				log.note(r)
				if r.URL.Path != "/slow" {
					time.Sleep(time.Millisecond) // virtual: synctest's clock
					return response(503, ""), nil
				}
				return hangThenReset(r, 800*time.Millisecond)
			})
			tr := &Transport{Base: base, Storm: c, Policy: Policy{MaxRetries: 40, BaseDelay: 20 * time.Millisecond, MaxDelay: 100 * time.Millisecond, Jitter: JitterNone}}
			var wg sync.WaitGroup
			wg.Go(func() { callAfter(context.Background(), tr, 0, "A") })
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(WithPolicy(context.Background(), Policy{MaxRetries: 10, BaseDelay: 100 * time.Millisecond, MaxDelay: time.Second, Jitter: JitterNone}), 3300*time.Millisecond)
				defer cancel()
				callAfter(ctx, tr, 300*time.Millisecond, "L")
				end = time.Since(log.start)
			})
			for range 4 {
				wg.Go(func() {
					time.Sleep(1500 * time.Millisecond) // virtual: synctest's clock
					req := httptest.NewRequest("GET", "http://h/slow", nil)
					if resp, err := tr.RoundTrip(req); err == nil {
						resp.Body.Close()
					}
				})
			}
			wg.Wait()
			sends = log.sends
		})
		return end, sends
	}
	endsNoLaterThanOff(t, run)
}

// TestOneRetryAfterDoesNotLengthenTheWholeLife: only L's first 503 says
// Retry-After: 2; its later ones, and the other requests' failures, say
// nothing. Plain backoff waits the 2 s once; L's life, held among the
// others, waited at least 2 s at every step and ended at 13.56 s against
// plain backoff's 8.16 s.
func TestOneRetryAfterDoesNotLengthenTheWholeLife(t *testing.T) {
	run := func(c StormControl) (end time.Duration, sends []time.Duration) {
		synctest.Test(t, func(t *testing.T) {
			log := &sendLog{start: time.Now()}
			var told atomic.Bool
			base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
				log.note(r)
				time.Sleep(10 * time.Millisecond) // virtual: synctest's clock
				if r.Header.Get("X-Who") != "L" {
					return nil, syscall.ECONNRESET
				}
				resp := response(503, "")
				if told.CompareAndSwap(false, true) {
					resp.Header.Set("Retry-After", "2")
				}
				return resp, nil
			})
			tr := &Transport{Base: base, Storm: c, Random: half,
				Policy: Policy{MaxRetries: 40, BaseDelay: 100 * time.Millisecond, MaxDelay: time.Second, Jitter: JitterNone}}
			var wg sync.WaitGroup
			for range 3 {
				wg.Go(func() { callAfter(context.Background(), tr, 0, "other") })
			}
			wg.Go(func() {
				ctx := WithPolicy(context.Background(), Policy{MaxRetries: 5, BaseDelay: 100 * time.Millisecond, MaxDelay: 10 * time.Second, Jitter: JitterNone})
				callAfter(ctx, tr, 3*time.Second, "L")
				end = time.Since(log.start)
			})
			wg.Wait()
			sends = log.sends
		})
		return end, sends
	}
	endsNoLaterThanOff(t, run)
}

// TestUntimedRequestsLifeIsNotTimedByOthers: L starts while no host has
// requests retrying, so its first attempt is not timed; others, every
// 200 ms, hang 2 s before a reset. Timed by the host's average until its
// own was known, L's life ended at 53.0 s against plain backoff's 45.0 s.
func TestUntimedRequestsLifeIsNotTimedByOthers(t *testing.T) {
	others := Policy{MaxRetries: 3, BaseDelay: 100 * time.Millisecond, MaxDelay: time.Second, Jitter: JitterNone}
	l := Policy{MaxRetries: 5, BaseDelay: 5 * time.Second, MaxDelay: 10 * time.Second, Jitter: JitterNone}
	var othersAt []time.Duration
	for i := range 300 {
		othersAt = append(othersAt, 10*time.Millisecond+time.Duration(i)*200*time.Millisecond)
	}
	endsNoLaterThanOff(t, func(c StormControl) (time.Duration, []time.Duration) {
		return fastAmongResets(t, c, others, l, 0, othersAt)
	})
}

// TestUntimedHeldRequestFitsItsDeadlineByTheHostsAttemptTime: every
// attempt takes 200 ms to fail. L starts at 0 with a 1.5 s deadline while
// no host has requests retrying, so its first attempt is not timed; B
// starts at 250 ms and is. Off, L sends at 0 and 0.6 s and ends at 0.8 s:
// the next wait, 800 ms, would end past the deadline. On, L's retry due at
// 0.6 s is held, and its life, fitted to the deadline as if its attempts
// took no time, kept a step at 1.4 s: L ended at the deadline, 1.5 s.
func TestUntimedHeldRequestFitsItsDeadlineByTheHostsAttemptTime(t *testing.T) {
	p := Policy{BaseDelay: 400 * time.Millisecond, Jitter: JitterNone}
	endsNoLaterThanOff(t, func(c StormControl) (end time.Duration, sends []time.Duration) {
		synctest.Test(t, func(t *testing.T) {
			log := &sendLog{start: time.Now()}
			tr := &Transport{Policy: p, Storm: c, Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
				log.note(r)
				time.Sleep(200 * time.Millisecond) // virtual: synctest's clock
				return response(503, ""), nil
			})}
			var wg sync.WaitGroup
			wg.Go(func() {
				time.Sleep(250 * time.Millisecond)
				resp, err := tr.RoundTrip(httptest.NewRequest("GET", "http://h/b", nil))
				require.NoError(t, err)
				resp.Body.Close()
			})
			ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
			defer cancel()
			req := httptest.NewRequest("GET", "http://h/l", nil).WithContext(ctx)
			req.Header.Set("X-Who", "L")
			resp, err := tr.RoundTrip(req)
			require.NoError(t, err)
			require.Equal(t, 503, resp.StatusCode)
			resp.Body.Close()
			end = time.Since(log.start)
			wg.Wait()
			sends = log.sends
		})
		return end, sends
	})
}

// TestUntimedLifesEarlyLastRetryIsNotItsLast: every attempt to h hangs 5 s
// and is reset, until h comes back at 43 s. L starts first, at 0, while no
// host has requests retrying, so its first attempt (failed at 5 s) is not
// timed; others (3 retries from 100 ms) arrive every 200 ms from 100 ms and
// keep h down. L's first retry, due at 17 s, is held (h proven down) and its
// life is drawn timed by nothing, one step left (MaxRetries 2, or a deadline
// that leaves room for one more wait): it goes at 17+24 = 41 s, into the
// outage, and its failure at 46 s, now timed, finds the life (17+24+5 s)
// over. Off sends retry 2 at 46 s, after h's return: 200. That early
// retry is not its last: the next goes in its place, at 46 s.
func TestUntimedLifesEarlyLastRetryIsNotItsLast(t *testing.T) {
	const back = 43 * time.Second
	for _, tc := range []struct {
		name     string
		p        Policy
		deadline time.Duration
	}{
		{"MaxRetries 2", Policy{MaxRetries: 2, BaseDelay: 12 * time.Second, MaxDelay: time.Minute, Jitter: JitterNone}, 0},
		{"MaxRetries 5, deadline 67 s", Policy{MaxRetries: 5, BaseDelay: 12 * time.Second, MaxDelay: time.Minute, Jitter: JitterNone}, 67 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			off := runEarlyEnd(t, stormOff, tc.p, tc.deadline, 0, back, back, "")
			for name, c := range map[string]StormControl{"on": {}} {
				on := runEarlyEnd(t, c, tc.p, tc.deadline, 0, back, back, "")
				if off.code == 200 && on.code != 200 {
					t.Errorf("%s: L ended at %v with %v, attempts at %v; off: %d at %v, attempts at %v", name, on.end, on.err, on.sends, off.code, off.end, off.sends)
				}
			}
		})
	}
}

type earlyEndResult struct {
	end   time.Duration
	sends []time.Duration
	code  int
	err   error
}

// runEarlyEnd runs L among others on host h: every attempt to h hangs 5 s and is reset (until back, when
// set). L starts at 0 while no host has requests retrying, so its first
// attempt is not timed; others (3 retries from 100 ms, every 200 ms for
// othersFor) keep h down and prove it. L's first retry (due at 17 s with
// BaseDelay 12 s) is held and its life drawn untimed.
func runEarlyEnd(t *testing.T, c StormControl, p Policy, deadline, maxElapsed, back, othersFor time.Duration, ra string) (r earlyEndResult) {
	const fail = 5 * time.Second
	synctest.Test(t, func(t *testing.T) {
		log := &sendLog{start: time.Now()}
		base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
			log.note(req)
			if back > 0 && time.Since(log.start) >= back {
				return response(200, "ok"), nil
			}
			select {
			case <-time.After(fail): // virtual: synctest's clock
			case <-req.Context().Done():
				return nil, req.Context().Err()
			}
			if ra != "" && req.Header.Get("X-Who") == "L" {
				resp := response(503, "")
				resp.Header.Set("Retry-After", ra)
				return resp, nil
			}
			return nil, syscall.ECONNRESET
		})
		tr := &Transport{Base: base, Storm: c, MaxElapsed: maxElapsed, Random: func() float64 { return 0.5 }, Policy: Policy{MaxRetries: 3, BaseDelay: 100 * time.Millisecond, MaxDelay: time.Second, Jitter: JitterNone}}
		var wg sync.WaitGroup
		wg.Go(func() {
			ctx := WithPolicy(context.Background(), p)
			if deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, deadline)
				defer cancel()
			}
			req := httptest.NewRequest("GET", "http://h/", nil).WithContext(ctx)
			req.Header.Set("X-Who", "L")
			resp, err := tr.RoundTrip(req)
			r.end, r.err = time.Since(log.start), err
			if err == nil {
				r.code = resp.StatusCode
				resp.Body.Close()
			}
		})
		for i := range int(othersFor / (200 * time.Millisecond)) {
			wg.Go(func() {
				callAfter(context.Background(), tr, 100*time.Millisecond+time.Duration(i)*200*time.Millisecond, "other")
			})
		}
		wg.Wait()
		r.sends = log.sends
	})
	return r
}

// TestUntimedLifeWithNoStepLeftSendsNoExtraRetry: L's life is drawn at
// its first retry (17 s) with no step at all: its next own wait (24 s)
// would end past the deadline or MaxElapsed (40 s). Off: retry 1 at 17 s
// fails at 22 s, and the 24 s wait would end at 46 s: L ends at 22 s after
// 2 attempts. On, the untimed life over at once, retry 1 went at 17 s and
// was taken for one sent early, and a third attempt went at 22 s. A life
// with no step left ends on time, whatever its attempts take.
func TestUntimedLifeWithNoStepLeftSendsNoExtraRetry(t *testing.T) {
	p := Policy{MaxRetries: 5, BaseDelay: 12 * time.Second, MaxDelay: time.Minute, Jitter: JitterNone}
	for _, tc := range []struct {
		name                 string
		deadline, maxElapsed time.Duration
	}{
		{"deadline 40 s", 40 * time.Second, 0},
		{"MaxElapsed 40 s", 0, 40 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			off := runEarlyEnd(t, stormOff, p, tc.deadline, tc.maxElapsed, 0, 45*time.Second, "")
			for name, c := range map[string]StormControl{"on": {}} {
				on := runEarlyEnd(t, c, p, tc.deadline, tc.maxElapsed, 0, 45*time.Second, "")
				if len(on.sends) > len(off.sends) || on.end > off.end {
					t.Errorf("%s: L ended at %v after %d attempts %v (%v); off: at %v after %d %v (%v)", name, on.end, len(on.sends), on.sends, on.err, off.end, len(off.sends), off.sends, off.err)
				}
			}
		})
	}
}

// TestUntimedLifesExtraRetryWaitsOnlyItsRetryAfter: the scenario of
// TestUntimedLifesEarlyLastRetryIsNotItsLast (MaxRetries 2, BaseDelay 12 s,
// attempts hang 5 s, h back at 43 s), but L's failures are 503 with
// Retry-After: 1. Off: retries at 17 s and 46 s, the 200 at 46 s. On:
// retry 1 goes at the untimed life's end, 41 s, and its 503 at 46 s says
// Retry-After: 1. The retry that goes in its place took the life, over,
// for one the Retry-After carried past, dropped it and waited a whole own
// step (24 s): retry 2 at 70 s. It waits the Retry-After only.
func TestUntimedLifesExtraRetryWaitsOnlyItsRetryAfter(t *testing.T) {
	p := Policy{MaxRetries: 2, BaseDelay: 12 * time.Second, MaxDelay: time.Minute, Jitter: JitterNone}
	off := runEarlyEnd(t, stormOff, p, 0, 0, 43*time.Second, 45*time.Second, "1")
	on := runEarlyEnd(t, StormControl{NoBudget: true}, p, 0, 0, 43*time.Second, 45*time.Second, "1")
	// on may wait its own Retry-After (1 s, spread up) after 46 s, no more
	if on.end > off.end+2*time.Second || len(on.sends) > len(off.sends) {
		t.Errorf("L ended at %v (%d) after %d attempts %v; off: at %v (%d) after %d %v", on.end, on.code, len(on.sends), on.sends, off.end, off.code, len(off.sends), off.sends)
	}
}

// TestHungProbeDoesNotStallTheLine: A, B and C fail together on a host
// that answers 503 in 1 ms until 1 s, and 200 after; A's attempts hang
// from hangAt until their AttemptTimeout (20 s), as on a dead connection.
// A was the line's probe when its attempt hung, and B and C, held, heard
// nothing of the host until their lives' ends: 200 at 6.2 s, off 1.4 s.
// Their steps now go on stale news: no attempt sent after their own had
// failed. When A, the oldest, waits a constant 100-200 ms, it may probe
// twice and its second probe hang: its first, failed, held every later
// step of B and C, and in 2-8 of 27 such arrangements they too got their
// 200 at 6.2 s, their lives' end (20 runs). News a step skipped for now
// holds that step only: at worst they skip one more step than plain
// backoff, and get their 200 at 3.0 s (1-2 of 27, in 7 runs of 20).
func TestHungProbeDoesNotStallTheLine(t *testing.T) {
	cases := []hungCase{{hangAt: 100 * time.Millisecond}}
	for aWait := 100 * time.Millisecond; aWait <= 200*time.Millisecond; aWait += 50 * time.Millisecond {
		for hangAt := 100 * time.Millisecond; hangAt < time.Second; hangAt += 100 * time.Millisecond {
			cases = append(cases, hungCase{hangAt, aWait})
		}
	}
	for _, tc := range cases {
		on, off := hungProbe(t, StormControl{}, tc), hungProbe(t, stormOff, tc)
		for _, who := range []string{"B", "C"} {
			assert.Equal(t, 200, on[who].status, "%+v %s", tc, who)
			// Their steps come at 1.4 s and 3.0 s: at most the one, never to the life's end.
			late := 4 * time.Second
			if tc.aWait == 0 {
				late = off[who].end * 5 / 4
			}
			assert.Less(t, on[who].end, late, "%+v %s: on %+v, off %+v", tc, who, on[who], off[who])
		}
	}
}

// hungCase is an arrangement of hungProbe: when A's attempts start to
// hang, and A's constant wait (zero: the others' Policy), with which A,
// then the oldest by a millisecond, probes again and again.
type hungCase struct{ hangAt, aWait time.Duration }

// hungOutcome is how a request of hungProbe ended.
type hungOutcome struct {
	end    time.Duration
	status int
}

// hungProbe runs TestHungProbeDoesNotStallTheLine's requests with storm.
func hungProbe(t *testing.T, storm StormControl, tc hungCase) map[string]hungOutcome {
	out := map[string]hungOutcome{}
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.Header.Get("X-Who") == "A" && time.Since(start) >= tc.hangAt {
				<-r.Context().Done()
				return nil, r.Context().Err()
			}
			if time.Since(start) < time.Second {
				time.Sleep(time.Millisecond) // virtual: synctest's clock
				return response(503, ""), nil
			}
			return response(200, ""), nil
		})
		// MaxElapsed is set so that first attempts are timed.
		tr := &Transport{Base: base, Storm: storm, AttemptTimeout: 20 * time.Second, MaxElapsed: time.Hour,
			Policy: Policy{MaxRetries: 5, BaseDelay: 200 * time.Millisecond, MaxDelay: 10 * time.Second, Jitter: JitterNone}}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, who := range []string{"A", "B", "C"} {
			wg.Go(func() {
				ctx := context.Background()
				switch {
				case tc.aWait > 0 && who == "A":
					ctx = WithPolicy(ctx, Policy{MaxRetries: 30, BaseDelay: tc.aWait, MaxDelay: tc.aWait, Jitter: JitterNone})
				case tc.aWait > 0:
					time.Sleep(time.Millisecond) // virtual: A is the oldest
				}
				req := httptest.NewRequest("GET", "http://h/", nil).WithContext(ctx)
				req.Header.Set("X-Who", who)
				resp, err := tr.RoundTrip(req)
				mu.Lock()
				defer mu.Unlock()
				o := hungOutcome{end: time.Since(start)}
				if err == nil {
					o.status = resp.StatusCode
					resp.Body.Close()
				}
				out[who] = o
			})
		}
		wg.Wait()
	})
	return out
}

// TestLastRetrySentAloneEndsTheLife: L, held while B retries, is alone on
// its host once B gives up at 3.5 s, and keeps its life, its own waits cut
// to end with it. Its retry at the life's end, into a host whose 503s now
// take 2 s, is its last: timed again by that slow attempt, the life once
// sent two retries more, and L ended at 14.1 s where plain backoff ended
// it at 8.1 s. Fresh one-shot requests keep coming until B gives up, so
// that the line does not probe.
func TestLastRetrySentAloneEndsTheLife(t *testing.T) {
	on, off := lastRetrySentAlone(t, StormControl{}), lastRetrySentAlone(t, stormOff)
	if on.end > off.end || len(on.sends) > len(off.sends) {
		t.Errorf("L ended at %v after %v; off at %v after %v", on.end, on.sends, off.end, off.sends)
	}
}

// aloneOutcome is when L of lastRetrySentAlone ended, and its attempts.
type aloneOutcome struct {
	end   time.Duration
	sends []time.Duration
}

// lastRetrySentAlone runs TestLastRetrySentAloneEndsTheLife's requests.
func lastRetrySentAlone(t *testing.T, storm StormControl) (o aloneOutcome) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var mu sync.Mutex
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.Header.Get("X-Who") == "L" {
				mu.Lock()
				o.sends = append(o.sends, time.Since(start))
				mu.Unlock()
			}
			if time.Since(start) >= 6*time.Second {
				time.Sleep(2 * time.Second) // virtual: synctest's clock
			} else {
				time.Sleep(10 * time.Millisecond)
			}
			return response(503, ""), nil
		})
		// MaxElapsed is set so that first attempts are timed.
		tr := &Transport{Base: base, Storm: storm, MaxElapsed: time.Hour, Policy: Policy{MaxRetries: NoRetries}}
		const bWait = 3490 * time.Millisecond
		call := func(p Policy, who string) {
			req := httptest.NewRequest("GET", "http://h/", nil).WithContext(WithPolicy(context.Background(), p))
			req.Header.Set("X-Who", who)
			if resp, err := tr.RoundTrip(req); err == nil {
				resp.Body.Close()
			}
		}
		var wg sync.WaitGroup
		wg.Go(func() { call(Policy{MaxRetries: 1, BaseDelay: bWait, MaxDelay: bWait, Jitter: JitterNone}, "B") })
		wg.Go(func() {
			time.Sleep(time.Millisecond)
			call(Policy{MaxRetries: 6, BaseDelay: time.Second, MaxDelay: time.Second, Jitter: JitterNone}, "L")
			o.end = time.Since(start)
		})
		wg.Go(func() {
			time.Sleep(3 * time.Millisecond)
			for time.Since(start) < bWait {
				call(Policy{MaxRetries: NoRetries}, "fresh")
				time.Sleep(time.Millisecond)
			}
		})
		wg.Wait()
	})
	return o
}
