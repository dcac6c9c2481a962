package httpretry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

// The hostile-input table: every bad value a caller, a server or a base
// transport can hand the Transport gets a documented result, never a panic,
// a hang, unbounded memory or a lost byte.

// relBody is a request body that counts its closes and, when failAt ≥ 0,
// fails with err once failAt bytes were read.
type relBody struct {
	r      io.Reader
	read   atomic.Int64
	failAt int64
	err    error
	closes atomic.Int32
}

func newRelBody(r io.Reader) *relBody { return &relBody{r: r, failAt: -1} }

func (b *relBody) Read(p []byte) (int, error) {
	if b.failAt >= 0 {
		left := b.failAt - b.read.Load()
		if left <= 0 {
			return 0, b.err
		}
		if int64(len(p)) > left {
			p = p[:left]
		}
	}
	n, err := b.r.Read(p)
	b.read.Add(int64(n))
	return n, err
}

func (b *relBody) Close() error { b.closes.Add(1); return nil }

// relTrackedBody is a response body that records whether it was closed.
type relTrackedBody struct {
	io.Reader
	closed atomic.Bool
}

func (b *relTrackedBody) Close() error { b.closed.Store(true); return nil }

// relResponse builds a response with a tracked body.
func relResponse(status int, body string, hdr ...string) (*http.Response, *relTrackedBody) {
	b := &relTrackedBody{Reader: strings.NewReader(body)}
	h := http.Header{}
	for i := 0; i+1 < len(hdr); i += 2 {
		h.Add(hdr[i], hdr[i+1])
	}
	return &http.Response{StatusCode: status, Header: h, Body: b, ContentLength: int64(len(body))}, b
}

// relPattern is an endless reader whose byte i is i%251, so any lost,
// duplicated or reordered byte shows.
type relPattern struct{ off int64 }

func (p *relPattern) Read(b []byte) (int, error) {
	for i := range b {
		b[i] = byte((p.off + int64(i)) % 251)
	}
	p.off += int64(len(b))
	return len(b), nil
}

// relCheckPattern reports the first offset where b departs from relPattern.
func relCheckPattern(b []byte) int {
	for i, c := range b {
		if c != byte(int64(i)%251) {
			return i
		}
	}
	return -1
}

// relRunFake runs a subtest in a synctest bubble: waits between retries,
// the Policy's and the host gate's, pass on the fake clock.
func relRunFake(t *testing.T, name string, f func(t *testing.T)) {
	t.Run(name, func(t *testing.T) { synctest.Test(t, f) })
}

func relNewRequest(t *testing.T, ctx context.Context, method string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, "http://example.invalid/x", body)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

func TestHostileRetryAfterValues(t *testing.T) {
	now := time.Date(1994, time.November, 6, 8, 49, 7, 0, time.UTC)
	tests := []struct {
		name   string
		value  string
		date   string
		want   time.Duration
		wantOK bool
	}{
		{"empty", "", "", 0, false},
		{"spaces only", "   ", "", 0, false},
		{"negative", "-1", "", 0, false},
		{"exponent", "1e9", "", 0, false},
		{"fraction, a floor as some servers send it", "1.5", "", 1500 * time.Millisecond, true},
		{"fraction without digits", "1.", "", 0, false},
		{"plus sign", "+5", "", 0, false},
		{"hex", "0x10", "", 0, false},
		{"unit", "5s", "", 0, false},
		{"NUL", "\x00", "", 0, false},
		{"garbage", strings.Repeat("z", 10000), "", 0, false},
		{"zero", "0", "", 0, true},
		{"padded", " 5 ", "", 5 * time.Second, true},
		{"leading zeros", "000000000000000000000000000007", "", 7 * time.Second, true},
		{"largest that fits", fmt.Sprint(maxDelaySeconds), "", time.Duration(maxDelaySeconds) * time.Second, true},
		{"one more than fits", fmt.Sprint(maxDelaySeconds + 1), "", math.MaxInt64, true},
		{"overflows int64", "99999999999999999999", "", math.MaxInt64, true},
		{"IMF-fixdate", "Sun, 06 Nov 1994 08:49:37 GMT", "", 30 * time.Second, true},
		{"RFC 850", "Sunday, 06-Nov-94 08:49:37 GMT", "", 30 * time.Second, true},
		{"asctime", "Sun Nov  6 08:49:37 1994", "", 30 * time.Second, true},
		{"date in the past", "Sun, 06 Nov 1994 08:00:00 GMT", "", 0, true},
		{"year 1900", "Mon, 01 Jan 1900 00:00:00 GMT", "", 0, true},
		{"year 3000", "Wed, 01 Jan 3000 00:00:00 GMT", "", math.MaxInt64, true},
		{"date against the response's Date", "Sun, 06 Nov 2044 08:49:47 GMT", "Sun, 06 Nov 2044 08:49:37 GMT", 10 * time.Second, true},
		{"unparsable Date falls back to now", "Sun, 06 Nov 1994 08:49:37 GMT", "yesterday", 30 * time.Second, true},
		{"date with a bad weekday name", "Xyz, 06 Nov 1994 08:49:37 GMT", "", 0, false},
		{"date without zone", "Sun, 06 Nov 1994 08:49:37", "", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			if tt.value != "" {
				h.Set("Retry-After", tt.value)
			}
			if tt.date != "" {
				h.Set("Date", tt.date)
			}
			got, ok := parseRetryAfter(h, now)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("parseRetryAfter(%q, Date %q) = %v, %v; want %v, %v", tt.value, tt.date, got, ok, tt.want, tt.wantOK)
			}
		})
	}
	if got, ok := parseRetryAfter(nil, now); got != 0 || ok {
		t.Errorf("nil header: %v, %v", got, ok)
	}
	h := http.Header{"Retry-After": {"3", "9"}}
	if got, ok := parseRetryAfter(h, now); got != 3*time.Second || !ok {
		t.Errorf("two values: %v, %v; want the first, 3s", got, ok)
	}
}

// TestHostileRetryAfterThroughTransport checks what each kind of value does
// to a retried 503: ignored values leave the backoff alone, values over the
// cap return the response at once.
func TestHostileRetryAfterThroughTransport(t *testing.T) {
	tests := []struct {
		value     string
		attempts  int
		wantWait  time.Duration // of the first retry, when attempts > 1
		wantStop  StopReason
		maxRetryA time.Duration
	}{
		{value: "", attempts: 2, wantWait: time.Millisecond},
		{value: "-1", attempts: 2, wantWait: time.Millisecond},
		{value: "1e9", attempts: 2, wantWait: time.Millisecond},
		{value: "2", attempts: 2, wantWait: 2 * time.Second},
		{value: "99999999999999999999", attempts: 1, wantStop: StopRetryAfter},
		{value: "Wed, 01 Jan 3000 00:00:00 GMT", attempts: 1, wantStop: StopRetryAfter},
		{value: "Mon, 01 Jan 1900 00:00:00 GMT", attempts: 2, wantWait: time.Millisecond},
		{value: "61", attempts: 1, wantStop: StopRetryAfter},
		{value: "3600", attempts: 2, wantWait: time.Millisecond, maxRetryA: -1},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%q", tt.value), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var calls atomic.Int32
				var bodies []*relTrackedBody
				var mu sync.Mutex
				tr := &Transport{
					Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
						if calls.Add(1) > 1 {
							resp, _ := relResponse(200, "ok")
							return resp, nil
						}
						resp, b := relResponse(503, "busy", "Retry-After", tt.value)
						mu.Lock()
						bodies = append(bodies, b)
						mu.Unlock()
						return resp, nil
					}),
					Policy:        Policy{BaseDelay: time.Millisecond, Jitter: JitterNone},
					MaxRetryAfter: tt.maxRetryA,
					Random:        func() float64 { return 0 },
				}
				var waits []time.Duration
				var stops []StopReason
				tr.OnRetry = func(e RetryEvent) { waits = append(waits, e.Wait) }
				tr.OnGiveUp = func(e RetryEvent) { stops = append(stops, e.Stop) }
				resp, err := tr.RoundTrip(relNewRequest(t, context.Background(), "GET", nil))
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if int(calls.Load()) != tt.attempts {
					t.Fatalf("attempts = %d, want %d", calls.Load(), tt.attempts)
				}
				if tt.attempts == 1 {
					if resp.StatusCode != 503 || len(stops) != 1 || stops[0] != tt.wantStop {
						t.Fatalf("status %d, stops %v; want the 503 back with %v", resp.StatusCode, stops, tt.wantStop)
					}
					return
				}
				if resp.StatusCode != 200 || len(waits) != 1 || waits[0] != tt.wantWait {
					t.Fatalf("status %d, waits %v; want 200 after one wait of %v", resp.StatusCode, waits, tt.wantWait)
				}
				if !bodies[0].closed.Load() {
					t.Fatal("the discarded 503's body was not closed")
				}
			})
		})
	}
}

// TestHostileSettings runs out-of-range settings through Delay and through a
// Transport against an always-503 base.
func TestHostileSettings(t *testing.T) {
	big := time.Duration(math.MaxInt64)
	delays := []struct {
		name string
		p    Policy
		n    int
		u    float64
		want time.Duration
	}{
		{"zero policy, first retry, u 0", Policy{}, 1, 0, 0},
		{"zero policy, huge n, u max", Policy{Jitter: JitterNone}, math.MaxInt, 0.5, DefaultMaxDelay},
		{"negative n counts as 1", Policy{Jitter: JitterNone}, -7, 0, DefaultBaseDelay},
		{"min int n", Policy{Jitter: JitterNone}, math.MinInt, 0, DefaultBaseDelay},
		{"negative base means no delay", Policy{BaseDelay: -1, Jitter: JitterNone}, 3, 0.9, 0},
		{"negative cap means the default", Policy{MaxDelay: -1, Jitter: JitterNone}, 40, 0, DefaultMaxDelay},
		{"base above cap is clamped", Policy{BaseDelay: time.Hour, MaxDelay: time.Second, Jitter: JitterNone}, 1, 0, time.Second},
		{"largest durations", Policy{BaseDelay: big, MaxDelay: big, Jitter: JitterNone}, 70, 0, big},
		{"largest durations, full jitter, u near 1", Policy{BaseDelay: big, MaxDelay: big}, 70, math.Nextafter(1, 0), 9223372036854774784}, // just under d: rand[0, d)
		{"u NaN", Policy{BaseDelay: time.Second, MaxDelay: time.Second}, 1, math.NaN(), 0},
		{"u +Inf", Policy{BaseDelay: time.Second, MaxDelay: time.Second, Jitter: JitterEqual}, 1, math.Inf(1), time.Second - 1}, // clamped to just under 1
		{"u -Inf", Policy{BaseDelay: time.Second, MaxDelay: time.Second, Jitter: JitterEqual}, 1, math.Inf(-1), time.Second / 2},
		{"unknown jitter is full", Policy{BaseDelay: time.Second, Jitter: Jitter(99)}, 1, 0.5, time.Second / 2},
		{"negative jitter is full", Policy{BaseDelay: time.Second, Jitter: Jitter(-1)}, 1, 0.5, time.Second / 2},
		{"decorrelated, huge prev", Policy{BaseDelay: time.Second, MaxDelay: time.Minute, Jitter: JitterDecorrelated}, 1, 0.99, time.Minute},
	}
	for _, tt := range delays {
		t.Run(tt.name, func(t *testing.T) {
			prev := big
			if got := tt.p.Delay(tt.n, prev, tt.u); got != tt.want {
				t.Errorf("Delay(%d, %v, %v) = %v, want %v", tt.n, prev, tt.u, got, tt.want)
			}
		})
	}

	transports := []struct {
		name     string
		tr       Transport
		deadline time.Duration // 0: none
		attempts int
		stop     StopReason
	}{
		{"negative MaxRetries", Transport{Policy: Policy{MaxRetries: -5}}, 0, 1, StopExhausted},
		{"NoRetries", Transport{Policy: Policy{MaxRetries: NoRetries}}, 0, 1, StopExhausted},
		{"zero MaxRetries is the default", Transport{Policy: Policy{BaseDelay: -1}}, 0, 1 + DefaultMaxRetries, StopExhausted},
		{"huge MaxRetries, huge delays, deadline", Transport{Policy: Policy{MaxRetries: math.MaxInt, BaseDelay: big, MaxDelay: big, Jitter: JitterNone}}, time.Second, 1, StopDeadline},
		{"huge MaxRetries, growing delays, deadline", Transport{Policy: Policy{MaxRetries: math.MaxInt, BaseDelay: time.Millisecond, MaxDelay: time.Hour, Jitter: JitterNone}}, time.Second, 10, StopDeadline},
		{"huge MaxRetries, MaxElapsed", Transport{Policy: Policy{MaxRetries: math.MaxInt, BaseDelay: time.Millisecond, MaxDelay: time.Hour, Jitter: JitterNone}, MaxElapsed: time.Second}, 0, 10, StopMaxElapsed},
		{"negative MaxElapsed is off", Transport{Policy: Policy{MaxRetries: 3, BaseDelay: time.Hour, Jitter: JitterNone}, MaxElapsed: -1}, 0, 4, StopExhausted},
		{"negative AttemptTimeout is off", Transport{Policy: Policy{MaxRetries: 2}, AttemptTimeout: -time.Second}, 0, 3, StopExhausted},
		{"empty RetryableStatuses retries nothing", Transport{RetryableStatuses: []int{}}, 0, 1, StopNone},
		{"nonsense RetryableStatuses", Transport{RetryableStatuses: []int{-1, 0, 1 << 40}}, 0, 1, StopNone},
	}
	for _, tt := range transports {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var calls atomic.Int32
				tr := tt.tr
				tr.Random = func() float64 { return 0 }
				tr.Base = roundTripFunc(func(r *http.Request) (*http.Response, error) {
					calls.Add(1)
					resp, _ := relResponse(503, "busy")
					return resp, nil
				})
				var stops []StopReason
				tr.OnGiveUp = func(e RetryEvent) { stops = append(stops, e.Stop) }
				ctx := context.Background()
				if tt.deadline > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tt.deadline)
					defer cancel()
				}
				start := time.Now()
				resp, err := tr.RoundTrip(relNewRequest(t, ctx, "GET", nil))
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != 503 {
					t.Errorf("status %d, want the last 503", resp.StatusCode)
				}
				if int(calls.Load()) != tt.attempts {
					t.Errorf("attempts = %d, want %d", calls.Load(), tt.attempts)
				}
				if tt.stop == StopNone {
					if len(stops) != 0 {
						t.Errorf("OnGiveUp called with %v for a non-retryable outcome", stops)
					}
				} else if len(stops) != 1 || stops[0] != tt.stop {
					t.Errorf("stops = %v, want [%v]", stops, tt.stop)
				}
				if tt.deadline > 0 && time.Since(start) > tt.deadline {
					t.Errorf("took %v, past the deadline %v", time.Since(start), tt.deadline)
				}
			})
		})
	}
}

// TestHostileMaxBufferedBodyNegative: nothing is buffered, so a body without
// GetBody goes out once, whole, and its request is not retried.
func TestHostileMaxBufferedBodyNegative(t *testing.T) {
	body := newRelBody(strings.NewReader("payload"))
	var got []string
	tr := &Transport{
		MaxBufferedBody: -1,
		Random:          func() float64 { return 0 },
		Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			b, _ := io.ReadAll(r.Body)
			r.Body.Close()
			got = append(got, string(b))
			resp, _ := relResponse(503, "busy")
			return resp, nil
		}),
	}
	req := relNewRequest(t, context.Background(), "PUT", body)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if len(got) != 1 || got[0] != "payload" {
		t.Fatalf("bodies sent = %q, want one %q", got, "payload")
	}
	if body.closes.Load() != 1 {
		t.Fatalf("caller's body closed %d times, want 1", body.closes.Load())
	}
}

// TestHostileBase covers base RoundTrippers that break their contract.
func TestHostileBase(t *testing.T) {
	t.Run("nil response and nil error", func(t *testing.T) {
		var calls int
		tr := &Transport{Random: func() float64 { return 0 }, Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			calls++
			return nil, nil
		})}
		resp, err := tr.RoundTrip(relNewRequest(t, context.Background(), "GET", nil))
		if resp != nil {
			t.Fatal("got a response")
		}
		var e *Error
		if !errors.As(err, &e) || !errors.Is(err, errNilResponse) || e.Attempts != 1 || e.Reason != StopNotRetryable {
			t.Fatalf("err = %v, want an *Error after 1 attempt wrapping errNilResponse", err)
		}
		if !strings.Contains(err.Error(), "nil response and a nil error") {
			t.Errorf("message %q does not say what is wrong", err)
		}
		if calls != 1 {
			t.Errorf("calls = %d, want 1", calls)
		}
	})
	relRunFake(t, "response and error", func(t *testing.T) {
		var first *relTrackedBody
		var calls int
		tr := &Transport{Random: func() float64 { return 0 }, Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			calls++
			if calls == 1 {
				var resp *http.Response
				resp, first = relResponse(200, "half")
				return resp, fmt.Errorf("read: %w", syscall.ECONNRESET)
			}
			resp, _ := relResponse(200, "ok")
			return resp, nil
		})}
		resp, err := tr.RoundTrip(relNewRequest(t, context.Background(), "GET", nil))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "ok" || calls != 2 {
			t.Fatalf("body %q after %d calls; want ok after 2", b, calls)
		}
		if !first.closed.Load() {
			t.Error("the response that came with an error was not closed")
		}
	})
	t.Run("response and non-retryable error", func(t *testing.T) {
		var first *relTrackedBody
		tr := &Transport{Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			var resp *http.Response
			resp, first = relResponse(200, "x")
			return resp, errors.New("broken")
		})}
		resp, err := tr.RoundTrip(relNewRequest(t, context.Background(), "GET", nil))
		if resp != nil || err == nil || !strings.Contains(err.Error(), "broken") {
			t.Fatalf("resp %v, err %v; want only the error", resp, err)
		}
		if !first.closed.Load() {
			t.Error("the response that came with an error was not closed")
		}
	})
	relRunFake(t, "retried response with nil body and nil header", func(t *testing.T) {
		var calls int
		tr := &Transport{Random: func() float64 { return 0 }, Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			calls++
			if calls == 1 {
				return &http.Response{StatusCode: 503}, nil
			}
			resp, _ := relResponse(200, "ok")
			return resp, nil
		})}
		resp, err := tr.RoundTrip(relNewRequest(t, context.Background(), "GET", nil))
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("resp %v, err %v", resp, err)
		}
		resp.Body.Close()
	})
	t.Run("status zero", func(t *testing.T) {
		tr := &Transport{Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: 0, Body: http.NoBody}, nil
		})}
		resp, err := tr.RoundTrip(relNewRequest(t, context.Background(), "GET", nil))
		if err != nil || resp.StatusCode != 0 {
			t.Fatalf("resp %v, err %v; want the response back as it came", resp, err)
		}
	})
}

// TestHostileRequests covers requests that cannot be sent, or whose body
// misbehaves.
func TestHostileRequests(t *testing.T) {
	noBase := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		panic("Base must not be called")
	})
	t.Run("nil request", func(t *testing.T) {
		tr := &Transport{Base: noBase}
		resp, err := tr.RoundTrip(nil)
		var e *Error
		if resp != nil || !errors.As(err, &e) || e.Reason != StopInvalid || e.Attempts != 0 || !strings.Contains(err.Error(), "nil Request") {
			t.Fatalf("resp %v, err %v", resp, err)
		}
	})
	t.Run("nil URL", func(t *testing.T) {
		body := newRelBody(strings.NewReader("x"))
		req := &http.Request{Method: "POST", Header: http.Header{}, Body: body}
		tr := &Transport{Base: noBase}
		resp, err := tr.RoundTrip(req)
		var e *Error
		if resp != nil || !errors.As(err, &e) || e.Reason != StopInvalid || !strings.Contains(err.Error(), "nil Request.URL") {
			t.Fatalf("resp %v, err %v", resp, err)
		}
		if body.closes.Load() != 1 {
			t.Errorf("body closed %d times, want 1", body.closes.Load())
		}
	})
	t.Run("context already canceled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		body := newRelBody(strings.NewReader("x"))
		tr := &Transport{Base: noBase}
		resp, err := tr.RoundTrip(relNewRequest(t, ctx, "PUT", body))
		var e *Error
		if resp != nil || !errors.As(err, &e) || e.Reason != StopCanceled || !errors.Is(err, context.Canceled) || e.Attempts != 0 {
			t.Fatalf("resp %v, err %v", resp, err)
		}
		if body.closes.Load() != 1 {
			t.Errorf("body closed %d times, want 1", body.closes.Load())
		}
	})
	t.Run("context deadline already passed", func(t *testing.T) {
		ctx, cancel := context.WithDeadline(context.Background(), time.Unix(0, 0))
		defer cancel()
		_, err := (&Transport{Base: noBase}).RoundTrip(relNewRequest(t, ctx, "GET", nil))
		var e *Error
		if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &e) || e.Reason != StopDeadline {
			t.Fatalf("err %v, want DeadlineExceeded with StopDeadline", err)
		}
	})
	t.Run("body read fails midway", func(t *testing.T) {
		readErr := errors.New("disk on fire")
		body := newRelBody(&relPattern{})
		body.failAt, body.err = 3000, readErr
		tr := &Transport{Base: noBase}
		resp, err := tr.RoundTrip(relNewRequest(t, context.Background(), "PUT", body))
		var e *Error
		if resp != nil || !errors.As(err, &e) || e.Reason != StopInvalid || !errors.Is(err, readErr) || !strings.Contains(err.Error(), "reading request body") {
			t.Fatalf("resp %v, err %v", resp, err)
		}
		if body.closes.Load() != 1 {
			t.Errorf("body closed %d times, want 1", body.closes.Load())
		}
	})
	t.Run("body read fails after the buffered prefix", func(t *testing.T) {
		readErr := errors.New("disk on fire")
		body := newRelBody(&relPattern{})
		body.failAt, body.err = 5000, readErr
		var calls int
		var sent []byte
		var baseErr error
		tr := &Transport{MaxBufferedBody: 1000, Random: func() float64 { return 0 }, Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			calls++
			sent, baseErr = io.ReadAll(r.Body)
			r.Body.Close()
			return nil, fmt.Errorf("writing body: %w: %w", baseErr, syscall.ECONNRESET)
		})}
		resp, err := tr.RoundTrip(relNewRequest(t, context.Background(), "PUT", body))
		var e *Error
		if resp != nil || !errors.As(err, &e) || e.Reason != StopBodyTooLarge || !errors.Is(err, readErr) {
			t.Fatalf("resp %v, err %v; want a body-too-large *Error wrapping the read error", resp, err)
		}
		if calls != 1 || len(sent) != 5000 || relCheckPattern(sent) != -1 {
			t.Fatalf("calls %d, sent %d bytes (first bad byte %d); want 1 call with 5000 intact bytes", calls, len(sent), relCheckPattern(sent))
		}
		if body.closes.Load() != 1 {
			t.Errorf("body closed %d times, want 1", body.closes.Load())
		}
	})
	t.Run("endless body: bounded memory, no lost byte", func(t *testing.T) {
		const limit = 64 << 10
		body := newRelBody(&relPattern{})
		var readBeforeBase int64
		var sent []byte
		var calls int
		tr := &Transport{MaxBufferedBody: limit, Random: func() float64 { return 0 }, Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			calls++
			readBeforeBase = body.read.Load()
			sent, _ = io.ReadAll(io.LimitReader(r.Body, 4*limit))
			r.Body.Close()
			resp, _ := relResponse(503, "busy")
			return resp, nil
		})}
		resp, err := tr.RoundTrip(relNewRequest(t, context.Background(), "POST", body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if readBeforeBase > limit+1 {
			t.Errorf("read %d bytes before sending, more than the limit %d + 1", readBeforeBase, limit)
		}
		if calls != 1 || len(sent) != 4*limit || relCheckPattern(sent) != -1 {
			t.Errorf("calls %d, %d bytes sent, first bad byte at %d", calls, len(sent), relCheckPattern(sent))
		}
		if body.closes.Load() != 1 {
			t.Errorf("body closed %d times, want 1", body.closes.Load())
		}
	})
	relRunFake(t, "GetBody fails on rewind", func(t *testing.T) {
		rewindErr := errors.New("gone")
		req := relNewRequest(t, context.Background(), "PUT", strings.NewReader("abc"))
		req.GetBody = func() (io.ReadCloser, error) { return nil, rewindErr }
		var calls int
		tr := &Transport{Random: func() float64 { return 0 }, Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			calls++
			r.Body.Close()
			resp, _ := relResponse(503, "busy")
			return resp, nil
		})}
		var stop StopReason
		tr.OnGiveUp = func(e RetryEvent) { stop = e.Stop }
		resp, err := tr.RoundTrip(req)
		if err != nil || resp == nil || resp.StatusCode != 503 || stop != StopRewind {
			t.Fatalf("resp %v, err %v, stop %v; want the last 503, with StopRewind", resp, err, stop)
		}
		if b, _ := io.ReadAll(resp.Body); string(b) != "busy" {
			t.Errorf("the last response's body %q, want it whole", b)
		}
		if calls != 1 {
			t.Errorf("calls %d, want 1", calls)
		}
	})
	t.Run("canceled during a wait", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var last *relTrackedBody
			tr := &Transport{
				Policy: Policy{BaseDelay: time.Hour, MaxDelay: time.Hour, Jitter: JitterNone},
				Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
					var resp *http.Response
					resp, last = relResponse(503, "busy")
					time.AfterFunc(time.Second, cancel) // a second into the hour's wait
					return resp, nil
				}),
			}
			start := time.Now()
			resp, err := tr.RoundTrip(relNewRequest(t, ctx, "GET", nil))
			var e *Error
			if resp != nil || !errors.As(err, &e) || e.Reason != StopCanceled || !errors.Is(err, context.Canceled) {
				t.Fatalf("resp %v, err %v", resp, err)
			}
			if d := time.Since(start); d != time.Second {
				t.Errorf("returned after %v, want at the cancel, 1s", d)
			}
			if !last.closed.Load() {
				t.Error("the pending response was not closed")
			}
		})
	})
	relRunFake(t, "caller's request is not modified", func(t *testing.T) {
		body := newRelBody(strings.NewReader("abc"))
		req := relNewRequest(t, context.Background(), "PUT", body)
		req.Header.Set("X-A", "1")
		u := *req.URL
		var calls int
		tr := &Transport{Random: func() float64 { return 0 }, AttemptTimeout: time.Hour, Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			calls++
			r.Header.Set("X-Mutated", "yes") // a misbehaving base mutates its own clone
			b, _ := io.ReadAll(r.Body)
			r.Body.Close()
			if string(b) != "abc" {
				return nil, fmt.Errorf("attempt %d body %q", calls, b)
			}
			resp, _ := relResponse(502, "")
			return resp, nil
		})}
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if calls != 1+DefaultMaxRetries {
			t.Errorf("calls %d", calls)
		}
		if req.Header.Get("X-Mutated") != "" || len(req.Header) != 1 || *req.URL != u || req.Body != body {
			t.Errorf("caller's request changed: %v %v", req.Header, req.URL)
		}
		if body.closes.Load() != 1 {
			t.Errorf("body closed %d times, want 1", body.closes.Load())
		}
	})
	t.Run("URL without scheme", func(t *testing.T) {
		tr := &Transport{Base: &http.Transport{}}
		req := &http.Request{Method: "GET", URL: &url.URL{Path: "/x"}, Header: http.Header{}}
		resp, err := tr.RoundTrip(req)
		var e *Error
		if resp != nil || !errors.As(err, &e) || e.Attempts != 1 || e.Reason != StopNotRetryable {
			t.Fatalf("resp %v, err %v; want one attempt and a not-retryable error", resp, err)
		}
	})
	t.Run("huge response body on the returned response is left alone", func(t *testing.T) {
		tr := &Transport{Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: 200, Body: io.NopCloser(io.LimitReader(&relPattern{}, 1<<30)), ContentLength: 1 << 30}, nil
		})}
		resp, err := tr.RoundTrip(relNewRequest(t, context.Background(), "GET", nil))
		if err != nil {
			t.Fatal(err)
		}
		var head [4096]byte
		n, _ := io.ReadFull(resp.Body, head[:])
		resp.Body.Close()
		if n != len(head) || relCheckPattern(head[:]) != -1 {
			t.Fatalf("read %d bytes, first bad at %d", n, relCheckPattern(head[:n]))
		}
	})
}

// TestHostileHugeBufferLimit: MaxBufferedBody at the largest int64 ("buffer
// anything") with bodies of unknown, lying and absurd declared lengths:
// no panic, no allocation of the declared size, every byte replayed.
func TestHostileHugeBufferLimit(t *testing.T) {
	payload := bytes.Repeat([]byte("0123456789"), 300_000) // 3 MB, over the default limit
	for _, tc := range []struct {
		name string
		body []byte
		cl   int64
	}{
		{"unknown length", []byte("hello"), 0},
		{"declared longer than sent", []byte("hello"), 5000},
		{"declared as the largest int64", []byte("hello"), math.MaxInt64},
		{"3 MB of unknown length", payload, 0},
		{"3 MB declared", payload, int64(len(payload))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sent [][]byte
			tr := &Transport{
				MaxBufferedBody: math.MaxInt64,
				Policy:          Policy{MaxRetries: 1, BaseDelay: -1},
				Storm:           StormControl{NoHostGate: true},
				Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
					b, _ := io.ReadAll(r.Body)
					r.Body.Close()
					sent = append(sent, b)
					resp, _ := relResponse(503, "")
					return resp, nil
				}),
			}
			body := newRelBody(bytes.NewReader(tc.body))
			req := relNewRequest(t, context.Background(), "PUT", body)
			req.ContentLength = tc.cl
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			resp, err := tr.RoundTrip(req)
			runtime.ReadMemStats(&m1)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if len(sent) != 2 || !bytes.Equal(sent[0], tc.body) || !bytes.Equal(sent[1], tc.body) {
				t.Fatalf("%d attempts; want 2, each with the %d-byte body", len(sent), len(tc.body))
			}
			if grown := m1.TotalAlloc - m0.TotalAlloc; grown > 256<<20 {
				t.Errorf("allocated %d MB for a %d-byte body", grown>>20, len(tc.body))
			}
			if body.closes.Load() != 1 {
				t.Errorf("body closed %d times, want 1", body.closes.Load())
			}
		})
	}
}

// relCtxBody is a response body that, like net/http's, fails once its
// request's context is done.
type relCtxBody struct {
	ctx  context.Context
	left int
}

func (b *relCtxBody) Read(p []byte) (int, error) {
	if err := b.ctx.Err(); err != nil {
		return 0, err
	}
	if b.left == 0 {
		return 0, io.EOF
	}
	b.left--
	p[0] = 'x'
	return 1, nil
}

func (b *relCtxBody) Close() error { return nil }

// TestHostileResponseAfterAttemptTimeout: a response that comes back after
// the attempt's timeout fired (a base that does not watch its context, or
// headers arriving just as the timer fires) has a body already cut off. It
// counts as an attempt timeout and is retried, never handed to the caller.
func TestHostileResponseAfterAttemptTimeout(t *testing.T) {
	for _, tc := range []struct {
		name  string
		delay time.Duration // of the first attempt's response
		runs  int
	}{
		{"late base", 80 * time.Millisecond, 1},
		{"headers as the timer fires", 50 * time.Millisecond, 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for range tc.runs {
				synctest.Test(t, func(t *testing.T) {
					var calls atomic.Int32
					var reasons []string
					tr := &Transport{
						AttemptTimeout: 50 * time.Millisecond,
						Policy:         Policy{MaxRetries: 1, BaseDelay: -1},
						Storm:          StormControl{NoHostGate: true},
						OnRetry:        func(e RetryEvent) { reasons = append(reasons, e.Reason) },
						Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
							if calls.Add(1) == 1 {
								time.Sleep(tc.delay) // synctest's clock, no real wait; ignores r.Context()
							}
							return &http.Response{StatusCode: 200, Body: &relCtxBody{ctx: r.Context(), left: 3}}, nil
						}),
					}
					resp, err := tr.RoundTrip(relNewRequest(t, context.Background(), "GET", nil))
					if err != nil {
						t.Fatal(err)
					}
					b, rerr := io.ReadAll(resp.Body)
					resp.Body.Close()
					if rerr != nil || string(b) != "xxx" {
						t.Fatalf("body %q, read error %v: a response whose attempt had timed out was returned", b, rerr)
					}
					late := tc.delay > tr.AttemptTimeout // in a tie either may win, never a dead body
					if (late || calls.Load() != 1) && (calls.Load() != 2 || len(reasons) != 1 || reasons[0] != "attempt timeout") {
						t.Fatalf("%d attempts, retry reasons %q; want 2 after an attempt timeout", calls.Load(), reasons)
					}
				})
			}
		})
	}
	t.Run("last attempt late", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			tr := &Transport{
				AttemptTimeout: 50 * time.Millisecond,
				Policy:         Policy{MaxRetries: NoRetries},
				Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
					time.Sleep(80 * time.Millisecond) // synctest's clock, no real wait
					resp, _ := relResponse(200, "late")
					return resp, nil
				}),
			}
			resp, err := tr.RoundTrip(relNewRequest(t, context.Background(), "GET", nil))
			var e *Error
			if resp != nil || !errors.As(err, &e) || e.Attempts != 1 || !errors.Is(err, ErrAttemptTimeout) {
				t.Fatalf("resp %v, err %v; want an *Error wrapping ErrAttemptTimeout", resp, err)
			}
		})
	})
}

// TestHostilePeekBodyHugeN: PeekBody with a size from a hostile place (a
// server's Content-Length, say) allocates for the bytes that arrive, not
// for n, and never panics.
func TestHostilePeekBodyHugeN(t *testing.T) {
	for _, n := range []int{math.MaxInt, 1 << 40, 1 << 30} {
		resp, _ := relResponse(503, `{"error":"try_again"}`)
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		var peek []byte
		var err error
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("PeekBody(resp, %d) panicked: %v", n, r)
				}
			}()
			peek, err = PeekBody(resp, n)
		}()
		runtime.ReadMemStats(&m1)
		if err != nil || string(peek) != `{"error":"try_again"}` {
			t.Fatalf("PeekBody(resp, %d) = %q, %v", n, peek, err)
		}
		if grown := m1.TotalAlloc - m0.TotalAlloc; grown > 1<<20 {
			t.Errorf("PeekBody(resp, %d) allocated %d bytes for a 21-byte body", n, grown)
		}
		if b, _ := io.ReadAll(resp.Body); string(b) != `{"error":"try_again"}` {
			t.Errorf("body after the peek: %q", b)
		}
	}
}

// TestHostileGetBodyReturnsNil: a GetBody that returns neither a body nor
// an error would send a retry without its bytes; it is a rewind failure.
func TestHostileGetBodyReturnsNil(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		req := relNewRequest(t, context.Background(), "PUT", strings.NewReader("abc"))
		req.GetBody = func() (io.ReadCloser, error) { return nil, nil }
		var sent []string
		var stop StopReason
		tr := &Transport{
			OnGiveUp: func(e RetryEvent) { stop = e.Stop },
			Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
				var b []byte
				if r.Body != nil {
					b, _ = io.ReadAll(r.Body)
					r.Body.Close()
				}
				sent = append(sent, string(b))
				return nil, syscall.ECONNRESET
			}),
		}
		_, err := tr.RoundTrip(req)
		var e *Error
		if !errors.As(err, &e) || e.Reason != StopRewind || e.Attempts != 1 || !strings.Contains(err.Error(), "GetBody") ||
			!errors.Is(err, syscall.ECONNRESET) || stop != StopRewind {
			t.Fatalf("err %v, stop %v; want a rewind *Error naming GetBody and the last reset", err, stop)
		}
		if len(sent) != 1 || sent[0] != "abc" {
			t.Fatalf("bodies sent %q; want only the first, whole", sent)
		}
	})
}
