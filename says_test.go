package httpretry

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// What a held request's skipped steps take from the Retry-Afters the host
// said to other requests.

// saysOut is what became of one request of saysRun.
type saysOut struct {
	code  int
	stop  StopReason
	sends []time.Duration
	end   time.Duration
}

// saysRun sends a request to http://h/<path> at each start (no deadline)
// in a synctest bubble, each with its own random stream PCG(seed, i);
// answer says what request i's attempt at at gets, after 5 ms.
func saysRun(t *testing.T, c StormControl, pol Policy, seed uint64, starts []time.Duration, paths []string,
	answer func(i int, at time.Duration) *http.Response) []saysOut {
	return saysRunOn(t, clients{n: 1}, c, pol, seed, starts, paths, answer)
}

// clients is how saysRunOn's requests are sent: through n Transports,
// request i through the (i mod n)-th, each with its own storm control;
// each OnRetry taking onRetry.
type clients struct {
	n       int
	onRetry time.Duration
}

// saysRunOn is saysRun through cl's clients.
func saysRunOn(t *testing.T, cl clients, c StormControl, pol Policy, seed uint64, starts []time.Duration, paths []string,
	answer func(i int, at time.Duration) *http.Response) []saysOut {
	out := make([]saysOut, len(starts))
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		var mu sync.Mutex
		streams := newRequestStreams(seed)
		newTransport := func() *Transport {
			return &Transport{Storm: c, Policy: pol,
				Random:  streams.random,
				OnRetry: func(RetryEvent) { time.Sleep(cl.onRetry) }, // virtual
				OnGiveUp: func(e RetryEvent) {
					i, _ := strconv.Atoi(e.Request.Header.Get("X-I"))
					mu.Lock()
					out[i].stop = e.Stop
					mu.Unlock()
				},
				Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
					i, _ := strconv.Atoi(r.Header.Get("X-I"))
					at := time.Since(t0)
					mu.Lock()
					out[i].sends = append(out[i].sends, at-starts[i])
					mu.Unlock()
					time.Sleep(5 * time.Millisecond) // virtual: synctest's clock
					resp := answer(i, at)
					resp.Request = r
					return resp, nil
				})}
		}
		trs := make([]*Transport, cl.n)
		for i := range trs {
			trs[i] = newTransport()
		}
		var wg sync.WaitGroup
		for i, start := range starts {
			wg.Go(func() {
				streams.join(uint64(i))
				time.Sleep(start) // virtual
				req := httptest.NewRequest("GET", "http://h/"+paths[i], nil).WithContext(context.Background())
				req.Header.Set("X-I", strconv.Itoa(i))
				resp, err := trs[i%cl.n].RoundTrip(req)
				mu.Lock()
				defer mu.Unlock()
				out[i].end = time.Since(t0) - start
				if err == nil {
					out[i].code = resp.StatusCode
					resp.Body.Close()
				}
			})
		}
		wg.Wait()
	})
	return out
}

// heldRescuedAsOff checks that request i, which plain backoff (off)
// rescues, is rescued held (on) too.
func heldRescuedAsOff(t *testing.T, on, off []saysOut, i int) {
	t.Helper()
	if off[i].code != 200 {
		t.Fatalf("arrangement: plain backoff's request %d got %d at %v after %v", i, off[i].code, off[i].end, off[i].sends)
	}
	if on[i].code != 200 {
		t.Errorf("held request %d: %d (%v) at %v after attempts at %v; plain backoff: 200 at %v after %v",
			i, on[i].code, on[i].stop, on[i].end, on[i].sends, off[i].end, off[i].sends)
	}
}

// says429 is a 429 whose Retry-After is ra.
func says429(ra string) *http.Response {
	resp := response(429, "slow down")
	resp.Header.Set("Retry-After", ra)
	return resp
}

// TestOverCapRetryAfterOfAnotherRequestHoldsNoStep: C is told Retry-After:
// 3600, over MaxRetryAfter, and gives up at once, held or not. Its hour
// went into what the host says, and A's skipped step was put an hour off;
// the line let A go between its steps, and that retry stood for its last
// step, 208 ms before plain backoff's, which found the host back (a
// review's drawn outages: 10 of 3,470 rescues lost, 80 failures ending
// later). A Retry-After that is not heeded times no step.
func TestOverCapRetryAfterOfAnotherRequestHoldsNoStep(t *testing.T) {
	pol := Policy{MaxRetries: 3, BaseDelay: 198 * time.Millisecond, MaxDelay: 198 * time.Millisecond, Jitter: JitterNone}
	starts := []time.Duration{119 * time.Millisecond, 1594 * time.Millisecond, 990 * time.Millisecond}
	paths := []string{"a", "a", "big"}
	answer := func(i int, at time.Duration) *http.Response {
		switch {
		case at >= 3200*time.Millisecond:
			return response(200, "ok")
		case i == 2:
			return says429("3600")
		}
		return says429("1")
	}
	on := saysRun(t, StormControl{}, pol, 3, starts, paths, answer)
	off := saysRun(t, stormOff, pol, 3, starts, paths, answer)
	if off[2].stop != StopRetryAfter || on[2].stop != StopRetryAfter {
		t.Fatalf("arrangement: C on %+v, off %+v", on[2], off[2])
	}
	heldRescuedAsOff(t, on, off, 0)
}

// TestFastPathLosesNoStepToSlowPathsRetryAfter: /slow says Retry-After: 20
// and stays down; /fast says 2 and is back from 4.2 s. Held /fast's steps
// waited the host's longest Retry-After, /slow's, its last put 20 s off;
// the line let it go between steps, told 2 s that retry stood for its
// last step, and /fast returned the 429 at 2.5 s, where plain backoff's
// last attempt, at 4.3 s, was answered (a review's drawn hosts: 21 of
// 2,766 rescues lost). A path's steps wait what that path is told.
func TestFastPathLosesNoStepToSlowPathsRetryAfter(t *testing.T) {
	pol := Policy{MaxRetries: 2, BaseDelay: 100 * time.Millisecond, MaxDelay: 100 * time.Millisecond, Jitter: JitterNone}
	var starts []time.Duration
	var paths []string
	for k := range 8 {
		starts, paths = append(starts, time.Duration(k)*200*time.Millisecond), append(paths, "slow")
	}
	starts, paths = append(starts, 300*time.Millisecond), append(paths, "fast")
	f := len(starts) - 1
	answer := func(i int, at time.Duration) *http.Response {
		switch {
		case paths[i] == "slow":
			return says429("20")
		case at >= 4200*time.Millisecond:
			return response(200, "ok")
		}
		return says429("2")
	}
	on := saysRun(t, StormControl{}, pol, 1, starts, paths, answer)
	off := saysRun(t, stormOff, pol, 1, starts, paths, answer)
	heldRescuedAsOff(t, on, off, f)
}

// TestLongRetryAfterSaidOnceHoldsNoLaterStep: the host says Retry-After: 6
// until 1.641 s, then 1, and answers from 8.263 s. A's step skipped at
// 8.035 s waited the 6 s said 7 s before, its next put at 14.09 s; the
// line let A go between its steps, and that retry stood for its last step,
// 889 ms early: 429, where plain backoff's found the host back (a
// review's drawn outages: 13 of 3,431 rescues lost).
func TestLongRetryAfterSaidOnceHoldsNoLaterStep(t *testing.T) {
	pol := Policy{MaxRetries: 3, BaseDelay: 28 * time.Millisecond, MaxDelay: 56 * time.Millisecond, Jitter: JitterNone}
	starts := []time.Duration{721 * time.Millisecond, 1041 * time.Millisecond, 1494 * time.Millisecond}
	answer := func(_ int, at time.Duration) *http.Response {
		switch {
		case at >= 8263*time.Millisecond:
			return response(200, "ok")
		case at+5*time.Millisecond < 1641*time.Millisecond:
			return says429("6")
		}
		return says429("1")
	}
	on := saysRun(t, StormControl{}, pol, 38, starts, []string{"", "", ""}, answer)
	off := saysRun(t, stormOff, pol, 38, starts, []string{"", "", ""}, answer)
	heldRescuedAsOff(t, on, off, 0)
}

// TestLongRetryAfterBeingWaitedHoldsNoOtherStep: three requests to one
// path; X's first failure is told Retry-After: 20 and X waits it, every
// other failure is told 2, and the host answers from 4.2 s. While X
// waited, its 20 s was what the path was told last: F's skipped step
// waited it, the line let F go between steps, that retry stood for its
// last step, and F returned the 429 where plain backoff's last attempt was
// answered (a review's drawn groups: 91 of 2,442 rescues lost). What was
// told before F was told last is not what the host says now.
func TestLongRetryAfterBeingWaitedHoldsNoOtherStep(t *testing.T) {
	pol := Policy{MaxRetries: 2, BaseDelay: 100 * time.Millisecond, MaxDelay: 100 * time.Millisecond, Jitter: JitterNone}
	starts := []time.Duration{0, 200 * time.Millisecond, 300 * time.Millisecond}
	paths := []string{"a", "a", "a"}
	const f = 2
	answer := func(i int, at time.Duration) *http.Response {
		switch {
		case at >= 4200*time.Millisecond:
			return response(200, "ok")
		case i == 0:
			return says429("20")
		}
		return says429("2")
	}
	on := saysRun(t, StormControl{}, pol, 1, starts, paths, answer)
	off := saysRun(t, stormOff, pol, 1, starts, paths, answer)
	heldRescuedAsOff(t, on, off, f)
}
