package httpretry

import (
	"context"
	"fmt"
	"io"
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

// loneClient is a client whose calls run one at a time, with its
// settings and what the host does.
type loneClient struct {
	pol        Policy
	maxElapsed time.Duration
	attemptTO  time.Duration
	maxRA      time.Duration
	deadline   time.Duration
	calls      int
	seed       uint64
	script     []loneOutcome
}

// loneOutcome is what the host does with one attempt.
type loneOutcome struct {
	code    int // 0: reset
	lat     time.Duration
	ra      string
	bodyLat time.Duration // the error body arrives after this
	bodyLen int
}

// run makes c's calls on synctest's clock and logs every attempt, event
// and outcome with its time.
func (c loneClient) run(t *testing.T, storm StormControl) (log []string) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		i := 0
		var wg sync.WaitGroup
		defer wg.Wait()
		tr := &Transport{Policy: c.pol, Storm: storm, Random: seeded(c.seed), MaxElapsed: c.maxElapsed, AttemptTimeout: c.attemptTO, MaxRetryAfter: c.maxRA,
			OnRetry: func(e RetryEvent) {
				log = append(log, fmt.Sprintf("retry a%d %v wait %v held %v", e.Attempt, time.Since(start), e.Wait, e.Held))
			},
			OnGiveUp: func(e RetryEvent) {
				log = append(log, fmt.Sprintf("giveup a%d %v wait %v held %v stop %v", e.Attempt, time.Since(start), e.Wait, e.Held, e.Stop))
			},
			Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
				s := c.script[min(i, len(c.script)-1)]
				i++
				log = append(log, fmt.Sprintf("send %v", time.Since(start)))
				tm := time.NewTimer(s.lat)
				defer tm.Stop()
				select {
				case <-r.Context().Done():
					return nil, r.Context().Err()
				case <-tm.C:
				}
				if s.code == 0 {
					return nil, syscall.ECONNRESET
				}
				resp := &http.Response{StatusCode: s.code, Header: http.Header{}, ContentLength: -1}
				if s.ra != "" {
					ra := s.ra
					if strings.HasPrefix(ra, "+") { // a date, this many seconds ahead
						secs, _ := strconv.Atoi(ra[1:])
						ra = time.Now().Add(time.Duration(secs) * time.Second).UTC().Format(http.TimeFormat)
						resp.Header.Set("Date", time.Now().UTC().Format(http.TimeFormat))
					}
					resp.Header.Set("Retry-After", ra)
				}
				pr, pw := io.Pipe()
				wg.Go(func() {
					time.Sleep(s.bodyLat) // virtual
					pw.Write(make([]byte, s.bodyLen))
					pw.Close()
				})
				resp.Body = pr
				return resp, nil
			})}
		for range c.calls {
			ctx, cancel := context.Background(), context.CancelFunc(func() {})
			if c.deadline > 0 {
				ctx, cancel = context.WithTimeout(ctx, c.deadline)
			}
			resp, err := tr.RoundTrip(httptest.NewRequest("GET", "http://lone/", nil).WithContext(ctx))
			if err != nil {
				log = append(log, fmt.Sprintf("end %v err %v", time.Since(start), err))
			} else {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				log = append(log, fmt.Sprintf("end %v status %d len %d", time.Since(start), resp.StatusCode, len(b)))
			}
			cancel()
		}
	})
	return log
}

// drawLoneClient draws a client, its settings and its host's script.
func drawLoneClient(r *rand.Rand) loneClient {
	c := loneClient{pol: randomPolicy(r), calls: 1 + r.IntN(4), seed: r.Uint64()}
	if r.IntN(3) == 0 {
		c.maxElapsed = time.Duration(100+r.IntN(4000)) * time.Millisecond
	}
	if r.IntN(3) == 0 {
		c.attemptTO = time.Duration(1+r.IntN(300)) * time.Millisecond
	}
	if r.IntN(3) == 0 {
		c.maxRA = time.Duration(r.IntN(4)) * time.Second
	}
	if r.IntN(3) == 0 {
		c.deadline = time.Duration(50+r.IntN(4000)) * time.Millisecond
	}
	codes := []int{503, 503, 502, 0, 200, 404, 429}
	ras := []string{"", "", "", "0", "1", "2", "+1", "+2"}
	for range 3 + r.IntN(20) {
		s := loneOutcome{code: codes[r.IntN(len(codes))], lat: time.Duration(r.IntN(3)*r.IntN(200)) * time.Millisecond, ra: ras[r.IntN(len(ras))]}
		if r.IntN(4) == 0 {
			s.bodyLat = time.Duration(r.IntN(200)) * time.Millisecond
			if s.bodyLat == drainTimeout { // two timers at one instant: which fires first is not storm control's doing
				s.bodyLat++
			}
			s.bodyLen = r.IntN(100 << 10)
		}
		c.script = append(c.script, s)
	}
	return c
}

// TestLoneClientSeesTheSameWithStormControl extends rule 1's property
// (TestLoneRequestWaitsExactlyAsWithoutStormControl) to what an attempt
// and its settings can add: attempts that take time, error bodies that
// arrive late or are too long to keep, AttemptTimeout, MaxElapsed,
// MaxRetryAfter, Retry-After as seconds, zero and dates, and deadlines. A
// client whose calls run one at a time sees every attempt, event and
// outcome at the same moment with storm control on as off.
func TestLoneClientSeesTheSameWithStormControl(t *testing.T) {
	t.Parallel() // virtual time only: runs beside the other simulations
	r := rand.New(rand.NewPCG(3, 33))
	for trial := range propertySeeds(300) {
		c := drawLoneClient(r)
		on, off := c.run(t, StormControl{}), c.run(t, stormOff)
		if fmt.Sprint(on) != fmt.Sprint(off) {
			t.Fatalf("trial %d %+v:\non  %s\noff %s", trial, c, strings.Join(on, "\n    "), strings.Join(off, "\n    "))
		}
	}
}
