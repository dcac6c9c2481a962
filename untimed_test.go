package httpretry

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// untimedRun is L among others on a host that answers every attempt 503:
// L goes first, while no request of the Transport is retrying, so that
// its first attempt is not timed; B, retrying, follows at 120 ms, and
// fresh single attempts every 50 ms from 130 ms. L's attempts take lTook,
// the others' 100 ms; L has an 850 ms deadline.
type untimedRun struct {
	lTook time.Duration
}

// run runs u with storm control c in a synctest bubble and returns when L
// ended and when its attempts went, from its start.
func (u untimedRun) run(t *testing.T, c StormControl) (end time.Duration, sends []time.Duration) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		var mu sync.Mutex
		tr := &Transport{
			Policy: Policy{MaxRetries: 10, BaseDelay: 200 * time.Millisecond, MaxDelay: 200 * time.Millisecond, Jitter: JitterNone},
			Storm:  c,
			Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
				took := 100 * time.Millisecond
				if r.Header.Get("X-Who") == "L" {
					mu.Lock()
					sends = append(sends, time.Since(t0))
					mu.Unlock()
					took = u.lTook
				}
				time.Sleep(took) // virtual: synctest's clock
				return response(503, ""), nil
			}),
		}
		call := func(ctx context.Context) {
			if resp, err := tr.RoundTrip(httptest.NewRequest("GET", "http://h/", nil).WithContext(ctx)); err == nil {
				resp.Body.Close()
			}
		}
		done := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() { // B
			time.Sleep(120 * time.Millisecond) // virtual
			call(context.Background())
		})
		wg.Go(func() { // fresh single attempts
			time.Sleep(130 * time.Millisecond) // virtual
			for {
				select {
				case <-done:
					return
				default:
				}
				wg.Go(func() { call(WithoutRetries(context.Background())) })
				time.Sleep(50 * time.Millisecond) // virtual
			}
		})
		ctx, cancel := context.WithTimeout(context.Background(), 850*time.Millisecond)
		defer cancel()
		req := httptest.NewRequest("GET", "http://h/", nil).WithContext(ctx)
		req.Header.Set("X-Who", "L")
		if resp, err := tr.RoundTrip(req); err == nil {
			resp.Body.Close()
		}
		end = time.Since(t0)
		close(done)
		wg.Wait()
	})
	return end, sends
}

// TestHeldRequestWhoseFirstAttemptWasNotTimedKeepsToItsDeadline: L,
// held, skipped steps that stood for attempts of no time, its first not
// being timed, so that its steps ran ahead of plain backoff's, and its
// deadline was fitted by the host's average attempt: it took a step for
// one after which plain backoff starts another wait, skipped it, and went
// at the next, ending 100 ms after plain backoff (a review's find). Until
// one of its attempts is timed,
// its attempts and skipped steps are now taken to last as long as the
// host's longest so far.
func TestHeldRequestWhoseFirstAttemptWasNotTimedKeepsToItsDeadline(t *testing.T) {
	u := untimedRun{lTook: 100 * time.Millisecond}
	onEnd, onSends := u.run(t, StormControl{})
	offEnd, offSends := u.run(t, stormOff)
	if onEnd > offEnd {
		t.Errorf("held, L ended at %v after %v; plain backoff at %v after %v", onEnd, onSends, offEnd, offSends)
	}
}
