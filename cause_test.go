package httpretry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

// errShutdownCause is the cause a caller cancels its calls with.
var errShutdownCause = errors.New("shutting down")

// TestCancelCauseReachesTheCallerWhereverTheCancelLands (a review's find): a caller that
// ends its context with a cause (context.WithCancelCause,
// WithTimeoutCause) finds that cause in the error net/http returns, and
// through httpretry it found it only when the cancel landed during an
// attempt (Base returns it): before the call, during the body's read
// ahead, during a backoff wait, or when a deadline with a cause cut a
// retry after a transport error, the error wrapped ctx.Err() alone. The
// same cancel gave errors.Is(err, cause) true or false by its timing.
func TestCancelCauseReachesTheCallerWhereverTheCancelLands(t *testing.T) {
	// What net/http does: the cause, as it is.
	t.Run("net/http", func(t *testing.T) {
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(errShutdownCause)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:1/", nil)
		base := &http.Transport{}
		defer base.CloseIdleConnections()
		if _, err := base.RoundTrip(req); !errors.Is(err, errShutdownCause) {
			t.Fatalf("net/http: err %v, want the cause", err)
		}
	})
	unavailable := func(r *http.Request) (*http.Response, error) {
		if r.Body != nil {
			io.Copy(io.Discard, r.Body)
			r.Body.Close()
		}
		return &http.Response{StatusCode: http.StatusServiceUnavailable, Header: http.Header{},
			Body: io.NopCloser(strings.NewReader("busy")), Request: r}, nil
	}
	slow := Policy{BaseDelay: time.Second, Jitter: JitterNone}
	for _, tc := range []struct {
		name string
		// run makes one call, canceling it with errShutdownCause (or a
		// deadline with that cause) at its point, and returns its error.
		run func(t *testing.T) error
		// canceled: the error must match context.Canceled too (a cancel),
		// or context.DeadlineExceeded (a deadline).
		canceled bool
	}{
		{"before the call", func(t *testing.T) error {
			ctx, cancel := context.WithCancelCause(context.Background())
			cancel(errShutdownCause)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPut, "http://h.invalid/", strings.NewReader("x"))
			_, err := (&Transport{Base: roundTripFunc(unavailable)}).RoundTrip(req)
			return err
		}, true},
		{"during the read ahead", func(t *testing.T) error {
			ctx, cancel := context.WithCancelCause(context.Background())
			pr, pw := io.Pipe()
			go func() {
				pw.Write([]byte("part of the body"))
				time.Sleep(time.Second) // virtual: the body stalls, then the caller gives up
				cancel(errShutdownCause)
			}()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPut, "http://h.invalid/", pr)
			_, err := (&Transport{Base: roundTripFunc(unavailable)}).RoundTrip(req)
			return err
		}, true},
		{"during a wait", func(t *testing.T) error {
			ctx, cancel := context.WithCancelCause(context.Background())
			go func() {
				time.Sleep(500 * time.Millisecond) // virtual: within the one-second wait
				cancel(errShutdownCause)
			}()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://h.invalid/", nil)
			_, err := (&Transport{Base: roundTripFunc(unavailable), Policy: slow}).RoundTrip(req)
			return err
		}, true},
		{"during an attempt", func(t *testing.T) error { // the one place it was kept: the control
			ctx, cancel := context.WithCancelCause(context.Background())
			base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
				cancel(errShutdownCause)
				<-r.Context().Done()
				return nil, context.Cause(r.Context()) // as net/http returns it
			})
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://h.invalid/", nil)
			_, err := (&Transport{Base: base}).RoundTrip(req)
			return err
		}, true},
		{"during an attempt of a Base that returns ctx.Err()", func(t *testing.T) error {
			ctx, cancel := context.WithCancelCause(context.Background())
			base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
				cancel(errShutdownCause)
				<-r.Context().Done()
				return nil, r.Context().Err() // as many a custom Base does
			})
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://h.invalid/", nil)
			_, err := (&Transport{Base: base}).RoundTrip(req)
			return err
		}, true},
		{"a deadline with a cause cuts a retry", func(t *testing.T) error {
			ctx, cancel := context.WithTimeoutCause(context.Background(), 1500*time.Millisecond, errShutdownCause)
			defer cancel()
			calls := 0
			base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
				if calls++; calls == 1 {
					return nil, fmt.Errorf("read: %w", syscall.ECONNRESET)
				}
				<-r.Context().Done()
				return nil, context.Cause(r.Context())
			})
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://h.invalid/", nil)
			_, err := (&Transport{Base: base, Policy: slow}).RoundTrip(req)
			if !errors.Is(err, syscall.ECONNRESET) {
				t.Errorf("err %v does not wrap the last attempt's error", err)
			}
			return err
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				err := tc.run(t)
				var e *Error
				if !errors.As(err, &e) {
					t.Fatalf("err %v, want an *Error", err)
				}
				if !errors.Is(err, errShutdownCause) {
					t.Errorf("err %v (reason %v): errors.Is(err, cause) is false; net/http returns the cause", err, e.Reason)
				}
				if tc.canceled && !errors.Is(err, context.Canceled) {
					t.Errorf("err %v no longer matches context.Canceled", err)
				}
				if !tc.canceled && !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("err %v no longer matches context.DeadlineExceeded", err)
				}
			})
		})
	}
}

// TestDeadlineCauseDoesNotDependOnTimerOrder (a review's find): a
// deadline with a cause (WithTimeoutCause) gives that cause in the error
// wherever the cancel lands. An attempt that fails as the deadline
// comes is cut by endedBy's clock check, which may run before the
// context's own timer has fired: context.Cause is then still nil, and the
// error wraps context.DeadlineExceeded without the cause. In virtual
// time the two wake-ups are ordered at random: about half the calls
// lost the cause.
func TestDeadlineCauseDoesNotDependOnTimerOrder(t *testing.T) {
	cause := errors.New("the caller's own deadline")
	missed := 0
	var first error
	for range 64 {
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithTimeoutCause(context.Background(), time.Second, cause)
			defer cancel()
			dl, _ := ctx.Deadline()
			base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
				time.Sleep(time.Until(dl)) // virtual: the connection dies as the deadline comes
				return nil, fmt.Errorf("read: %w", syscall.ECONNRESET)
			})
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://h.test/", nil)
			_, err := (&Transport{Base: base}).RoundTrip(req)
			var e *Error
			if !errors.As(err, &e) || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("err %v: want an *Error wrapping the reset and the deadline", err)
			}
			if !errors.Is(err, cause) {
				missed++
				first = err
			}
		})
	}
	if missed > 0 {
		t.Errorf("%d of 64 calls lost the deadline's cause, e.g. %v", missed, first)
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

// neverDoneDeadline is a context whose deadline has passed and whose Done
// channel never closes: a context type of its own that forgot its timer.
type neverDoneDeadline struct {
	noDoneDeadline
	done chan struct{}
}

func (c neverDoneDeadline) Done() <-chan struct{} { return c.done }

// TestEndedByWaitsForADueTimerOnlyAMoment: a context past its deadline
// whose Done never closes is taken as ended after endedBy's short wait
// for its timer (timerDueWait), without a cause to wrap: the error says
// the deadline, and comes that moment late, not never.
func TestEndedByWaitsForADueTimerOnlyAMoment(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := neverDoneDeadline{noDoneDeadline{context.Background(), time.Now().Add(-time.Second)}, make(chan struct{})}
		start := time.Now()
		if err := endedBy(ctx); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != timerDueWait {
			t.Errorf("endedBy: %v after %v; want the deadline after %v", err, time.Since(start), timerDueWait)
		}
	})
}
