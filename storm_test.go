package httpretry

import (
	"context"
	"errors"
	"io"
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

// tightBudget allows exactly n retries in its window and no more.
func tightBudget(n int) *Budget {
	return &Budget{Ratio: -1, Reserve: float64(n) / DefaultBudgetWindow.Seconds()}
}

func TestBudgetRefusalReturnsLastResponseUntouched(t *testing.T) {
	base := newScripted(status(503))
	var gaveUp []RetryEvent
	tr := &Transport{Base: base, Policy: noWait, Budget: tightBudget(2),
		OnGiveUp: func(e RetryEvent) { gaveUp = append(gaveUp, e) }}

	resp, err := tr.RoundTrip(httptest.NewRequest("GET", "http://x/", nil))
	require.NoError(t, err)
	assert.Equal(t, 503, resp.StatusCode)
	body, _ := io.ReadAll(resp.Body)
	assert.Equal(t, "body of Service Unavailable", string(body), "the refused response is returned unread")
	assert.Equal(t, 3, base.calls(), "one first attempt and the budget's two retries")
	require.Len(t, gaveUp, 1)
	assert.Equal(t, StopBudget, gaveUp[0].Stop)

	// The budget is spent, but a first attempt is never refused: the next
	// request is sent once and its 503 returned at once.
	resp, err = tr.RoundTrip(httptest.NewRequest("GET", "http://x/", nil))
	require.NoError(t, err)
	assert.Equal(t, 503, resp.StatusCode)
	assert.Equal(t, 4, base.calls())
	assert.Equal(t, StopBudget, gaveUp[1].Stop)
}

func TestBudgetRefusalOfAnErrorIsAnError(t *testing.T) {
	base := newScripted(fail(syscall.ECONNRESET))
	tr := &Transport{Base: base, Policy: noWait, Budget: tightBudget(1)}
	_, err := tr.RoundTrip(httptest.NewRequest("GET", "http://x/", nil))
	var rerr *Error
	require.True(t, errors.As(err, &rerr))
	assert.Equal(t, StopBudget, rerr.Reason)
	assert.Equal(t, 2, rerr.Attempts)
	assert.ErrorIs(t, err, syscall.ECONNRESET)
}

func TestBudgetSharedAcrossTransports(t *testing.T) {
	shared := tightBudget(3)
	base := newScripted(status(503))
	a := &Transport{Base: base, Policy: noWait, Budget: shared}
	b := &Transport{Base: base, Policy: noWait, Budget: shared}
	for _, tr := range []*Transport{a, b, a} {
		resp, err := tr.RoundTrip(httptest.NewRequest("GET", "http://x/", nil))
		require.NoError(t, err)
		resp.Body.Close()
	}
	assert.Equal(t, 3+3, base.calls(), "three first attempts and the three retries of one shared budget")
	assert.Equal(t, int64(3), shared.State(t0).Requests)
}

func TestNoBudgetRetriesToPolicyLimits(t *testing.T) {
	base := newScripted(status(503))
	tr := &Transport{Base: base, Policy: Policy{MaxRetries: 4, BaseDelay: -1}, Budget: tightBudget(1), NoBudget: true}
	resp, err := tr.RoundTrip(httptest.NewRequest("GET", "http://x/", nil))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 5, base.calls())
}

// okBase answers every request with one canned 200, allocating nothing.
type okBase struct{ resp http.Response }

func (b *okBase) RoundTrip(*http.Request) (*http.Response, error) { return &b.resp, nil }

// BenchmarkRoundTripSuccess measures a request that succeeds at once, with
// storm control on (the default) and off, side by side: the success path
// must cost no allocation and take no lock for it.
func BenchmarkRoundTripSuccess(b *testing.B) {
	cases := []struct {
		name string
		tr   *Transport
	}{
		{"bare", nil},
		{"storm-on", &Transport{}},
		{"storm-off", &Transport{NoBudget: true, HostGate: HostGate{Off: true}}},
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
			b.ReportAllocs()
			for b.Loop() {
				if _, err := rt.RoundTrip(req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// outageHost is a base transport, for synctest bubbles, that answers 503
// until the fake clock reaches up, then 200, counting first attempts and
// retries sent while it is down.
type outageHost struct {
	up              time.Time
	firsts, retries atomic.Int64 // while down
	downRetries     atomic.Int64
}

func (h *outageHost) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		r.Body.Close()
	}
	retry := Attempt(r.Context()) > 1
	if retry {
		h.retries.Add(1)
	} else {
		h.firsts.Add(1)
	}
	if time.Now().Before(h.up) {
		if retry {
			h.downRetries.Add(1)
		}
		return response(503, "down"), nil
	}
	return response(200, "ok"), nil
}

// stormPolicy is the storm simulator's policy.
var stormPolicy = Policy{MaxRetries: 8, BaseDelay: 20 * time.Millisecond, MaxDelay: time.Second}

// runOutage sends 100 requests spread over the first second of a
// two-second outage and returns the host and how many succeeded.
func runOutage(t *testing.T, tr *Transport) (*outageHost, int) {
	host := &outageHost{up: time.Now().Add(2 * time.Second)}
	tr.Base = host
	tr.Policy = stormPolicy
	var ok atomic.Int64
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Go(func() {
			time.Sleep(time.Duration(i) * 10 * time.Millisecond)
			resp, err := tr.RoundTrip(httptest.NewRequest("GET", "http://host/", nil))
			if err == nil {
				if resp.StatusCode == 200 {
					ok.Add(1)
				}
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	return host, int(ok.Load())
}

func TestGateHoldsRetriesDuringAnOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		off, _ := runOutage(t, &Transport{NoBudget: true, HostGate: HostGate{Off: true}})
		on, okOn := runOutage(t, &Transport{NoBudget: true})
		t.Logf("retries sent into the outage: %d without the gate, %d with it", off.downRetries.Load(), on.downRetries.Load())
		// Without the gate every request probes on its own; with it, one
		// probe per round, and the rounds are few because the first
		// attempts of the first second stand in for them.
		if on.downRetries.Load() > 15 {
			t.Errorf("%d retries sent into the outage with the gate", on.downRetries.Load())
		}
		if off.downRetries.Load() < 200 {
			t.Errorf("the control sent only %d retries into the outage", off.downRetries.Load())
		}
		// All but the few whose own retries were spent as probes wait for
		// the host and succeed.
		if okOn < 95 {
			t.Errorf("%d of 100 requests succeeded with the gate", okOn)
		}
	})
}

func TestGateReleasedRetriesAreNotAllAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		host := &outageHost{up: time.Now().Add(time.Second)}
		tr := &Transport{Base: host, Policy: stormPolicy, NoBudget: true}
		var wg sync.WaitGroup
		for range 50 {
			wg.Go(func() {
				resp, err := tr.RoundTrip(httptest.NewRequest("GET", "http://host/", nil))
				if err == nil {
					resp.Body.Close()
				}
			})
		}
		time.Sleep(1500 * time.Millisecond)
		synctest.Wait()
		// No first attempts flow after the outage: the held retries are
		// let go one probe at a time, one per half backoff step (10 ms),
		// so after half a second some still wait.
		st := tr.StormState()
		if len(st.Gates) != 1 || st.Gates[0].Held < 5 {
			t.Errorf("state half a second after the outage: %+v", st.Gates)
		}
		// A stream of first attempts clocks them out.
		for range 200 {
			resp, _ := tr.RoundTrip(httptest.NewRequest("GET", "http://host/", nil))
			resp.Body.Close()
			time.Sleep(5 * time.Millisecond)
		}
		wg.Wait()
		if st := tr.StormState(); len(st.Gates) != 0 {
			t.Errorf("the gate of a recovered host was not removed: %+v", st.Gates)
		}
	})
}

func TestGateCancelEndsAHeldWaitAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		host := &outageHost{up: time.Now().Add(time.Hour)}
		tr := &Transport{Base: host, Policy: stormPolicy, NoBudget: true}
		// The first request takes the probe round; the second is held.
		first := make(chan struct{})
		go func() {
			defer close(first)
			tr.RoundTrip(httptest.NewRequest("GET", "http://host/", nil))
		}()
		synctest.Wait()
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() {
			_, err := tr.RoundTrip(httptest.NewRequest("GET", "http://host/", nil).WithContext(ctx))
			done <- err
		}()
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		if st := tr.StormState(); len(st.Gates) != 1 || st.Gates[0].Held == 0 {
			t.Fatalf("nothing held: %+v", st.Gates)
		}
		start := time.Now()
		cancel()
		err := <-done
		if d := time.Since(start); d != 0 {
			t.Errorf("a cancelled held wait took %v to end", d)
		}
		var rerr *Error
		if !errors.As(err, &rerr) || rerr.Reason != StopCanceled || !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want StopCanceled wrapping context.Canceled", err)
		}
		<-first
	})
}

func TestGateHeldWaitStaysWithinDeadlineAndHorizon(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		host := &outageHost{up: time.Now().Add(time.Hour)}
		var gaveUp []StopReason
		var mu sync.Mutex
		tr := &Transport{Base: host, Policy: stormPolicy, NoBudget: true, OnGiveUp: func(e RetryEvent) {
			mu.Lock()
			gaveUp = append(gaveUp, e.Stop)
			mu.Unlock()
		}}
		var wg sync.WaitGroup
		for i := range 20 {
			wg.Go(func() {
				req := httptest.NewRequest("GET", "http://host/", nil)
				limit := retryHorizon(stormPolicy) // 8 s
				if i%2 == 0 {
					ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
					defer cancel()
					req = req.WithContext(ctx)
					limit = 1500 * time.Millisecond
				}
				start := time.Now()
				resp, err := tr.RoundTrip(req)
				if d := time.Since(start); d > limit {
					t.Errorf("request %d took %v, past its limit %v", i, d, limit)
				}
				if err == nil {
					resp.Body.Close()
				} else if rerr := (*Error)(nil); !errors.As(err, &rerr) {
					t.Errorf("request %d: %v", i, err)
				}
			})
		}
		wg.Wait()
		for _, r := range gaveUp {
			switch r {
			case StopHostGate, StopDeadline, StopExhausted:
			default:
				t.Errorf("gave up with %v", r)
			}
		}
	})
}

func TestGateKeepsALoneRequestsOwnSchedule(t *testing.T) {
	for _, tr := range []*Transport{{NoBudget: true, HostGate: HostGate{Off: true}}, {}} {
		synctest.Test(t, func(t *testing.T) {
			tr.Base = newScripted(status(503), status(503), status(503), status(200))
			tr.Policy = Policy{MaxRetries: 5, BaseDelay: 100 * time.Millisecond, Jitter: JitterNone}
			start := time.Now()
			resp, err := tr.RoundTrip(httptest.NewRequest("GET", "http://host/", nil))
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("resp=%v err=%v", resp, err)
			}
			if d := time.Since(start); d != 700*time.Millisecond {
				t.Errorf("gate off=%v: took %v, want 100+200+400 ms", tr.HostGate.Off, d)
			}
		})
	}
}

func TestStormControlUnderRace(t *testing.T) {
	var n atomic.Int64
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if n.Add(1)%3 != 0 {
			return response(503, "busy"), nil
		}
		return response(200, "ok"), nil
	})
	tr := &Transport{Base: base, Policy: Policy{MaxRetries: 8, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond}}
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 50 {
				resp, err := tr.RoundTrip(httptest.NewRequest("GET", "http://host/", nil))
				if err == nil {
					resp.Body.Close()
				}
				_ = tr.StormState()
			}
		})
	}
	wg.Wait()
}

func TestProbeSpread(t *testing.T) {
	cases := []struct {
		retries, n int
		left, want time.Duration
	}{
		{8, 1, 8 * time.Second, 0},           // the first half follows the backoff
		{8, 4, 8 * time.Second, 0},           // five left: still more than half
		{8, 5, 5 * time.Second, time.Second}, // four left: a fifth of what is left each
		{8, 8, 2 * time.Second, time.Second}, // the last: half of what is left
		{8, 9, time.Second, 0},               // none left
		{1, 1, time.Second, 0},               // a single retry follows the backoff
	}
	for _, c := range cases {
		if got := probeSpread(c.retries, c.n, c.left); got != c.want {
			t.Errorf("probeSpread(%d, %d, %v) = %v, want %v", c.retries, c.n, c.left, got, c.want)
		}
	}
}

// TestGateLoneRequestOutlastsAnOutage: a request alone on its Transport,
// whose backoff sums to about 2 s, still outlasts a 3 s outage, because
// its last retries are spread over its 8 s horizon.
func TestGateLoneRequestOutlastsAnOutage(t *testing.T) {
	for _, gate := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			host := &outageHost{up: time.Now().Add(3 * time.Second)}
			tr := &Transport{Base: host, Policy: stormPolicy, NoBudget: true, HostGate: HostGate{Off: !gate},
				Random: func() float64 { return 0.5 }}
			start := time.Now()
			resp, err := tr.RoundTrip(httptest.NewRequest("GET", "http://host/", nil))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			d := time.Since(start)
			if ok := resp.StatusCode == 200; ok != gate {
				t.Errorf("gate %v: status %d after %v", gate, resp.StatusCode, d)
			}
			if d > retryHorizon(stormPolicy) {
				t.Errorf("gate %v: took %v, past the horizon", gate, d)
			}
		})
	}
}
