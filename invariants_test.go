package httpretry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

// TestEveryRequestKeepsItsContractUnderRandomTraffic runs random traffic
// (three hosts with outages, 503s, resets, Retry-After, 429s with streamed
// bodies, deadlines, cancels, MaxElapsed, odd storm settings) through one
// Transport and checks each request against the README's promises: no more
// attempts than MaxRetries allows, nothing past its deadline or MaxElapsed,
// no longer than its own backoff can take when nothing else bounds it,
// OnRetry once per retry sent with the wait it really waited, at most one
// OnGiveUp with a true reason, every Retry-After honoured, the last
// response back, and no storm state left. It grew out of the reviewers'
// stress test, which ran 3,000 seeds clean. HTTPRETRY_PROPERTY_SEEDS sets
// how many seeds it runs.
func TestEveryRequestKeepsItsContractUnderRandomTraffic(t *testing.T) {
	t.Parallel() // virtual time only: runs beside the other simulations
	seeds := propertySeeds(150)
	for seed := uint64(1); seed <= uint64(seeds) && !t.Failed(); seed++ {
		runTraffic(t, seed)
	}
}

// trafficCall is one request of the random traffic and what became of it.
type trafficCall struct {
	start, end, deadline time.Time
	canceled             bool
	sends, ends          []time.Time
	statuses             []int           // each attempt's status; 0 for the context's error, -1 for another
	retryAfter           []time.Duration // the Retry-After each attempt was told
	retries, giveUps     []RetryEvent
	status               int
	err                  error
}

// trafficSetup is a seed's Transport settings.
type trafficSetup struct {
	pol        Policy
	storm      StormControl
	maxElapsed time.Duration
	maxRA      time.Duration
}

// drawTrafficSetup draws a Transport's settings, odd storm settings among
// them.
func drawTrafficSetup(rint func(int) int, rnd func() float64) trafficSetup {
	var s trafficSetup
	switch rint(7) {
	case 1: // the budgets act only with the gate off
		s.storm = StormControl{NoHostGate: true, Budget: &Budget{Burst: float64(rint(20)), Reserve: 1, Ratio: 0.1}}
	case 2:
		s.storm.ReleaseShare = rnd() * 3
	case 3:
		s.storm = StormControl{NoHostGate: true, Budget: &Budget{Burst: -1}}
	case 4:
		s.storm.ReleaseShare = math.Inf(1)
	case 5:
		s.storm = StormControl{NoHostGate: true, Budget: &Budget{Burst: math.Inf(1), Reserve: math.Inf(-1), Ratio: math.NaN()}}
	case 6:
		s.storm = StormControl{NoHostGate: true, NoBudget: true}
	}
	s.pol = Policy{MaxRetries: 1 + rint(8), BaseDelay: time.Duration(1+rint(300)) * time.Millisecond, MaxDelay: time.Duration(1+rint(3000)) * time.Millisecond, Jitter: Jitter(rint(4))}
	if rint(3) != 0 { // often, and often short: held steps near it (CI's find, seed 68)
		s.maxElapsed = time.Duration(300+rint(3000)) * time.Millisecond
	}
	if rint(2) == 0 {
		s.maxRA = time.Duration(1+rint(5)) * time.Second
	}
	return s
}

// runTraffic runs one seed's traffic in a synctest bubble and checks every
// call.
func runTraffic(t *testing.T, seed uint64) {
	synctest.Test(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(seed, 42))
		var rmu sync.Mutex
		rnd := func() float64 { rmu.Lock(); defer rmu.Unlock(); return r.Float64() }
		rint := func(n int) int { rmu.Lock(); defer rmu.Unlock(); return r.IntN(n) }
		set := drawTrafficSetup(rint, rnd)
		t0, zeroLatency := time.Now(), rint(4) == 0
		downUntil := map[string]time.Duration{}
		for _, h := range []string{"a", "b", "c"} {
			downUntil[h] = time.Duration(rint(6000)) * time.Millisecond
		}
		var mu sync.Mutex
		var calls []*trafficCall
		callOf := func(req *http.Request) *trafficCall {
			id, _ := strconv.Atoi(req.Header.Get("X-Call"))
			return calls[id]
		}
		base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
			mu.Lock()
			c := callOf(req)
			c.sends = append(c.sends, time.Now())
			mu.Unlock()
			latency := time.Duration(rint(300)) * time.Millisecond
			if zeroLatency {
				latency = 0
			}
			resp, err := trafficOutcome(req, latency, time.Since(t0) < downUntil[req.URL.Host], rint)
			mu.Lock()
			defer mu.Unlock()
			c.ends = append(c.ends, time.Now())
			c.statuses = append(c.statuses, -1)
			c.retryAfter = append(c.retryAfter, 0)
			if err != nil && (req.Context().Err() != nil || !c.deadline.IsZero() && !time.Now().Before(c.deadline)) { // RoundTrip takes it for the context's doing
				c.statuses[len(c.statuses)-1] = 0
			}
			if resp != nil {
				c.statuses[len(c.statuses)-1] = resp.StatusCode
				c.retryAfter[len(c.retryAfter)-1] = askedWait(resp.Header)
			}
			return resp, err
		})
		note := func(into func(*trafficCall) *[]RetryEvent) func(RetryEvent) {
			return func(e RetryEvent) {
				mu.Lock()
				defer mu.Unlock()
				events := into(callOf(e.Request))
				*events = append(*events, e)
			}
		}
		tr := &Transport{Base: base, Policy: set.pol, Storm: set.storm, Random: rnd, MaxElapsed: set.maxElapsed, MaxRetryAfter: set.maxRA,
			OnRetry:  note(func(c *trafficCall) *[]RetryEvent { return &c.retries }),
			OnGiveUp: note(func(c *trafficCall) *[]RetryEvent { return &c.giveUps }),
		}
		var wg sync.WaitGroup
		for range 20 + rint(100) {
			host, n, startAt := []string{"a", "b", "c"}[rint(3)], 1+rint(4), time.Duration(rint(4000))*time.Millisecond
			mine := make([]*trafficCall, n)
			mu.Lock()
			first := len(calls)
			for i := range mine {
				mine[i] = &trafficCall{}
			}
			calls = append(calls, mine...)
			mu.Unlock()
			wg.Go(func() {
				time.Sleep(startAt) // virtual: synctest's clock
				for i, c := range mine {
					trafficRequest(tr, host, first+i, &mu, c, rint)
					time.Sleep(time.Duration(rint(500)) * time.Millisecond) // virtual
				}
			})
		}
		wg.Wait()
		if s := tr.StormState(); s.Hosts != 0 || s.Retrying != 0 || s.Held != 0 {
			t.Errorf("seed %d: storm state left: %+v", seed, s)
		}
		mu.Lock()
		defer mu.Unlock()
		for id, c := range calls {
			for _, problem := range checkCall(tr, set, c) {
				t.Errorf("seed %d (%+v), call %d: %s\n%s", seed, set, id, problem, c.describe())
			}
		}
	})
}

// trafficOutcome answers an attempt after latency: while the host is down,
// mostly 503s (some with a Retry-After), resets and 429s (some with a
// Retry-After of up to 2 s, some with a streamed body of unknown length);
// when it is up, 200 but for a failure in ten.
func trafficOutcome(req *http.Request, latency time.Duration, down bool, rint func(int) int) (*http.Response, error) {
	timer := time.NewTimer(latency)
	defer timer.Stop()
	select {
	case <-req.Context().Done():
		return nil, req.Context().Err()
	case <-timer.C:
	}
	x := rint(10)
	switch {
	case down && x < 5 || !down && x == 0:
		return response(503, "x"), nil
	case down && x < 7 || !down && x == 1:
		return nil, syscall.ECONNRESET
	case down && x < 9 || !down && x == 2:
		resp := response(503, "x")
		resp.Header.Set("Retry-After", strconv.Itoa(1+rint(4)))
		if rint(2) == 0 { // a date, which names a moment: held steps wait until it
			now := time.Now()
			resp.Header.Set("Date", now.UTC().Format(http.TimeFormat))
			resp.Header.Set("Retry-After", now.Add(time.Duration(1+rint(4))*time.Second).UTC().Format(http.TimeFormat))
		}
		return resp, nil
	case down:
		resp := response(429, "x")
		if rint(2) == 0 {
			resp.Header.Set("Retry-After", strconv.Itoa(rint(3)))
		}
		if rint(3) == 0 {
			resp.Body, resp.ContentLength = streamedBody(rint), -1
		}
		return resp, nil
	}
	return response(200, "ok"), nil
}

// streamedBody is a body of unknown length written in up to two chunks of
// up to 40 KB, each after up to 80 ms: sometimes too long or too slow for
// the drain to keep.
func streamedBody(rint func(int) int) io.ReadCloser {
	pr, pw := io.Pipe()
	chunks, sizes, pauses := rint(3), [2]int{1 + rint(40000), 1 + rint(40000)}, [2]int{rint(80), rint(80)}
	go func() {
		defer pw.Close()
		for i := range chunks {
			time.Sleep(time.Duration(pauses[i]) * time.Millisecond) // virtual
			if _, err := pw.Write(make([]byte, sizes[i])); err != nil {
				return
			}
		}
	}()
	return pr
}

// trafficRequest sends call id to host, with no context, a random deadline
// or a random cancel, and records its outcome in c.
func trafficRequest(tr *Transport, host string, id int, mu *sync.Mutex, c *trafficCall, rint func(int) int) {
	ctx, cancel := context.Background(), context.CancelFunc(func() {})
	var deadline time.Time
	switch rint(4) {
	case 0:
		d := time.Duration(50+rint(6000)) * time.Millisecond
		ctx, cancel = context.WithTimeout(ctx, d)
		deadline = time.Now().Add(d)
	case 1:
		ctx, cancel = context.WithCancel(ctx)
		timer := time.AfterFunc(time.Duration(rint(5000))*time.Millisecond, cancel)
		defer timer.Stop()
	}
	defer cancel()
	req := httptest.NewRequest("GET", "http://"+host+"/", nil).WithContext(ctx)
	req.Header.Set("X-Call", strconv.Itoa(id))
	mu.Lock()
	c.start, c.deadline = time.Now(), deadline
	mu.Unlock()
	resp, err := tr.RoundTrip(req)
	mu.Lock()
	c.end, c.err, c.canceled = time.Now(), err, errors.Is(ctx.Err(), context.Canceled)
	if resp != nil {
		c.status = resp.StatusCode
	}
	mu.Unlock()
	if resp != nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// checkCall returns how c broke the contract, if it did.
func checkCall(tr *Transport, set trafficSetup, c *trafficCall) (problems []string) {
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	n := len(c.sends)
	if n > 1+set.pol.retries() {
		bad("%d attempts", n)
	}
	if !c.deadline.IsZero() && c.end.After(c.deadline) {
		bad("ended %v after its deadline", c.end.Sub(c.deadline))
	}
	for i, s := range c.sends[min(1, n):] { // a wait that would end at a limit is not started
		if set.maxElapsed > 0 && !s.Before(c.start.Add(set.maxElapsed)) {
			bad("attempt %d sent %v past MaxElapsed", i+2, s.Sub(c.start.Add(set.maxElapsed)))
		}
		if !c.deadline.IsZero() && !s.Before(c.deadline) {
			bad("attempt %d sent %v past its deadline", i+2, s.Sub(c.deadline))
		}
	}
	if bound := ownBackoffBound(tr, set); !c.canceled && c.deadline.IsZero() && !c.toldRetryAfter() && c.end.Sub(c.start) > bound {
		bad("took %v, its own backoff at most %v", c.end.Sub(c.start), bound)
	}
	problems = append(problems, c.checkEvents(tr, n)...)
	problems = append(problems, c.checkStops(set)...)
	if last := c.lastResponse(); c.err == nil && (c.status == 0 || c.status != last) {
		bad("returned status %d with a nil error; the last response was %d", c.status, last)
	}
	return problems
}

// ownBackoffBound is the longest a request can take when no deadline,
// cancel or Retry-After bounds it: every wait at MaxDelay or a Retry-After
// up to MaxRetryAfter spread up, every attempt at its 300 ms latency, and
// every failed response's drain before a wait at its longest (a hunt's
// find: a streamed 429 body drained 100 ms, and a correct request broke a
// bound without it).
func ownBackoffBound(tr *Transport, set trafficSetup) time.Duration {
	retries := set.pol.retries()
	_, limit := set.pol.bounds()
	ra := tr.maxRetryAfter()
	return time.Duration(retries)*(max(limit, ra+ra/10)+drainTimeout) + time.Duration(retries+1)*300*time.Millisecond
}

// checkEvents checks OnRetry and OnGiveUp against n attempts sent.
func (c *trafficCall) checkEvents(tr *Transport, n int) (problems []string) {
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if len(c.retries) != max(n-1, 0) {
		bad("%d OnRetry for %d attempts", len(c.retries), n)
	}
	if len(c.giveUps) > 1 {
		bad("%d OnGiveUp", len(c.giveUps))
	}
	for i, e := range c.retries {
		if i+1 < n && i < len(c.ends) {
			if gap := c.sends[i+1].Sub(c.ends[i]); gap < e.Wait || gap > e.Wait+drainTimeout {
				bad("retry %d waited %v, OnRetry says %v (held %v)", i+2, gap, e.Wait, e.Held)
			}
		}
		if e.Held > e.Wait || e.Held < 0 {
			bad("retry %d held %v of a wait of %v", i+2, e.Held, e.Wait)
		}
		if i < len(c.retryAfter) && c.retryAfter[i] <= tr.maxRetryAfter() && e.Wait < c.retryAfter[i] {
			bad("retry %d waited %v, told Retry-After %v", i+2, e.Wait, c.retryAfter[i])
		}
	}
	return problems
}

// checkStops checks that every OnGiveUp's reason is true of c.
func (c *trafficCall) checkStops(set trafficSetup) (problems []string) {
	for _, e := range c.giveUps {
		switch {
		case e.Stop == StopDeadline && c.deadline.IsZero():
			problems = append(problems, "StopDeadline without a deadline")
		case e.Stop == StopMaxElapsed && set.maxElapsed == 0:
			problems = append(problems, "StopMaxElapsed without MaxElapsed")
		case e.Stop == StopCanceled && !c.canceled:
			problems = append(problems, "StopCanceled without a cancel")
		case e.Stop == StopBudget && !set.storm.budgeted():
			problems = append(problems, "StopBudget with no budget")
		}
	}
	return problems
}

// askedWait returns the wait h's Retry-After asks for: seconds, or a date
// counted from the response's Date.
func askedWait(h http.Header) time.Duration {
	if secs, err := strconv.Atoi(h.Get("Retry-After")); err == nil {
		return time.Duration(secs) * time.Second
	}
	at, _ := http.ParseTime(h.Get("Retry-After"))
	date, _ := http.ParseTime(h.Get("Date"))
	return at.Sub(date)
}

// toldRetryAfter reports whether any attempt of c was told a Retry-After.
func (c *trafficCall) toldRetryAfter() bool {
	for _, d := range c.retryAfter {
		if d > 0 {
			return true
		}
	}
	return false
}

// lastResponse returns the status of c's last attempt that got a
// response, when every attempt after it ended in the context's error (a
// retry the deadline cut off gives back the response before it); 0
// otherwise.
func (c *trafficCall) lastResponse() int {
	for i := len(c.statuses) - 1; i >= 0; i-- {
		if c.statuses[i] != 0 || c.deadline.IsZero() {
			return max(c.statuses[i], 0)
		}
	}
	return 0
}

// describe returns c's attempts and events, for a failure's message.
func (c *trafficCall) describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "  started at +0, deadline %v, ended %v: status %d, err %v\n", since(c.start, c.deadline), c.end.Sub(c.start), c.status, c.err)
	for i, s := range c.sends {
		fmt.Fprintf(&b, "  attempt %d sent %v", i+1, s.Sub(c.start))
		if i < len(c.ends) {
			fmt.Fprintf(&b, ", ended %v with %d (Retry-After %v)", c.ends[i].Sub(c.start), c.statuses[i], c.retryAfter[i])
		}
		b.WriteString("\n")
	}
	for _, e := range append(c.retries, c.giveUps...) {
		fmt.Fprintf(&b, "  event: attempt %d, status %d, err %v, wait %v, held %v, stop %v\n", e.Attempt, e.Status(), e.Err, e.Wait, e.Held, e.Stop)
	}
	return b.String()
}

// since returns t - from, or 0 for a zero t.
func since(from, t time.Time) time.Duration {
	if t.IsZero() {
		return 0
	}
	return t.Sub(from)
}
