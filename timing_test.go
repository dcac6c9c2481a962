package httpretry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// clocked wraps a scripted base and records the fake time of each attempt.
type clocked struct {
	*scripted
	start time.Time
	at    []time.Duration
}

func newClocked(steps ...func(*http.Request) (*http.Response, error)) *clocked {
	return &clocked{scripted: newScripted(steps...), start: time.Now()}
}

func (c *clocked) RoundTrip(r *http.Request) (*http.Response, error) {
	c.at = append(c.at, time.Since(c.start))
	return c.scripted.RoundTrip(r)
}

func half() float64 { return 0.5 }

func TestBackoffGrowsBetweenAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := newClocked(status(503), status(503), status(503), status(200))
		var waits []time.Duration
		tr := &Transport{Base: base, Random: half, Policy: Policy{BaseDelay: 100 * time.Millisecond},
			OnRetry: func(e RetryEvent) { waits = append(waits, e.Wait) }}
		resp, err := tr.RoundTrip(httptest.NewRequest("GET", "http://x/", nil))
		require.NoError(t, err)
		assert.Equal(t, 200, resp.StatusCode)
		// full jitter at u = 0.5: half of 100, 200, 400 ms
		assert.Equal(t, []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond}, waits)
		assert.Equal(t, []time.Duration{0, 50 * time.Millisecond, 150 * time.Millisecond, 350 * time.Millisecond}, base.at)
	})
}

func TestRetryAfterIsAFloorWithUpwardSpread(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := newClocked(status(503, "Retry-After", "3"), status(200))
		tr := &Transport{Base: base, Random: half}
		_, err := tr.RoundTrip(httptest.NewRequest("GET", "http://x/", nil))
		require.NoError(t, err)
		// 3 s plus half of the 10% spread; the 100 ms backoff is smaller.
		assert.Equal(t, []time.Duration{0, 3150 * time.Millisecond}, base.at)
	})
}

func TestRetryAfterNeverShortensTheBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := newClocked(status(503, "Retry-After", "1"), status(200))
		tr := &Transport{Base: base, Random: half, Policy: Policy{BaseDelay: 5 * time.Second, Jitter: JitterNone}}
		_, err := tr.RoundTrip(httptest.NewRequest("GET", "http://x/", nil))
		require.NoError(t, err)
		assert.Equal(t, []time.Duration{0, 5 * time.Second}, base.at)
	})
}

func TestRetryAfterDateReadAgainstServerDate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// The server's clock is a day behind ours; its date says "in 2 s".
		server := time.Now().Add(-24 * time.Hour).UTC()
		base := newClocked(status(429,
			"Date", server.Format(http.TimeFormat),
			"Retry-After", server.Add(2*time.Second).Format(http.TimeFormat)), status(200))
		tr := &Transport{Base: base, Random: func() float64 { return 0 }}
		_, err := tr.RoundTrip(httptest.NewRequest("GET", "http://x/", nil))
		require.NoError(t, err)
		require.Len(t, base.at, 2)
		assert.Equal(t, 2*time.Second, base.at[1])
	})
}

func TestRetryAfterAboveCapReturnsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, value := range []string{"3600", "99999999999999999999"} {
			base := newClocked(status(503, "Retry-After", value), status(200))
			var stop StopReason
			tr := &Transport{Base: base, OnGiveUp: func(e RetryEvent) { stop = e.Stop }}
			start := time.Now()
			resp, err := tr.RoundTrip(httptest.NewRequest("GET", "http://x/", nil))
			require.NoError(t, err)
			assert.Equal(t, 503, resp.StatusCode, value)
			assert.Equal(t, time.Duration(0), time.Since(start), "no wait at all")
			assert.Equal(t, StopRetryAfter, stop)
			assert.Equal(t, 1, base.calls())
		}
	})
}

func TestNegativeMaxRetryAfterIgnoresTheHeader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := newClocked(status(503, "Retry-After", "3600"), status(200))
		tr := &Transport{Base: base, Random: half, MaxRetryAfter: -1}
		resp, err := tr.RoundTrip(httptest.NewRequest("GET", "http://x/", nil))
		require.NoError(t, err)
		assert.Equal(t, 200, resp.StatusCode)
		assert.Equal(t, []time.Duration{0, 100 * time.Millisecond}, base.at)
	})
}

func TestGarbageRetryAfterFallsBackToBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := newClocked(status(503, "Retry-After", "soon"), status(200))
		tr := &Transport{Base: base, Random: half}
		_, err := tr.RoundTrip(httptest.NewRequest("GET", "http://x/", nil))
		require.NoError(t, err)
		assert.Equal(t, []time.Duration{0, 100 * time.Millisecond}, base.at)
	})
}

func TestWaitPastDeadlineIsNotStarted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, tt := range []struct {
			name string
			step func(*http.Request) (*http.Response, error)
		}{
			{"backoff past the deadline", status(503)},
			{"Retry-After past the deadline", status(503, "Retry-After", "30")},
		} {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			base := newClocked(tt.step, status(200))
			var stop StopReason
			tr := &Transport{Base: base, Policy: Policy{BaseDelay: 20 * time.Second, MaxDelay: time.Minute, Jitter: JitterNone},
				OnGiveUp: func(e RetryEvent) { stop = e.Stop }}
			req, _ := http.NewRequestWithContext(ctx, "GET", "http://x/", nil)
			start := time.Now()
			resp, err := tr.RoundTrip(req)
			require.NoError(t, err, tt.name)
			assert.Equal(t, 503, resp.StatusCode, tt.name)
			body, _ := io.ReadAll(resp.Body)
			assert.NotEmpty(t, body, "the last response is readable")
			assert.Equal(t, time.Duration(0), time.Since(start), "%s: returned at once, not at the deadline", tt.name)
			assert.Equal(t, StopDeadline, stop, tt.name)
			cancel()
		}
	})
}

func TestWaitWithinDeadlineIsTaken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		base := newClocked(status(503), status(200))
		tr := &Transport{Base: base, Policy: Policy{BaseDelay: 9 * time.Second, Jitter: JitterNone}}
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://x/", nil)
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		assert.Equal(t, 200, resp.StatusCode)
		assert.Equal(t, []time.Duration{0, 9 * time.Second}, base.at)
	})
}

func TestCancelDuringWaitReturnsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		var pending *http.Response
		base := newClocked(func(r *http.Request) (*http.Response, error) {
			pending, _ = status(503)(r)
			return pending, nil
		})
		tr := &Transport{Base: base, Policy: Policy{BaseDelay: 10 * time.Second, Jitter: JitterNone}}
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://x/", nil)
		time.AfterFunc(time.Second, cancel)
		start := time.Now()
		resp, err := tr.RoundTrip(req)
		assert.Nil(t, resp)
		assert.ErrorIs(t, err, context.Canceled)
		var rerr *Error
		require.True(t, errors.As(err, &rerr))
		assert.Equal(t, StopCanceled, rerr.Reason)
		assert.Equal(t, 1, rerr.Attempts)
		assert.Equal(t, time.Second, time.Since(start), "ended when canceled, not after the wait")
		assert.Equal(t, int32(1), closes(pending), "the pending response was closed")
	})
}

func TestMaxElapsedBoundsTheLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := newClocked(status(503))
		var stop StopReason
		tr := &Transport{Base: base, MaxElapsed: time.Second, Policy: Policy{BaseDelay: 400 * time.Millisecond, Jitter: JitterNone},
			OnGiveUp: func(e RetryEvent) { stop = e.Stop }}
		resp, err := tr.RoundTrip(httptest.NewRequest("GET", "http://x/", nil))
		require.NoError(t, err)
		assert.Equal(t, 503, resp.StatusCode)
		// waits 400 ms (ends at 0.4 s), then 800 ms would end at 1.2 s > 1 s
		assert.Equal(t, []time.Duration{0, 400 * time.Millisecond}, base.at)
		assert.Equal(t, StopMaxElapsed, stop)
	})
}

// TestMaxElapsedCountsTheDrain: the wait before a retry is planned, then
// the failed response's body is drained (up to 100 ms) before the wait
// starts. A wait that the drain pushed past MaxElapsed is not started.
// slowBody503 answers 503 at once with a one-byte body that arrives after
// d, through a pipe that, unlike net/http's bodies, ignores the context.
func slowBody503(d time.Duration) func(*http.Request) (*http.Response, error) {
	return func(r *http.Request) (*http.Response, error) {
		pr, pw := io.Pipe()
		go func() {
			time.Sleep(d) // virtual: every caller runs in a synctest bubble
			pw.Write([]byte("x"))
			pw.Close()
		}()
		return &http.Response{StatusCode: 503, Header: http.Header{}, Body: pr, ContentLength: -1, Request: r}, nil
	}
}

func TestLimitsCountTheDrain(t *testing.T) {
	for _, limit := range []StopReason{StopMaxElapsed, StopDeadline} {
		t.Run(limit.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				base := newClocked(slowBody503(90 * time.Millisecond))
				var stop StopReason
				tr := &Transport{Base: base, Policy: Policy{BaseDelay: 250 * time.Millisecond, Jitter: JitterNone},
					OnGiveUp: func(e RetryEvent) { stop = e.Stop }}
				ctx := context.Background()
				if limit == StopMaxElapsed {
					tr.MaxElapsed = 300 * time.Millisecond
				} else {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
					defer cancel()
				}
				start := time.Now()
				resp, err := tr.RoundTrip(httptest.NewRequestWithContext(ctx, "GET", "http://x/", nil))
				require.NoError(t, err)
				b, _ := io.ReadAll(resp.Body)
				assert.Equal(t, "x", string(b), "the 503 comes back, its body kept")
				// 250 ms from 0 ends before 300 ms; from 90 ms, after
				assert.Equal(t, []time.Duration{0}, base.at)
				assert.Equal(t, limit, stop)
				assert.Equal(t, 90*time.Millisecond, time.Since(start))
			})
		})
	}
}

func TestDrainEndsWithTheContext(t *testing.T) {
	for name, storm := range map[string]StormControl{"on": {}, "off": {NoBudget: true, NoHostGate: true}} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tr := &Transport{Base: roundTripFunc(slowBody503(150 * time.Millisecond)), Storm: storm,
					Policy: Policy{BaseDelay: 10 * time.Millisecond, Jitter: JitterNone}}
				ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
				defer cancel()
				start := time.Now()
				_, err := tr.RoundTrip(httptest.NewRequestWithContext(ctx, "GET", "http://x/", nil))
				assert.Equal(t, 50*time.Millisecond, time.Since(start), "the drain outlived the deadline")
				var e *Error
				require.ErrorAs(t, err, &e, "the 503's body was cut off: it cannot come back")
				assert.ErrorIs(t, err, context.DeadlineExceeded)
				time.Sleep(time.Second) // virtual: lets the pipe's writer finish
			})
		})
	}
}

// hang blocks an attempt until its context ends.
func hang(r *http.Request) (*http.Response, error) {
	<-r.Context().Done()
	return nil, r.Context().Err()
}

func TestAttemptTimeoutRetriesASlowAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var okCtx context.Context
		base := newClocked(hang, func(r *http.Request) (*http.Response, error) {
			okCtx = r.Context()
			return status(200)(r)
		})
		var reasons []string
		tr := &Transport{Base: base, AttemptTimeout: 2 * time.Second, Random: half,
			OnRetry: func(e RetryEvent) {
				reasons = append(reasons, e.Reason)
				assert.ErrorIs(t, e.Err, ErrAttemptTimeout)
			}}
		resp, err := tr.RoundTrip(httptest.NewRequest("GET", "http://x/", nil))
		require.NoError(t, err)
		assert.Equal(t, []string{"attempt timeout"}, reasons)
		assert.Equal(t, []time.Duration{0, 2*time.Second + 100*time.Millisecond}, base.at)

		// The timeout covers the wait for headers only: reading the body
		// later is not cut short.
		time.Sleep(time.Minute) // synctest's clock: no real time passes
		assert.NoError(t, okCtx.Err(), "the returned response's context outlives the attempt timeout")
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		assert.Equal(t, "body of OK", string(body))
		require.NoError(t, resp.Body.Close())
		assert.Error(t, okCtx.Err(), "closing the body releases the attempt's context")
	})
}

// upgradedConn is a 101 response's body: read and written both.
type upgradedConn struct {
	strings.Reader
	written strings.Builder
}

func (c *upgradedConn) Write(p []byte) (int, error) { return c.written.Write(p) }
func (c *upgradedConn) Close() error                { return nil }

// TestAttemptTimeoutKeepsTheReturnedResponsesShape: with AttemptTimeout the
// returned body is wrapped so that closing it ends the attempt's context;
// a 101's body stays writable through the wrap, as net/http's upgraded
// connection must, and a response without a body ends the context at once.
func TestAttemptTimeoutKeepsTheReturnedResponsesShape(t *testing.T) {
	for _, clones := range []bool{false, true} { // Base naming its own clone gets a copy of its response back (see copyNaming)
		t.Run(fmt.Sprintf("101 Switching Protocols, Base clones %v", clones), func(t *testing.T) {
			var attemptCtx context.Context
			conn := &upgradedConn{Reader: *strings.NewReader("from server")}
			tr := &Transport{AttemptTimeout: time.Minute, Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
				attemptCtx = r.Context()
				resp := &http.Response{StatusCode: http.StatusSwitchingProtocols, Header: http.Header{}, Body: conn}
				if clones {
					resp.Request = r.Clone(r.Context())
				}
				return resp, nil
			})}
			req := httptest.NewRequest("GET", "http://x/", nil)
			resp, err := tr.RoundTrip(req)
			require.NoError(t, err)
			assert.Equal(t, clones, resp.Request == req, "the response names the caller's request only when it named a clone")
			w, ok := resp.Body.(io.Writer)
			require.True(t, ok, "the upgraded body lost its Write")
			_, err = io.WriteString(w, "to server")
			require.NoError(t, err)
			assert.Equal(t, "to server", conn.written.String())
			assert.NoError(t, attemptCtx.Err(), "the attempt's context ended before the body was closed")
			require.NoError(t, resp.Body.Close())
			assert.Error(t, attemptCtx.Err(), "closing the body releases the attempt's context")
		})
	}
	t.Run("no body", func(t *testing.T) {
		var attemptCtx context.Context
		tr := &Transport{AttemptTimeout: time.Minute, Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			attemptCtx = r.Context()
			return &http.Response{StatusCode: http.StatusNoContent, Header: http.Header{}}, nil
		})}
		resp, err := tr.RoundTrip(httptest.NewRequest("GET", "http://x/", nil))
		require.NoError(t, err)
		assert.Nil(t, resp.Body)
		assert.Error(t, attemptCtx.Err(), "nothing to close: the attempt's context is released at once")
	})
}

// TestAttemptTimeoutStartsAfterOnRetry: OnRetry takes 60 ms (a slow log
// sink), AttemptTimeout is 50 ms, and the server answers in 10 ms. The
// timeout started before OnRetry ran, so every retry reached Base with
// its context already canceled and the request failed with
// ErrAttemptTimeout (a review's find); it now starts as the attempt goes.
func TestAttemptTimeoutStartsAfterOnRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		calls := 0
		tr := &Transport{AttemptTimeout: 50 * time.Millisecond, Random: half,
			Policy:  Policy{MaxRetries: 3, BaseDelay: 10 * time.Millisecond, MaxDelay: 10 * time.Millisecond, Jitter: JitterNone},
			OnRetry: func(RetryEvent) { time.Sleep(60 * time.Millisecond) }, // virtual: synctest's clock
			Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
				calls++
				if err := r.Context().Err(); err != nil {
					return nil, err
				}
				time.Sleep(10 * time.Millisecond) // virtual
				if calls == 1 {
					return response(503, ""), nil
				}
				return response(200, ""), nil
			})}
		resp, err := tr.RoundTrip(httptest.NewRequest("GET", "http://x/", nil))
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, 200, resp.StatusCode)
		assert.Equal(t, 2, calls, "the first retry is answered")
	})
}

func TestAttemptTimeoutOnLastAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := newClocked(hang)
		tr := &Transport{Base: base, AttemptTimeout: time.Second, Policy: Policy{MaxRetries: 1, BaseDelay: -1}}
		start := time.Now()
		_, err := tr.RoundTrip(httptest.NewRequest("GET", "http://x/", nil))
		assert.ErrorIs(t, err, ErrAttemptTimeout)
		assert.ErrorIs(t, err, context.Canceled, "the base's own error is kept")
		var rerr *Error
		require.True(t, errors.As(err, &rerr))
		assert.Equal(t, StopExhausted, rerr.Reason)
		assert.Equal(t, 2*time.Second, time.Since(start))
	})
}

func TestAttemptTimeoutYieldsToTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		base := newClocked(hang)
		tr := &Transport{Base: base, AttemptTimeout: 10 * time.Second}
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://x/", nil)
		start := time.Now()
		_, err := tr.RoundTrip(req)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.NotErrorIs(t, err, ErrAttemptTimeout, "the caller's deadline is not our timeout")
		var rerr *Error
		require.True(t, errors.As(err, &rerr))
		assert.Equal(t, StopDeadline, rerr.Reason)
		assert.Equal(t, 3*time.Second, time.Since(start), "the attempt got the smaller of its timeout and the time left")
		assert.Equal(t, 1, base.calls())
	})
}

func TestDecorrelatedJitterUsesThePreviousWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := newClocked(status(503), status(503), status(503), status(200))
		var waits []time.Duration
		tr := &Transport{Base: base, Random: half, Policy: Policy{BaseDelay: 100 * time.Millisecond, Jitter: JitterDecorrelated},
			OnRetry: func(e RetryEvent) { waits = append(waits, e.Wait) }}
		_, err := tr.RoundTrip(httptest.NewRequest("GET", "http://x/", nil))
		require.NoError(t, err)
		// base + 0.5·(3·prev − base), prev starting at base: 200, 350, 575 ms
		assert.Equal(t, []time.Duration{200 * time.Millisecond, 350 * time.Millisecond, 575 * time.Millisecond}, waits)
	})
}

// TestDecorrelatedJitterGrowsFromARetryAftersWait: the wait a
// Retry-After asked for is the previous wait the next draw grows from, as
// JitterDecorrelated's doc says: the next wait is longer than the one
// drawn from the wait before (200 ms at these values: 350 ms), up to
// MaxDelay (600 ms: the draw from a 1 s Retry-After's wait capped).
func TestDecorrelatedJitterGrowsFromARetryAftersWait(t *testing.T) {
	for _, maxDelay := range []time.Duration{2 * time.Second, 600 * time.Millisecond} {
		synctest.Test(t, func(t *testing.T) {
			base := newClocked(status(503, "Retry-After", "1"), status(503), status(200))
			var waits []time.Duration
			pol := Policy{BaseDelay: 100 * time.Millisecond, MaxDelay: maxDelay, Jitter: JitterDecorrelated}
			tr := &Transport{Base: base, Random: half, Policy: pol,
				OnRetry: func(e RetryEvent) { waits = append(waits, e.Wait) }}
			_, err := tr.RoundTrip(httptest.NewRequest("GET", "http://x/", nil))
			require.NoError(t, err)
			require.Len(t, waits, 2)
			assert.GreaterOrEqual(t, waits[0], time.Second, "the Retry-After is waited")
			assert.Equal(t, pol.Delay(2, waits[0], 0.5), waits[1], "drawn from the Retry-After's wait")
			assert.Greater(t, waits[1], pol.Delay(2, 200*time.Millisecond, 0.5), "longer than drawn from the wait before")
		})
	}
}

// cutByTheDeadline returns a Transport whose base answers 503 with body
// after 50 ms of service time, unless the context ends first, and whose
// retry, 240 ms later, a 300 ms deadline cuts off; OnGiveUp's events go
// to gaveUp.
func cutByTheDeadline(gaveUp *[]RetryEvent, body string) *Transport {
	return &Transport{
		Policy:   Policy{BaseDelay: 240 * time.Millisecond, Jitter: JitterNone},
		OnGiveUp: func(e RetryEvent) { *gaveUp = append(*gaveUp, e) },
		Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			select {
			case <-time.After(50 * time.Millisecond): // virtual: synctest's clock
				return response(503, body), nil
			case <-r.Context().Done():
				return nil, r.Context().Err()
			}
		}),
	}
}

// TestRetryCutByTheDeadlineReturnsTheResponseBeforeIt: a retry sent just
// before the deadline and cut off by it returns the response of the
// attempt before it, not the context's error, and OnGiveUp hears of it:
// the request ends on a retryable outcome, and the cut attempt gets its
// one event.
func TestRetryCutByTheDeadlineReturnsTheResponseBeforeIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var gaveUp []RetryEvent
		tr := cutByTheDeadline(&gaveUp, "busy")
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		resp, err := tr.RoundTrip(httptest.NewRequest("GET", "http://slow/", nil).WithContext(ctx))
		if err != nil {
			t.Fatalf("got %v, want the first attempt's 503", err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 503 || string(body) != "busy" || time.Since(start) != 300*time.Millisecond {
			t.Errorf("got %d %q after %v, want the 503 at the deadline", resp.StatusCode, body, time.Since(start))
		}
		if len(gaveUp) != 1 || gaveUp[0].Stop != StopDeadline || gaveUp[0].Attempt != 2 || gaveUp[0].Response != resp {
			t.Errorf("OnGiveUp %+v; want one event, StopDeadline, for attempt 2, with the response returned", gaveUp)
		}
	})
}

// TestRetryCutByTheDeadlineAfterATransportError: a retry the deadline cuts
// off after a transport error returns an *Error that wraps both that error
// and the deadline, so that errors.Is finds each and os.IsTimeout reports
// the timeout, as a plain http.Transport's deadline error does.
func TestRetryCutByTheDeadlineAfterATransportError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := &Transport{
			Policy: Policy{BaseDelay: 240 * time.Millisecond, Jitter: JitterNone},
			Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
				select {
				case <-time.After(50 * time.Millisecond): // virtual: synctest's clock
					return nil, syscall.ECONNRESET
				case <-r.Context().Done():
					return nil, r.Context().Err()
				}
			}),
		}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		_, err := tr.RoundTrip(httptest.NewRequest("GET", "http://slow/", nil).WithContext(ctx))
		var e *Error
		if !errors.As(err, &e) || e.Reason != StopDeadline || e.Attempts != 2 {
			t.Fatalf("got %v, want an *Error with StopDeadline after 2 attempts", err)
		}
		if !errors.Is(err, syscall.ECONNRESET) || !errors.Is(err, context.DeadlineExceeded) || !os.IsTimeout(&url.Error{Err: err}) {
			t.Errorf("%v: want it to wrap the reset and the deadline, and to be a timeout", err)
		}
	})
}

// reachedDeadline is a context whose deadline has come while its own
// timer has not fired yet, as at a hold that ends at the deadline.
type reachedDeadline struct{ context.Context }

func (reachedDeadline) Deadline() (time.Time, bool) { return time.Now(), true }

// TestOutcomeAtTheDeadlineWrapsItWhateverTheTimersOrder: the outcome a
// hold returns at the deadline wraps the deadline's error whether or not
// the context's timer has fired yet.
func TestOutcomeAtTheDeadlineWrapsItWhateverTheTimersOrder(t *testing.T) {
	ctx := reachedDeadline{context.Background()}
	big := lastOutcome{resp: response(503, "")}
	for _, last := range []lastOutcome{{err: syscall.ECONNRESET, kept: true}, big} {
		_, err := last.outcome(3, StopHostGate, ctx)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%+v: got %v, want it to wrap the deadline", last, err)
		}
	}
	if _, err := big.outcome(3, StopHostGate, context.Background()); errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("without a deadline: got %v, want no deadline wrapped", err)
	}
}

// TestAttemptCutAtTheDeadlineStopsByTheDeadlineWhateverTheTimersOrder:
// http.Client's Timeout cancels an attempt at the deadline, and the
// context's own timer may fire a moment later; the attempt is still one
// the deadline cut (StopDeadline), not an outcome the classifier calls
// final.
func TestAttemptCutAtTheDeadlineStopsByTheDeadlineWhateverTheTimersOrder(t *testing.T) {
	canceled := errors.New("net/http: request canceled")
	tr := &Transport{Base: roundTripFunc(func(*http.Request) (*http.Response, error) { return nil, canceled })}
	_, err := tr.RoundTrip(httptest.NewRequest("GET", "http://x/", nil).WithContext(reachedDeadline{context.Background()}))
	var e *Error
	if !errors.As(err, &e) || e.Reason != StopDeadline || !errors.Is(err, canceled) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("got %v, want StopDeadline with the attempt's error and the deadline", err)
	}
}

// hiddenDeadline hides its deadline from Deadline, as a deadline the
// Transport's check misses by a hair does: the context still ends with
// DeadlineExceeded.
type hiddenDeadline struct{ context.Context }

func (hiddenDeadline) Deadline() (time.Time, bool) { return time.Time{}, false }

// TestWaitEndedByTheDeadlineReturnsTheLastResponse: a wait that the
// deadline interrupts returns the last response, as a wait not started for
// the deadline does, not the context's error.
func TestWaitEndedByTheDeadlineReturnsTheLastResponse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var stops []StopReason
		tr := &Transport{
			Policy:   Policy{BaseDelay: time.Second, Jitter: JitterNone},
			OnGiveUp: func(e RetryEvent) { stops = append(stops, e.Stop) },
			Base:     roundTripFunc(func(*http.Request) (*http.Response, error) { return response(503, "busy"), nil }),
		}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		resp, err := tr.RoundTrip(httptest.NewRequest("GET", "http://x/", nil).WithContext(hiddenDeadline{ctx}))
		if err != nil {
			t.Fatalf("got %v, want the 503", err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 503 || string(body) != "busy" || time.Since(start) != 300*time.Millisecond {
			t.Errorf("got %d %q after %v, want the 503 at the deadline", resp.StatusCode, body, time.Since(start))
		}
		if !slices.Equal(stops, []StopReason{StopDeadline}) {
			t.Errorf("OnGiveUp stops %v, want [%v]", stops, StopDeadline)
		}
	})
}

// TestRetryCutByTheDeadlineAfterAResponseTooLongToKeep: the response before
// a retry that the deadline cuts off cannot be returned when its body was
// over 64 KiB: an *Error names its status and wraps the deadline's error,
// not a bare context error, and OnGiveUp hears of it.
func TestRetryCutByTheDeadlineAfterAResponseTooLongToKeep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var gaveUp []RetryEvent
		tr := cutByTheDeadline(&gaveUp, strings.Repeat("x", 100<<10))
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		resp, err := tr.RoundTrip(httptest.NewRequest("GET", "http://slow/", nil).WithContext(ctx))
		var rerr *Error
		if resp != nil || !errors.As(err, &rerr) || rerr.Reason != StopDeadline || rerr.Attempts != 2 {
			t.Fatalf("got %v, %v; want an *Error, StopDeadline, after 2 attempts", resp, err)
		}
		if !errors.Is(err, errLastNotKept) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "status 503") {
			t.Errorf("error %q: want it to name status 503, the body not kept, and wrap the deadline", err)
		}
		if len(gaveUp) != 1 || gaveUp[0].Stop != StopDeadline || gaveUp[0].Status() != 503 {
			t.Errorf("OnGiveUp %+v; want one event, StopDeadline, naming the 503", gaveUp)
		}
	})
}

// TestMaxElapsedCountsFromRoundTripsCall: "a wait that would end more
// than MaxElapsed after RoundTrip was called is not started". A body
// without GetBody that takes 2 s to arrive is read ahead inside
// RoundTrip; the 2 s wait after its 503 would end at 4 s, past the 3 s
// MaxElapsed, so the 503 comes back at once with StopMaxElapsed. It was
// counted from after the read, and the retry went at 4 s (a review's
// find).
func TestMaxElapsedCountsFromRoundTripsCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := newClocked(status(503), status(200))
		var stop StopReason
		tr := &Transport{Base: base, MaxElapsed: 3 * time.Second,
			Policy:   Policy{MaxRetries: 3, BaseDelay: 2 * time.Second, Jitter: JitterNone},
			OnGiveUp: func(e RetryEvent) { stop = e.Stop }}
		pr, pw := io.Pipe()
		go func() {
			pw.Write([]byte("hello "))
			time.Sleep(2 * time.Second) // virtual: a slow upload
			pw.Write([]byte("world"))
			pw.Close()
		}()
		req := httptest.NewRequest("PUT", "http://x/", nil)
		req.Body, req.ContentLength = pr, -1
		start := time.Now()
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 503 || stop != StopMaxElapsed {
			t.Errorf("after %v: status %d, stop %v, attempts at %v; want the 503 at 2s with StopMaxElapsed (a wait ending at %v is past MaxElapsed)",
				time.Since(start), resp.StatusCode, stop, base.at, 4*time.Second)
		}
	})
}

// TestWaitEndingExactlyAtMaxElapsedIsNotStarted: a wait that would end at
// MaxElapsed is not started, as one ending at the deadline is not; a
// nanosecond more and it is (a review found the docs said "more than").
func TestWaitEndingExactlyAtMaxElapsedIsNotStarted(t *testing.T) {
	for _, tc := range []struct {
		bound    time.Duration
		attempts int
		stop     StopReason
	}{{time.Second, 1, StopMaxElapsed}, {time.Second + 1, 2, StopNone}} {
		synctest.Test(t, func(t *testing.T) {
			base := newClocked(status(503), status(200))
			stop := StopNone
			tr := &Transport{Base: base, MaxElapsed: tc.bound, Policy: Policy{BaseDelay: time.Second, Jitter: JitterNone},
				OnGiveUp: func(e RetryEvent) { stop = e.Stop }}
			resp, err := tr.RoundTrip(httptest.NewRequest("GET", "http://h/", nil))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if base.calls() != tc.attempts || stop != tc.stop {
				t.Errorf("MaxElapsed %v, a 1 s wait: %d attempts, stop %v; want %d, %v", tc.bound, base.calls(), stop, tc.attempts, tc.stop)
			}
		})
	}
}

// TestCancelDuringADrainIsACancel: a caller's cancel that lands while a
// failed response's body is drained, when the wait after it, counted from
// the drain's end, would pass the deadline or MaxElapsed, was reported as
// StopDeadline or StopMaxElapsed (a property test's find).
func TestCancelDuringADrainIsACancel(t *testing.T) {
	for _, limit := range []string{"deadline", "MaxElapsed"} {
		t.Run(limit, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				tr := &Transport{
					Policy: Policy{MaxRetries: 3, BaseDelay: 950 * time.Millisecond, Jitter: JitterNone},
					Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
						pr, pw := io.Pipe()
						go func() { // the 503's body comes after 200 ms: the drain waits
							time.Sleep(200 * time.Millisecond) // virtual
							pw.Write([]byte("busy"))
							pw.Close()
						}()
						return &http.Response{StatusCode: 503, Header: http.Header{}, Body: pr, ContentLength: -1}, nil
					}),
				}
				if limit == "deadline" {
					var cancelTimeout context.CancelFunc
					ctx, cancelTimeout = context.WithTimeout(ctx, time.Second)
					defer cancelTimeout()
				} else {
					tr.MaxElapsed = time.Second
				}
				var stops []StopReason
				tr.OnGiveUp = func(e RetryEvent) { stops = append(stops, e.Stop) }
				time.AfterFunc(50*time.Millisecond, cancel) // the caller gives up during the drain
				start := time.Now()
				resp, err := tr.RoundTrip(httptest.NewRequestWithContext(ctx, "GET", "http://h/", nil))
				if resp != nil {
					resp.Body.Close()
				}
				var e *Error
				if !errors.As(err, &e) || e.Reason != StopCanceled || !errors.Is(err, context.Canceled) {
					t.Errorf("got %v, want an *Error with StopCanceled", err)
				}
				if len(stops) != 1 || stops[0] != StopCanceled || time.Since(start) != 50*time.Millisecond {
					t.Errorf("OnGiveUp's stops %v after %v; want [StopCanceled] at 50ms", stops, time.Since(start))
				}
				time.Sleep(time.Second) // virtual: the body's writer ends
			})
		})
	}
}
