package httpretry

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestRefusedHeldRetryReturnsTheLastResponse: a retry that the host gate
// holds and then refuses (its deadline came first) returns its last outcome
// like any other refusal: the 503 itself, body readable, nil error; only a
// transport error becomes an *Error.
func TestRefusedHeldRetryReturnsTheLastResponse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		host := &outageHost{up: time.Now().Add(time.Hour)}
		var mu sync.Mutex
		stops := map[StopReason]int{}
		tr := &Transport{Base: host, Policy: stormPolicy, NoBudget: true, OnGiveUp: func(e RetryEvent) {
			mu.Lock()
			stops[e.Stop]++
			mu.Unlock()
		}}
		var wg sync.WaitGroup
		var gateResponses int // requests that got their last 503 back
		for range 20 {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
				defer cancel()
				req := httptest.NewRequest("GET", "http://host/", nil).WithContext(ctx)
				resp, err := tr.RoundTrip(req)
				if err != nil {
					var rerr *Error
					if !errors.As(err, &rerr) || rerr.Reason == StopHostGate {
						t.Errorf("a refused held retry of a 503 returned an error: %v", err)
					}
					return
				}
				body, rerr := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 503 || string(body) != "down" || rerr != nil {
					t.Errorf("got %d %q %v, want the last 503 whole", resp.StatusCode, body, rerr)
				}
				mu.Lock()
				gateResponses++
				mu.Unlock()
			})
		}
		wg.Wait()
		if stops[StopHostGate] == 0 {
			t.Fatalf("no retry was refused by the gate (stops %v): the test did not reach its case", stops)
		}
		if gateResponses < stops[StopHostGate] {
			t.Errorf("%d gate refusals but only %d responses returned", stops[StopHostGate], gateResponses)
		}
	})
}

func TestDrainKeeping(t *testing.T) {
	small := response(503, "short")
	kept, ok := drainKeeping(small)
	if !ok || string(kept) != "short" || closes(small) != 1 {
		t.Errorf("small body: %q %v closes=%d", kept, ok, closes(small))
	}
	exact := response(503, string(make([]byte, drainLimit)))
	if kept, ok := drainKeeping(exact); !ok || len(kept) != drainLimit {
		t.Errorf("a body of exactly drainLimit is kept whole: %d %v", len(kept), ok)
	}
	long := response(503, string(make([]byte, drainLimit+1)))
	long.ContentLength = -1
	if _, ok := drainKeeping(long); ok || closes(long) != 1 {
		t.Errorf("a body over drainLimit is not kept, and is closed")
	}
	big := response(503, string(make([]byte, 1<<20)))
	if _, ok := drainKeeping(big); ok || big.Body.(*trackedBody).read.Load() != 0 {
		t.Errorf("a declared-large body is closed unread")
	}
	if _, ok := drainKeeping(&http.Response{}); ok {
		t.Errorf("no body, nothing kept")
	}
}
