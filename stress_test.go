package httpretry

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

// A stress test of storm control's concurrency (a review's audit): many
// goroutines over a few hosts through one Transport, a copy of it, and two
// Transports sharing a Budget, with a Base of random outcomes and panics,
// random cancels, deadlines and per-call policies, in a synctest bubble.
// Whenever every goroutine sleeps, no held request may be one that a poll
// would let go (a lost wake-up: 47 of 100 seeds had one before the line's
// wake-ups were mended). Afterwards every storm state must be empty, and
// synctest.Test fails if a goroutine is left blocked.

type stressRand struct {
	mu sync.Mutex
	r  *rand.Rand
}

func (z *stressRand) f() float64  { z.mu.Lock(); defer z.mu.Unlock(); return z.r.Float64() }
func (z *stressRand) n(k int) int { z.mu.Lock(); defer z.mu.Unlock(); return z.r.IntN(k) }
func (z *stressRand) dur(d time.Duration) time.Duration {
	return time.Duration(z.f() * float64(d))
}

type stressPanic struct{ where string }

// TestStormStress: races (under -race), lost wake-ups, leaks of members,
// hosts and goroutines, and StormState drift. HTTPRETRY_STRESS_SEEDS runs
// more seeds (10 by default, as make test runs it under -race; 3,000 ran
// clean), from HTTPRETRY_STRESS_SEED0.
func TestStormStress(t *testing.T) {
	t.Parallel() // virtual time only: runs beside the other simulations
	seeds, _ := strconv.Atoi(os.Getenv("HTTPRETRY_STRESS_SEEDS"))
	first, _ := strconv.ParseUint(os.Getenv("HTTPRETRY_STRESS_SEED0"), 10, 64)
	first = max(first, 1)
	for seed := first; seed < first+uint64(cmp.Or(seeds, 10)); seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { stressRun(t, seed) })
		})
	}
}

func stressRun(t *testing.T, seed uint64) {
	rng := &stressRand{r: rand.New(rand.NewPCG(seed, 42))}
	// Per host, a phase: down (mostly 503/429/reset), flaky, or up.
	hosts := []string{"a.test", "b.test", "c.test"}[:1+rng.n(3)]
	start := time.Now()
	hostState := func(h string, now time.Time) int {
		// Each host flips every 300-1200 ms of virtual time, deterministic in h.
		period := time.Duration(300+100*len(h)+int(h[0])%7*100) * time.Millisecond
		return int(now.Sub(start)/period) % 3 // 0 down, 1 flaky, 2 up
	}
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.Body != nil {
			io.Copy(io.Discard, r.Body)
			r.Body.Close()
		}
		// slow attempts, that honour the context
		if rng.n(6) == 0 {
			d := rng.dur(400 * time.Millisecond)
			select {
			case <-time.After(d):
			case <-r.Context().Done():
				return nil, r.Context().Err()
			}
		} else {
			time.Sleep(rng.dur(3 * time.Millisecond)) // virtual: the whole run is in a synctest bubble
		}
		st := hostState(r.URL.Host, time.Now())
		x := rng.f()
		if x < 0.01 {
			panic(stressPanic{"base"})
		}
		fail := map[int]float64{0: 0.97, 1: 0.5, 2: 0.05}[st]
		if rng.f() >= fail {
			return response(200, "ok"), nil
		}
		switch rng.n(5) {
		case 0:
			resp := response(429, "slow down")
			if rng.n(2) == 0 {
				resp.Header.Set("Retry-After", strconv.Itoa(rng.n(2)+1))
			} else {
				resp.Header.Set("Retry-After", time.Now().Add(time.Duration(rng.n(3))*time.Second).UTC().Format(http.TimeFormat))
				resp.Header.Set("Date", time.Now().UTC().Format(http.TimeFormat))
			}
			return resp, nil
		case 1:
			return nil, fmt.Errorf("read: %w", syscall.ECONNRESET)
		case 2:
			return nil, io.EOF
		case 3:
			resp := response(503, "down")
			if rng.n(4) == 0 {
				resp.Header.Set("Retry-After", "1")
			}
			return resp, nil
		default:
			return response(503, "down"), nil
		}
	})

	mk := func(c StormControl) *Transport {
		tr := &Transport{
			Base:   base,
			Policy: Policy{MaxRetries: 6, BaseDelay: 20 * time.Millisecond, MaxDelay: 500 * time.Millisecond},
			Storm:  c,
			Random: rng.f,
		}
		switch rng.n(3) {
		case 0:
			tr.MaxElapsed = time.Duration(500+rng.n(3000)) * time.Millisecond
		case 1:
			tr.AttemptTimeout = time.Duration(50+rng.n(300)) * time.Millisecond
		}
		tr.OnRetry = func(RetryEvent) {
			if rng.f() < 0.005 {
				panic(stressPanic{"onretry"})
			}
		}
		tr.OnGiveUp = func(RetryEvent) {
			if rng.f() < 0.01 {
				panic(stressPanic{"ongiveup"})
			}
		}
		if rng.n(2) == 0 {
			tr.Classifier = func(req *http.Request, resp *http.Response, err error) (bool, string) {
				if rng.f() < 0.003 {
					panic(stressPanic{"classifier"})
				}
				return DefaultClassifier(req, resp, err)
			}
		}
		return tr
	}
	t1 := mk(StormControl{ReleaseShare: []float64{0, 0.25, 1, 3}[rng.n(4)]})
	// a first call, so that t1's copy starts on t1's state (see ownStorm)
	stressCall(t, rng, t1, "warm.test")
	t2 := *t1 // a copy, made while none of t1's requests runs
	t2.Storm.ReleaseShare = 0.5
	shared := &Budget{Burst: []float64{0, 5, 1, -1}[rng.n(4)]}
	t3 := mk(StormControl{Budget: shared, NoHostGate: true})
	t4 := mk(StormControl{Budget: shared, NoHostGate: rng.n(3) == 0})
	trs := []*Transport{t1, &t2, t3, t4}

	maxHeld := 0
	stopStats := make(chan struct{})
	var statsWG sync.WaitGroup
	statsWG.Go(func() {
		for {
			select {
			case <-stopStats:
				return
			case <-time.After(7 * time.Millisecond):
			}
			for _, tr := range trs {
				s := tr.StormState()
				maxHeld = max(maxHeld, s.Held)
				if s.Retrying < 0 || s.Held < 0 || s.Hosts < 0 || s.Held > s.Retrying {
					t.Errorf("bad StormState %+v", s)
				}
			}
		}
	})

	monDone := make(chan struct{})
	var monWG sync.WaitGroup
	var lost []string
	monWG.Go(func() {
		for {
			synctest.Wait()
			lost = append(lost, lostWakeups(trs)...)
			select {
			case <-monDone:
				return
			default:
			}
			time.Sleep(time.Millisecond) // virtual
		}
	})

	workers := 16 + rng.n(48)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			calls := 3 + rng.n(6)
			for range calls {
				stressCall(t, rng, trs[(w+rng.n(2))%len(trs)], hosts[rng.n(len(hosts))])
				time.Sleep(rng.dur(100 * time.Millisecond)) // virtual
			}
		})
	}
	wg.Wait()
	close(stopStats)
	statsWG.Wait()
	close(monDone)
	monWG.Wait()
	synctest.Wait()
	if len(lost) > 0 {
		var firsts []string // the first of each kind
		seen := map[string]bool{}
		for _, l := range lost {
			_, kind, _ := strings.Cut(l, ": ")
			kind, _, _ = strings.Cut(kind, " (")
			kind, _, _ = strings.Cut(kind, ",")
			if !seen[kind] {
				seen[kind] = true
				firsts = append(firsts, l)
			}
		}
		t.Errorf("%d lost wake-ups seen at quiescence, the first of each kind:\n%s", len(lost), strings.Join(firsts, "\n"))
	}

	for i, tr := range trs {
		if s := tr.StormState(); s.Retrying != 0 || s.Held != 0 || s.Hosts != 0 {
			t.Errorf("transport %d: StormState after all ended: %+v", i, s)
		}
		st := (*stormState)(tr.stormPtr)
		if st.hosts != nil {
			st.hosts.mu.Lock()
			if n := len(st.hosts.snapshot()); n != 0 {
				var b strings.Builder
				for name, h := range st.hosts.snapshot() {
					h.mu.Lock()
					fmt.Fprintf(&b, " %s:%d members", name, len(h.members))
					h.mu.Unlock()
				}
				t.Errorf("transport %d: %d hosts left in the map:%s", i, n, b.String())
			}
			st.hosts.mu.Unlock()
		}
	}
	// the original's state, which the copy used before its first failure
	if st := (*stormState)(t1.stormPtr); st.retrying.Load() != 0 {
		t.Errorf("t1 retrying %d", st.retrying.Load())
	}
	if testing.Verbose() {
		t.Logf("workers %d, max held seen %d", workers, maxHeld)
	}
}

func stressRequest(ctx context.Context, method, url string, body io.Reader) *http.Request {
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		panic(err)
	}
	return req
}

func stressCall(t *testing.T, rng *stressRand, tr *Transport, host string) {
	defer func() {
		if v := recover(); v != nil {
			if _, ok := v.(stressPanic); !ok {
				panic(v)
			}
		}
	}()
	ctx := context.Background()
	var cancel context.CancelFunc = func() {}
	switch rng.n(4) {
	case 0:
		ctx, cancel = context.WithTimeout(ctx, time.Duration(rng.n(3000))*time.Millisecond)
	case 1:
		ctx, cancel = context.WithCancel(ctx)
		c := cancel
		timer := time.AfterFunc(rng.dur(2*time.Second), c)
		defer timer.Stop()
	}
	defer cancel()
	switch rng.n(4) {
	case 0:
		ctx = WithPolicy(ctx, Policy{MaxRetries: rng.n(10) - 1, BaseDelay: time.Duration(rng.n(100)-10) * time.Millisecond,
			MaxDelay: time.Duration(rng.n(1000)) * time.Millisecond, Jitter: Jitter(rng.n(5))})
	case 1:
		ctx = WithoutRetries(ctx)
	}
	var req *http.Request
	url := "http://" + host + []string{"/", "/b"}[rng.n(2)] // two paths, so that requests are held beside a failing path
	switch rng.n(4) {
	case 0:
		fails := rng.n(4) // GetBody fails from its fails-th call, when > 0
		calls := 0
		req = stressRequest(ctx, "PUT", url, strings.NewReader("body"))
		req.GetBody = func() (io.ReadCloser, error) {
			calls++
			if fails > 0 && calls >= fails {
				return nil, errors.New("no body")
			}
			return io.NopCloser(strings.NewReader("body")), nil
		}
	case 1:
		req = stressRequest(ctx, "POST", url, strings.NewReader("body"))
	default:
		req = stressRequest(ctx, "GET", url, nil)
	}
	resp, err := tr.RoundTrip(req)
	if err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// lostWakeups, called while every other goroutine of the bubble is
// durably blocked, reports members that a poll now would let go, or
// credit that a release now would hand out: with all goroutines asleep,
// nobody will look until some timer fires.
func lostWakeups(trs []*Transport) (out []string) {
	now := time.Now()
	for i, tr := range trs {
		p := atomic.LoadPointer(&tr.stormPtr)
		if p == nil {
			continue
		}
		st := (*stormState)(p)
		if st.hosts == nil {
			continue
		}
		st.hosts.mu.Lock()
		for name, h := range st.hosts.snapshot() {
			h.mu.Lock()
			for j, m := range h.members {
				tag := fmt.Sprintf("t%d %s member %d/%d at %v", i, name, j, len(h.members), now.Format("05.000000"))
				if m.released {
					out = append(out, tag+": released, not woken")
				}
				if !m.waiting || m.ownWait {
					if m.waiting && len(h.members) > 1 && h.credit >= 1 && h.mayGoBetween(m, now) {
						out = append(out, tag+fmt.Sprintf(": ownWait, credit %.2f unused (notBefore %v, nextAt %v)", h.credit, m.notBefore.Format("05.000000"), m.nextAt.Format("05.000000")))
					}
					continue
				}
				may := h.mayGoBetween(m, now)
				switch {
				case may && len(h.members) == 1:
					out = append(out, tag+": alone and may go, asleep")
				case may && h.inGrace(m, now):
					out = append(out, tag+": in grace and may go, asleep")
				case may && h.credit >= 1:
					out = append(out, tag+": credit unused")
				}
			}
			if f := h.firstWaiting(now); f != nil && h.probing == nil {
				due := (!h.flowing(now) || h.besideFailingPath(f)) && !now.Before(h.probeAt(f)) || h.momentCame(now, h.pendingMoment())
				if due {
					var b strings.Builder
					for _, m := range h.members {
						fmt.Fprintf(&b, " [waiting %v ownWait %v spare %v nextAt %v took %v]", m.waiting, m.ownWait, m.spare, m.nextAt.Format("05.000000"), m.took.avg)
					}
					out = append(out, fmt.Sprintf("t%d %s at %v: line's probe due (first waiting %d of %d), asleep:%s", i, name, now.Format("05.000000"), slices.Index(h.members, f), len(h.members), b.String()))
				}
			}
			h.mu.Unlock()
		}
		st.hosts.mu.Unlock()
	}
	return out
}
