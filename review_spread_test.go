package httpretry

import (
	"context"
	"errors"
	"io"
	"net/http"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

// TestRetryAfterSpreadPassingTheDeadlineAfterTheDrainIsWaitedUnspread
// (a review's find): a Retry-After whose own wait fits the deadline is waited
// exactly when only its 10% spread would pass it. plan decides that
// before the failed response is drained; wait, after the drain, checks
// the spread wait again and gives up on it, never trying the unspread
// one. Retry-After: 10 with 10.15 s left and an error body that takes
// 80 ms: u 0.9 (spread 10.9 s) is cut to 10 s at plan and retried at
// 10.08 s; u 0.1 (spread 10.1 s) fits at plan, ends at 10.18 s after the
// drain, and returned the 503 at once, StopDeadline, although the
// Retry-After's own wait (to 10.08 s) fits: a smaller spread lost the
// retry a larger one makes.
func TestRetryAfterSpreadPassingTheDeadlineAfterTheDrainIsWaitedUnspread(t *testing.T) {
	for _, u := range []float64{0.9, 0.1} {
		synctest.Test(t, func(t *testing.T) {
			slow := func(r *http.Request) (*http.Response, error) {
				pr, pw := io.Pipe()
				go func() {
					time.Sleep(80 * time.Millisecond) // virtual: the error body is slow
					pw.Write([]byte("busy"))
					pw.Close()
				}()
				return &http.Response{StatusCode: 503, Status: "503 Service Unavailable", Header: http.Header{"Retry-After": {"10"}},
					Body: pr, ContentLength: -1, Request: r}, nil
			}
			base := newScripted(slow, status(200))
			var stops []StopReason
			tr := &Transport{Base: base, Policy: Policy{BaseDelay: time.Millisecond, Jitter: JitterNone},
				Random: func() float64 { return u }, OnGiveUp: func(e RetryEvent) { stops = append(stops, e.Stop) }}
			ctx, cancel := context.WithTimeout(context.Background(), 10150*time.Millisecond)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://h.test/", nil)
			start := time.Now()
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatalf("u %v: %v", u, err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 || base.calls() != 2 {
				t.Errorf("u %v: status %d after %d attempts in %v, stops %v; want the retry's 200 after the Retry-After's own 10 s (the spread cut, as at plan)",
					u, resp.StatusCode, base.calls(), time.Since(start), stops)
			}
		})
	}
}

// TestHeldRetryToldARetryAfterCutsTheSpreadByTheDeadlineItIsFittedTo
// (a review's find): plan decides whether the spread alone passes the limits
// with the drift as it was, then adds this wait's part to the drift and
// fits the wait to the deadline with the new drift (cutShort). A retry
// sent between steps 300 ms before its step, told Retry-After: 10 that
// outlasts the step, has its drift raised by those 300 ms (plain backoff
// is told it at its step, 300 ms later). With 10.6 s left: u 0.9 (spread
// 10.9 s) is cut to 10 s and waited (10.3 s with the drift: it fits);
// u 0.5 (spread 10.5 s) passes the check without the drift, then fails
// cutShort with it (10.8 s): StopDeadline at once, where plain backoff,
// told at its step with 10.3 s left, cuts the spread and retries.
func TestHeldRetryToldARetryAfterCutsTheSpreadByTheDeadlineItIsFittedTo(t *testing.T) {
	for _, u := range []float64{0.9, 0.5} {
		synctest.Test(t, func(t *testing.T) {
			tr := &Transport{Random: func() float64 { return u }}
			st := tr.ownStorm()
			now := time.Now()
			step := now.Add(200 * time.Millisecond) // the step the retry between steps left
			ctx, cancel := context.WithDeadline(context.Background(), now.Add(10600*time.Millisecond))
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://h.test/", nil)
			sent := now.Add(-100 * time.Millisecond) // the retry between steps: 300 ms before its step
			m := st.failed("h.test", nil, failure{first: true, at: sent.Add(-time.Second), sent: sent.Add(-time.Second)})
			m.policy = Policy{MaxRetries: 5, BaseDelay: 100 * time.Millisecond, Jitter: JitterNone}
			m.skipped, m.extra, m.n = 1, 1, 1
			m.left = heldStep{from: step}
			r := &retrier{t: tr, req: req, st: st, m: m, pol: &m.policy, sent: sent, prev: 100 * time.Millisecond}
			resp := response(503, "")
			resp.Header.Set("Retry-After", "10")
			body := requestBody{kind: bodyNone}
			wait, stop := r.plan(&body, resp, nil, 2)
			if stop != StopNone || wait != 10*time.Second {
				t.Errorf("u %v: wait %v, stop %v; want the Retry-After's own 10 s, as plain backoff waits it from its step", u, wait, stop)
			}
			st.end(m, false)
		})
	}
}

// streamLike has the shape of x/net's http2.StreamError, which has no As
// method (see streamShaped, whose Error is fixed).
type streamLike struct {
	StreamID uint32
	Code     uint32
	Cause    error
}

func (e streamLike) Error() string { return "stream error" }

// TestRefusedStreamByShapeIsFoundAnywhereInTheTree (a review's find): the
// h2Stream refactor returns the first error of x/net's StreamError shape
// in the tree, where isRefusedStream looked for a REFUSED_STREAM one
// anywhere (anyInChain's match). A failover Base's tries, joined, the
// first's stream canceled and the second's refused, was retried as
// refused before and is given up now.
func TestRefusedStreamByShapeIsFoundAnywhereInTheTree(t *testing.T) {
	err := errors.Join(streamLike{StreamID: 1, Code: 0x8 /* CANCEL */}, streamLike{StreamID: 3, Code: h2RefusedStream})
	if !isRefusedStream(err) {
		t.Errorf("isRefusedStream(%v) false; before 3160196 it was true", err)
	}
	if retry, reason := classifyError(err); !retry {
		t.Errorf("classifyError: not retried (%q); before 3160196 it was, as http2 stream refused", reason)
	}
	internal := errors.Join(streamLike{StreamID: 1, Code: 0x8}, streamLike{StreamID: 3, Code: h2InternalError, Cause: errors.New(h2FromPeer)})
	if !isPeerInternalReset(internal) {
		t.Errorf("isPeerInternalReset(%v) false: the reset from the peer is in the tree", internal)
	}
}

// noDoneDeadline is a context whose deadline has passed and that can never
// be canceled (Done returns nil): a context type of its own, such as one
// that keeps a deadline for the work it describes.
type noDoneDeadline struct {
	context.Context
	dl time.Time
}

func (c noDoneDeadline) Deadline() (time.Time, bool) { return c.dl, true }

// TestEndedByDoesNotWaitForAContextThatCannotEnd (a review's find): endedBy waits
// up to 10 ms for a due deadline's timer, so that its cause is there to
// wrap. A context whose Done is nil has no timer and no cause: each call
// waited the whole 10 ms for nothing, and a failed attempt calls it twice
// (RoundTrip's check, then cut): the error came 20 ms late.
func TestEndedByDoesNotWaitForAContextThatCannotEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := noDoneDeadline{Context: context.Background(), dl: time.Now().Add(-time.Second)}
		base := roundTripFunc(func(*http.Request) (*http.Response, error) {
			return nil, readErr(syscall.ECONNRESET)
		})
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://h.test/", nil)
		start := time.Now()
		_, err := (&Transport{Base: base}).RoundTrip(req)
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("err %v: want the reset and the deadline", err)
		}
		if took := time.Since(start); took != 0 {
			t.Errorf("the error came after %v; a context that cannot end has no timer to wait for", took)
		}
	})
}
