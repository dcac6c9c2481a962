package httpretry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

// TestConcurrentCallsKeepTheContract is a randomized property test of the
// Transport's per-call contract for several concurrent calls through one
// Transport with storm control on (one case in five a small budget in the
// host gate's place), under synctest's virtual clock. A
// scripted Base, drawn from a seeded source, answers each attempt with a
// status (with or without Retry-After, bodies small or large, fast or
// slow), a transport error or a delay; each call has its own start,
// deadline and, sometimes, its own Policy (WithPolicy). Per call it
// checks: at most 1+MaxRetries attempts; no attempt sent at or after the
// deadline or MaxElapsed's end; RoundTrip returns by its deadline; an
// error is an *Error whose Reason is OnGiveUp's, and the outcome returned
// is the one the README's "When retries stop" table names (the last
// answered attempt's response, from memory when it was drained, or an
// *Error wrapping the last transport error or naming a status not kept);
// every response not returned is closed exactly once; one OnRetry per
// retry, whose Wait is the virtual time from the previous attempt's end
// (after its drain) to the retry; at most one OnGiveUp, none for a final
// outcome, one for a retryable outcome not retried; no retry before the
// end of a Retry-After it was told (up to MaxRetryAfter), and none after a
// longer one; and, once every call is over, a StormState of zeros.
// HTTPRETRY_PROPERTY_SEEDS sets the number of seeds (200 by default),
// HTTPRETRY_PROPERTY_SEED runs one.
func TestConcurrentCallsKeepTheContract(t *testing.T) {
	t.Parallel() // virtual time only: runs beside the other simulations
	first, n := 1, propertySeeds(200)
	if s, err := strconv.Atoi(os.Getenv("HTTPRETRY_PROPERTY_SEED")); err == nil {
		first, n = s, 1
	}
	var stats propStats
	defer func() { t.Logf("stats: %+v", stats) }()
	for seed := first; seed < first+n; seed++ {
		c := propDrawCase(uint64(seed))
		if problems := propRun(t, c, &stats); len(problems) > 0 {
			t.Errorf("seed %d: %d violations:\n  %s", seed, len(problems), strings.Join(problems, "\n  "))
			if testing.Verbose() {
				t.Logf("case: %s", c)
			}
		}
	}
}

// propOutcome is what the host does with one attempt.
type propOutcome struct {
	kind     int // 0: a response; 1: connection reset; 2: refused dial; 3: an error not retried
	code     int
	ra       int           // Retry-After in seconds, -1: none
	raDate   bool          // sent as a date, with a Date header
	lat      time.Duration // before the headers
	bodyLen  int
	bodyLat  time.Duration // the body arrives this long after the headers
	knownLen bool          // ContentLength set
}

func (o propOutcome) String() string {
	switch o.kind {
	case 1:
		return fmt.Sprintf("reset@%v", o.lat)
	case 2:
		return fmt.Sprintf("refused@%v", o.lat)
	case 3:
		return fmt.Sprintf("boom@%v", o.lat)
	}
	s := fmt.Sprintf("%d@%v", o.code, o.lat)
	if o.ra >= 0 {
		s += fmt.Sprintf(" RA %d", o.ra)
		if o.raDate {
			s += " (date)"
		}
	}
	if o.bodyLen > 0 || o.bodyLat > 0 {
		s += fmt.Sprintf(" body %d after %v known %v", o.bodyLen, o.bodyLat, o.knownLen)
	}
	return s
}

// propCallSpec is one call: when it starts, its deadline, its Policy, its
// host, and what each of its attempts gets while the host is down and up.
type propCallSpec struct {
	client   int           // calls of one client run one after another
	start    time.Duration // the client's first call: when it starts; later ones: the pause after the call before
	deadline time.Duration // 0: none
	cancelAt time.Duration // the caller cancels then (0: never), off the millisecond grid so that it ties no timer
	pol      *Policy       // nil: the Transport's
	host     string
	down, up []propOutcome
}

// propCase is one seed's scenario.
type propCase struct {
	seed       uint64
	pol        Policy
	maxElapsed time.Duration
	maxRA      time.Duration
	attemptTO  time.Duration
	storm      StormControl
	downs      [][2]time.Duration
	calls      []propCallSpec
}

func (c propCase) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "pol %+v maxElapsed %v maxRA %v attemptTO %v storm %+v downs %v\n", c.pol, c.maxElapsed, c.maxRA, c.attemptTO, c.storm, c.downs)
	for i, s := range c.calls {
		fmt.Fprintf(&b, "    call %d: client %d start %v deadline %v cancel %v host %s", i, s.client, s.start, s.deadline, s.cancelAt, s.host)
		if s.pol != nil {
			fmt.Fprintf(&b, " pol %+v", *s.pol)
		}
		fmt.Fprintf(&b, "\n      down %v\n      up   %v\n", s.down, s.up)
	}
	return b.String()
}

func propPolicy(r *rand.Rand) Policy {
	return Policy{
		MaxRetries: r.IntN(8) - 1,
		BaseDelay:  time.Duration(r.IntN(400)-20) * time.Millisecond,
		MaxDelay:   time.Duration(r.IntN(3000)) * time.Millisecond,
		Jitter:     Jitter(r.IntN(4)),
	}
}

func propDrawOutcome(r *rand.Rand, fail, raHeavy bool) propOutcome {
	o := propOutcome{ra: -1}
	switch r.IntN(4) {
	case 0:
		o.lat = 0
	case 1:
		o.lat = time.Duration(1+r.IntN(30)) * time.Millisecond
	case 2:
		o.lat = time.Duration(50+r.IntN(500)) * time.Millisecond
	case 3:
		o.lat = time.Duration(r.IntN(5)) * time.Millisecond
	}
	if fail {
		switch k := r.IntN(20); {
		case k < 4:
			o.kind = 1
		case k < 6:
			o.kind = 2
		case k < 7:
			o.kind = 3
		default:
			o.code = []int{503, 503, 503, 502, 504, 429, 500}[r.IntN(7)]
		}
	} else {
		o.code = []int{200, 200, 200, 200, 404, 503}[r.IntN(6)]
	}
	if o.kind == 0 {
		if o.code == 503 || o.code == 429 {
			if r.IntN(3) == 0 || raHeavy {
				o.ra = []int{0, 1, 1, 2, 3, 5, 70}[r.IntN(7)]
				o.raDate = r.IntN(3) == 0
			}
		}
		switch r.IntN(6) {
		case 0:
			o.bodyLen = 70 << 10 // over drainLimit
		case 1, 2:
			o.bodyLen = r.IntN(200)
		}
		o.knownLen = r.IntN(2) == 0
		if r.IntN(4) == 0 {
			o.bodyLat = time.Duration(r.IntN(250)) * time.Millisecond
			if o.bodyLat == drainTimeout { // two timers at one instant
				o.bodyLat++
			}
		}
	}
	return o
}

func propDrawCase(seed uint64) propCase {
	r := rand.New(rand.NewPCG(seed, 0x7a7a))
	c := propCase{seed: seed, pol: propPolicy(r)}
	if r.IntN(4) == 0 {
		c.maxElapsed = time.Duration(200+r.IntN(5000)) * time.Millisecond
	}
	c.maxRA = []time.Duration{0, 0, -1, time.Second, 2 * time.Second, 4 * time.Second}[r.IntN(6)]
	if r.IntN(5) == 0 {
		c.attemptTO = time.Duration(20+r.IntN(400)) * time.Millisecond
	}
	if r.IntN(5) == 0 { // the budget in the gate's place, small enough to refuse
		c.storm = StormControl{NoHostGate: true, Budget: &Budget{Burst: float64(r.IntN(4)), Ratio: -1, Reserve: -1}}
	}
	if r.IntN(4) == 0 {
		c.storm.ReleaseShare = []float64{0.1, 1, 4}[r.IntN(3)]
	}
	at := time.Duration(0)
	for range 1 + r.IntN(3) {
		a := at + time.Duration(r.IntN(1500))*time.Millisecond
		b := a + time.Duration(100+r.IntN(3000))*time.Millisecond
		c.downs = append(c.downs, [2]time.Duration{a, b})
		at = b
	}
	raHeavy := r.IntN(4) == 0 // most failures say Retry-After
	nClients := 2 + r.IntN(10)
	if r.IntN(4) == 0 { // a crowd on one host
		nClients = 10 + r.IntN(30)
	}
	for cli := range nClients {
		for j := range 1 + r.IntN(3) {
			s := propCallSpec{client: cli, start: time.Duration(r.IntN(3000)) * time.Millisecond, host: "h1"}
			if j > 0 {
				s.start = time.Duration(r.IntN(500)) * time.Millisecond
			}
			if r.IntN(6) == 0 {
				s.host = "h2"
			}
			if r.IntN(2) == 0 {
				s.deadline = time.Duration(50+r.IntN(5000)) * time.Millisecond
			}
			if r.IntN(8) == 0 {
				s.cancelAt = time.Duration(r.IntN(4000))*time.Millisecond + 7
			}
			if r.IntN(2) == 0 {
				p := propPolicy(r)
				s.pol = &p
			}
			for range 2 + r.IntN(10) {
				s.down = append(s.down, propDrawOutcome(r, true, raHeavy))
				s.up = append(s.up, propDrawOutcome(r, r.IntN(5) == 0, raHeavy))
			}
			for _, o := range [][]propOutcome{s.down, s.up} {
				for j := range o {
					if o[j].lat == c.attemptTO && c.attemptTO > 0 { // two timers at one instant
						o[j].lat++
					}
				}
			}
			c.calls = append(c.calls, s)
		}
	}
	return c
}

func (c propCase) isDown(at time.Duration) bool { return inWindows(c.downs, at) }

// propBody is a response body that arrives at readyAt, whose Close ends a
// Read under way, and that records its closes and whether its end was read.
type propBody struct {
	data    []byte
	readyAt time.Time
	closed  chan struct{}

	mu       sync.Mutex
	off      int
	closes   int
	closedAt time.Time
	eof      bool
}

var errPropClosed = errors.New("read on closed body")

func (b *propBody) Read(p []byte) (int, error) {
	if d := time.Until(b.readyAt); d > 0 {
		tm := time.NewTimer(d)
		defer tm.Stop()
		select {
		case <-tm.C:
		case <-b.closed:
			return 0, errPropClosed
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closes > 0 {
		return 0, errPropClosed
	}
	n := copy(p, b.data[b.off:])
	b.off += n
	if b.off == len(b.data) {
		b.eof = true
		return n, io.EOF
	}
	return n, nil
}

func (b *propBody) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closes++
	if b.closes == 1 {
		b.closedAt = time.Now()
		close(b.closed)
	}
	return nil
}

// propAtt is one attempt as the Base saw it.
type propAtt struct {
	sent, ret time.Time
	out       propOutcome
	resp      *http.Response
	body      *propBody
	err       error
	cut       bool // the call's deadline ended it
	canceled  bool // the caller's cancel ended it
	timedOut  bool // the attempt's own timeout ended it
}

// end is when the retrier went on after the attempt: its response's
// drain, if any, closes the body.
func (a *propAtt) end() time.Time {
	if a.body != nil {
		a.body.mu.Lock()
		defer a.body.mu.Unlock()
		if a.body.closes > 0 && a.body.closedAt.After(a.ret) {
			return a.body.closedAt
		}
	}
	return a.ret
}

type propEv struct {
	at time.Time
	e  RetryEvent
}

// propCall is what became of one call.
type propCall struct {
	spec     propCallSpec
	start    time.Time
	deadline time.Time
	ctx      context.Context
	canceled time.Time // when the caller canceled, if it did before RoundTrip returned
	mu       sync.Mutex
	atts     []*propAtt
	retries  []propEv
	giveUps  []propEv
	end      time.Time
	resp     *http.Response
	err      error
	got      []byte
	gotErr   error
}

// propStats counts what the seeds exercised.
type propStats struct {
	Calls, Attempts, Retries, Held, Cut, NotKept, FromMemory, Errors, RAWaits int
	Stops                                                                     map[StopReason]int
}

func (s *propStats) add(cl *propCall) {
	if s.Stops == nil {
		s.Stops = map[StopReason]int{}
	}
	s.Calls++
	s.Attempts += len(cl.atts)
	s.Retries += len(cl.retries)
	for _, e := range cl.retries {
		if e.e.Held > 0 {
			s.Held++
		}
		if e.e.Response != nil && e.e.Response.Header.Get("Retry-After") != "" {
			s.RAWaits++
		}
	}
	for _, a := range cl.atts {
		if a.cut {
			s.Cut++
		}
	}
	if errors.Is(cl.err, errLastNotKept) {
		s.NotKept++
	}
	if cl.err != nil {
		s.Errors++
	}
	if cl.resp != nil {
		if _, ok := cl.resp.Body.(*propBody); !ok {
			s.FromMemory++
		}
	}
	for _, g := range cl.giveUps {
		s.Stops[g.e.Stop]++
	}
}

func propRun(t *testing.T, c propCase, stats *propStats) (problems []string) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		calls := make([]*propCall, len(c.calls))
		for i, s := range c.calls {
			calls[i] = &propCall{spec: s}
		}
		var pmu sync.Mutex
		bad := func(i int, format string, args ...any) {
			pmu.Lock()
			problems = append(problems, fmt.Sprintf("call %d: ", i)+fmt.Sprintf(format, args...))
			pmu.Unlock()
		}
		base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
			i, _ := strconv.Atoi(req.Header.Get("X-Call"))
			cl := calls[i]
			a := &propAtt{sent: time.Now()}
			cl.mu.Lock()
			k := len(cl.atts)
			cl.atts = append(cl.atts, a)
			cl.mu.Unlock()
			script := cl.spec.up
			if c.isDown(time.Since(t0)) {
				script = cl.spec.down
			}
			o := script[min(k, len(script)-1)]
			a.out = o
			if o.lat > 0 {
				tm := time.NewTimer(o.lat)
				select {
				case <-req.Context().Done():
					tm.Stop()
					a.ret = time.Now()
					switch {
					case !cl.deadline.IsZero() && !a.ret.Before(cl.deadline):
						a.cut = true
					case cl.ctx.Err() == context.Canceled:
						a.canceled = true
					default:
						a.timedOut = true
					}
					a.err = req.Context().Err()
					return nil, a.err
				case <-tm.C:
				}
			}
			a.ret = time.Now()
			if o.kind != 0 && !cl.deadline.IsZero() && !a.ret.Before(cl.deadline) {
				// An error at the deadline is the deadline's doing
				// (RoundTrip's endedBy): a tie of two timers.
				a.cut = true
			}
			switch o.kind {
			case 1:
				a.err = fmt.Errorf("read: %w", syscall.ECONNRESET)
				return nil, a.err
			case 2:
				a.err = &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
				return nil, a.err
			case 3:
				a.err = errors.New("boom")
				return nil, a.err
			}
			b := &propBody{data: bytes.Repeat([]byte{byte('a' + k%26)}, o.bodyLen), readyAt: a.ret.Add(o.bodyLat), closed: make(chan struct{})}
			resp := &http.Response{StatusCode: o.code, Status: http.StatusText(o.code), Header: http.Header{}, Body: b, ContentLength: -1, Request: req}
			if o.knownLen {
				resp.ContentLength = int64(o.bodyLen)
			}
			if o.ra >= 0 && o.raDate {
				now := time.Now().UTC()
				resp.Header.Set("Date", now.Format(http.TimeFormat))
				resp.Header.Set("Retry-After", now.Add(time.Duration(o.ra)*time.Second).Format(http.TimeFormat))
			} else if o.ra >= 0 {
				resp.Header.Set("Retry-After", strconv.Itoa(o.ra))
			}
			a.resp, a.body = resp, b
			return resp, nil
		})
		callOf := func(e RetryEvent) *propCall {
			i, _ := strconv.Atoi(e.Request.Header.Get("X-Call"))
			return calls[i]
		}
		tr := &Transport{
			Base: base, Policy: c.pol, MaxElapsed: c.maxElapsed, MaxRetryAfter: c.maxRA, AttemptTimeout: c.attemptTO,
			Storm: c.storm, Random: seeded(c.seed),
			OnRetry: func(e RetryEvent) {
				cl := callOf(e)
				cl.mu.Lock()
				cl.retries = append(cl.retries, propEv{time.Now(), e})
				cl.mu.Unlock()
			},
			OnGiveUp: func(e RetryEvent) {
				cl := callOf(e)
				cl.mu.Lock()
				cl.giveUps = append(cl.giveUps, propEv{time.Now(), e})
				cl.mu.Unlock()
			},
		}
		run := func(i int, cl *propCall) {
			ctx := context.Background()
			if cl.spec.pol != nil {
				ctx = WithPolicy(ctx, *cl.spec.pol)
			}
			cl.start = time.Now()
			if cl.spec.deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, cl.spec.deadline)
				defer cancel()
				cl.deadline, _ = ctx.Deadline()
			}
			if cl.spec.cancelAt > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithCancel(ctx)
				stop := time.AfterFunc(cl.spec.cancelAt, func() {
					cl.mu.Lock()
					if cl.end.IsZero() {
						cl.canceled = time.Now()
					}
					cl.mu.Unlock()
					cancel()
				})
				defer stop.Stop()
				defer cancel()
			}
			cl.ctx = ctx
			req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+cl.spec.host+"/x", nil)
			req.Header.Set("X-Call", strconv.Itoa(i))
			resp, err := tr.RoundTrip(req)
			cl.mu.Lock()
			cl.end, cl.resp, cl.err = time.Now(), resp, err
			cl.mu.Unlock()
			if resp != nil {
				got, gerr := io.ReadAll(resp.Body)
				resp.Body.Close()
				cl.mu.Lock()
				cl.got, cl.gotErr = got, gerr
				cl.mu.Unlock()
			}
		}
		var wg sync.WaitGroup
		for i := 0; i < len(calls); {
			j := i
			for j < len(calls) && calls[j].spec.client == calls[i].spec.client {
				j++
			}
			from, to := i, j
			wg.Go(func() {
				for k := from; k < to; k++ {
					time.Sleep(calls[k].spec.start) // virtual
					run(k, calls[k])
				}
			})
			i = j
		}
		wg.Wait()
		synctest.Wait()
		if s := tr.StormState(); s.Hosts != 0 || s.Retrying != 0 || s.Held != 0 {
			bad(-1, "StormState after every call ended: %+v", s)
		}
		for i, cl := range calls {
			stats.add(cl)
			propCheck(c, cl, tr, func(format string, args ...any) { bad(i, format, args...) }, t0)
		}
	})
	return problems
}

// propRetryable is the default classifier's verdict on an attempt's outcome.
func propRetryable(a *propAtt) bool {
	if a.err != nil {
		return a.timedOut || a.out.kind == 1 || a.out.kind == 2
	}
	switch a.resp.StatusCode {
	case 429, 502, 503, 504:
		return true
	}
	return false
}

func propCheck(c propCase, cl *propCall, tr *Transport, bad func(string, ...any), t0 time.Time) {
	rel := func(at time.Time) time.Duration { return at.Sub(t0) }
	pol := c.pol
	if cl.spec.pol != nil {
		pol = *cl.spec.pol
	}
	n := len(cl.atts)
	var trace strings.Builder
	fmt.Fprintf(&trace, "start %v deadline %v cancel %v", rel(cl.start), cl.spec.deadline, cl.spec.cancelAt)
	for k, a := range cl.atts {
		fmt.Fprintf(&trace, "\n      a%d sent %v ret %v end %v %v err %v cut %v to %v canceled %v", k+1, rel(a.sent), rel(a.ret), rel(a.end()), a.out, a.err, a.cut, a.timedOut, a.canceled)
	}
	for _, e := range cl.retries {
		fmt.Fprintf(&trace, "\n      OnRetry at %v a%d wait %v held %v", rel(e.at), e.e.Attempt, e.e.Wait, e.e.Held)
	}
	for _, e := range cl.giveUps {
		fmt.Fprintf(&trace, "\n      OnGiveUp at %v a%d wait %v held %v stop %v", rel(e.at), e.e.Attempt, e.e.Wait, e.e.Held, e.e.Stop)
	}
	fmt.Fprintf(&trace, "\n      returned at %v", rel(cl.end))
	if cl.resp != nil {
		fmt.Fprintf(&trace, " %d", cl.resp.StatusCode)
	} else {
		fmt.Fprintf(&trace, " err %v", cl.err)
	}
	fail := func(format string, args ...any) {
		bad(format+"\n      "+trace.String(), args...)
	}

	// Attempts.
	if max := 1 + pol.retries(); n > max {
		fail("%d attempts, at most %d allowed", n, max)
	}
	if n == 0 {
		fail("no attempt sent")
		return
	}

	for k, a := range cl.atts {
		if !cl.deadline.IsZero() && !a.sent.Before(cl.deadline) {
			fail("attempt %d sent at %v, at or after the deadline %v", k+1, rel(a.sent), rel(cl.deadline))
		}
		if c.maxElapsed > 0 && !a.sent.Before(cl.start.Add(c.maxElapsed)) {
			fail("attempt %d sent at %v, at or after MaxElapsed's end %v", k+1, rel(a.sent), rel(cl.start.Add(c.maxElapsed)))
		}
	}
	if !cl.deadline.IsZero() && cl.end.After(cl.deadline) {
		fail("returned at %v, after the deadline %v", rel(cl.end), rel(cl.deadline))
	}

	// Retry-After.
	maxRA := tr.maxRetryAfter()
	for k, a := range cl.atts {
		if a.resp == nil || a.out.ra <= 0 || c.maxRA < 0 || !propRetryable(a) {
			continue
		}
		ra := time.Duration(a.out.ra) * time.Second
		if ra > maxRA {
			if k+1 < n {
				fail("attempt %d sent after a Retry-After of %v, above MaxRetryAfter %v", k+2, ra, maxRA)
			}
			continue
		}
		if k+1 < n && cl.atts[k+1].sent.Before(a.ret.Add(ra)) {
			fail("attempt %d sent at %v, before the Retry-After %v told at %v ends", k+2, rel(cl.atts[k+1].sent), ra, rel(a.ret))
		}
	}

	// Events.
	if len(cl.retries) != n-1 {
		fail("%d OnRetry for %d attempts", len(cl.retries), n)
	}
	for j, e := range cl.retries {
		if j+1 >= n {
			break
		}
		prev, next := cl.atts[j], cl.atts[j+1]
		if e.e.Attempt != j+1 {
			fail("OnRetry %d names attempt %d", j+1, e.e.Attempt)
		}
		if !e.at.Equal(next.sent) {
			fail("OnRetry for attempt %d at %v, the retry sent at %v", j+1, rel(e.at), rel(next.sent))
		}
		if want := next.sent.Sub(prev.end()); e.e.Wait != want {
			fail("OnRetry for attempt %d: Wait %v, but %v passed from its end at %v to the retry", j+1, e.e.Wait, want, rel(prev.end()))
		}
		if e.e.Held < 0 || e.e.Held > e.e.Wait {
			fail("OnRetry for attempt %d: Held %v of Wait %v", j+1, e.e.Held, e.e.Wait)
		}
		if !propRetryable(prev) || prev.cut {
			fail("attempt %d retried after an outcome not retryable", j+1)
		}
	}
	if len(cl.giveUps) > 1 {
		fail("%d OnGiveUp", len(cl.giveUps))
	}

	// The outcome.
	if !cl.canceled.IsZero() {
		propCheckCanceled(cl, fail)
		return
	}
	last := cl.atts[n-1]
	ref := last // the attempt whose outcome the call returns
	if last.cut && n > 1 {
		ref = cl.atts[n-2]
	}
	final := !last.cut && !propRetryable(last)
	if (cl.resp == nil) == (cl.err == nil) {
		fail("response %v and error %v", cl.resp != nil, cl.err)
		return
	}
	var herr *Error
	if cl.err != nil && !errors.As(cl.err, &herr) {
		fail("error %v (%T) is not an *Error", cl.err, cl.err)
	}
	switch {
	case final && len(cl.giveUps) != 0:
		fail("OnGiveUp for a final outcome")
	case !final && !(last.cut && n == 1) && len(cl.giveUps) != 1:
		fail("%d OnGiveUp for a retryable outcome not retried (or a retry cut)", len(cl.giveUps))
	}
	if len(cl.giveUps) == 1 {
		g := cl.giveUps[0].e
		if herr != nil && g.Stop != herr.Reason {
			fail("OnGiveUp's Stop %v, the error's Reason %v", g.Stop, herr.Reason)
		}
		if g.Attempt != n {
			fail("OnGiveUp names attempt %d of %d", g.Attempt, n)
		}
		// StopHostGate says storm control left the request fewer
		// attempts; StopExhausted that it sent them all.
		if max := 1 + pol.retries(); g.Stop == StopHostGate && n >= max {
			fail("StopHostGate after all %d attempts", n)
		} else if g.Stop == StopExhausted && n < max {
			fail("StopExhausted after %d of %d attempts", n, max)
		}
	}
	if last.cut && n == 1 {
		if herr == nil || herr.Reason != StopDeadline || !errors.Is(cl.err, context.DeadlineExceeded) {
			fail("first attempt cut by the deadline returned %v, %v", cl.resp, cl.err)
		}
	} else if ref.resp != nil {
		switch {
		case cl.resp != nil && cl.resp != ref.resp:
			fail("returned a response other than attempt %d's", slicesIndex(cl.atts, ref)+1)
		case cl.resp != nil && (cl.gotErr != nil || !bytes.Equal(cl.got, ref.body.data)):
			fail("returned body %d bytes (%v), want %d", len(cl.got), cl.gotErr, len(ref.body.data))
		case cl.err != nil && final:
			fail("a final response returned as an error %v", cl.err)
		case cl.err != nil && !errors.Is(cl.err, errLastNotKept):
			fail("a response's outcome returned as an error that names no status not kept: %v", cl.err)
		case cl.err != nil && ref.body.eof && ref.body.off == len(ref.body.data) && len(ref.body.data) <= drainLimit:
			fail("a response drained whole (%d bytes) returned as an error: %v", len(ref.body.data), cl.err)
		}
	} else {
		switch {
		case cl.err == nil:
			fail("returned a response after a last transport error")
		case !errors.Is(cl.err, ref.err):
			fail("error %v does not wrap the last attempt's %v", cl.err, ref.err)
		}
	}
	if herr != nil && herr.Attempts != n {
		fail("Error.Attempts %d, %d sent", herr.Attempts, n)
	}
	if herr != nil && (cl.deadline.IsZero() || cl.end.Before(cl.deadline)) && errors.Is(cl.err, context.DeadlineExceeded) && !last.timedOut {
		fail("returned before the deadline came, an error that matches context.DeadlineExceeded: %v", cl.err)
	}
	if last.cut && n > 1 && herr != nil && !errors.Is(cl.err, context.DeadlineExceeded) {
		fail("retry cut by the deadline: the error %v does not wrap the deadline's", cl.err)
	}

	propCheckClosedOnce(cl, fail) // the returned one by the test
}

// propCheckCanceled checks a call the caller canceled before it returned:
// it returns at once, with an *Error wrapping context.Canceled
// (StopCanceled); OnGiveUp comes with StopCanceled unless the cancel cut
// an attempt, which is a final outcome. Every response is closed, the
// retries before the cancel announced as any.
func propCheckCanceled(cl *propCall, fail func(string, ...any)) {
	n := len(cl.atts)
	last := cl.atts[n-1]
	if !cl.end.Equal(cl.canceled) {
		fail("canceled %v into the call, returned %v into it", cl.canceled.Sub(cl.start), cl.end.Sub(cl.start))
	}
	var herr *Error
	if cl.resp != nil || !errors.As(cl.err, &herr) || herr.Reason != StopCanceled || !errors.Is(cl.err, context.Canceled) {
		fail("canceled: returned %v, %v", cl.resp != nil, cl.err)
	}
	if herr != nil && herr.Attempts != n {
		fail("Error.Attempts %d, %d sent", herr.Attempts, n)
	}
	if len(cl.retries) != n-1 {
		fail("%d OnRetry for %d attempts", len(cl.retries), n)
	}
	switch {
	case last.canceled && len(cl.giveUps) != 0:
		fail("OnGiveUp for an attempt the cancel cut")
	case !last.canceled && (len(cl.giveUps) != 1 || cl.giveUps[0].e.Stop != StopCanceled):
		fail("a cancel in a wait: OnGiveUp %d times, want once with StopCanceled", len(cl.giveUps))
	}
	propCheckClosedOnce(cl, fail)
}

// propCheckClosedOnce checks that every response of the call was closed
// exactly once.
func propCheckClosedOnce(cl *propCall, fail func(string, ...any)) {
	for k, a := range cl.atts {
		if a.body == nil {
			continue
		}
		a.body.mu.Lock()
		closes := a.body.closes
		a.body.mu.Unlock()
		if closes != 1 {
			fail("attempt %d's response closed %d times", k+1, closes)
		}
	}
}

func slicesIndex(s []*propAtt, a *propAtt) int {
	for i, x := range s {
		if x == a {
			return i
		}
	}
	return -1
}
