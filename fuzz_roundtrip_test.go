package httpretry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

// fuzzRetryAfters are the Retry-After values the round-trip fuzzer draws from.
var fuzzRetryAfters = []string{"0", "1", "-1", "5", "1.5", "120", "99999999999999999999",
	"Sun, 06 Nov 1994 08:49:37 GMT", "Wed, 01 Jan 3000 00:00:00 GMT", " 2 ", "", "abc"}

// FuzzRoundTrip drives a whole RoundTrip against a scripted base
// whose every attempt is drawn from the fuzzer's bytes (statuses with
// bodies of several sizes and Retry-After values, resets, refused dials,
// a response with an error, partial body reads), under virtual time. It
// checks the RoundTripper contract and the Transport's rules: one of
// response and error, every response not returned closed, the caller's
// body closed once, every attempt's body whole, the attempt count within
// MaxRetries, a POST without a key sent again only after a refused dial,
// one OnRetry per retry and at most one OnGiveUp, and a returned body whole.
func FuzzRoundTrip(f *testing.F) {
	f.Add([]byte{1, 0}, uint8(0), uint8(0), int8(3), uint8(0))
	f.Add([]byte{2, 3, 2, 5, 2, 1, 0}, uint8(1), uint8(1), int8(5), uint8(1))
	f.Add([]byte{4, 4, 3, 0}, uint8(2), uint8(2), int8(2), uint8(2))
	f.Add([]byte{5, 6, 5, 6}, uint8(0), uint8(3), int8(-1), uint8(3))
	f.Add([]byte{2, 7, 2, 8, 2, 6}, uint8(3), uint8(4), int8(4), uint8(4))
	f.Fuzz(func(t *testing.T, script []byte, method, bodySel uint8, retries int8, opts uint8) {
		if len(script) == 0 || len(script) > 32 {
			return
		}
		synctest.Test(t, func(t *testing.T) { fuzzRoundTrip(t, script, method, bodySel, retries, opts) })
	})
}

// fuzzRoundTrip is one input of FuzzRoundTrip, in a synctest bubble.
func fuzzRoundTrip(t *testing.T, script []byte, method, bodySel uint8, retries int8, opts uint8) {
	orig := bytes.Repeat([]byte("0123456789abcdef"), int(bodySel%8)*300) // 0 to 33600 bytes
	methods := []string{"GET", "PUT", "POST", "POST+key", "DELETE"}
	m := methods[int(method)%len(methods)]
	var body io.Reader
	switch bodySel / 8 % 4 {
	case 0: // plain reader without GetBody
		body = io.NopCloser(bytes.NewReader(orig))
	case 1: // NewRequest's GetBody
		body = bytes.NewReader(orig)
	case 2: // unknown length, small reads
		body = &relChunkyReader{data: orig, step: 1000}
	case 3: // no body at all
		orig, body = nil, nil
	}
	var caller *relBody
	if body != nil {
		caller = newRelBody(body)
	}
	ctx := context.Background()
	if opts&1 != 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(opts>>4+1)*3*time.Second)
		defer cancel()
	}
	httpMethod, key := m, false
	if m == "POST+key" {
		httpMethod, key = "POST", true
	}
	var req *http.Request
	var err error
	if caller == nil {
		req, err = http.NewRequestWithContext(ctx, httpMethod, "http://example.invalid/x", nil)
	} else if bodySel/8%4 == 1 {
		req, err = http.NewRequestWithContext(ctx, httpMethod, "http://example.invalid/x", body)
		req.Body = caller
	} else {
		req, err = http.NewRequestWithContext(ctx, httpMethod, "http://example.invalid/x", caller)
		if bodySel/8%4 == 0 {
			req.ContentLength = int64(len(orig))
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	if key {
		req.Header.Set("Idempotency-Key", "k")
	}

	type made struct {
		resp *http.Response
		body *relTrackedBody
		text string
	}
	var (
		mu       sync.Mutex
		attempts int
		madeAll  []made
		kinds    []byte
		failures []string
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		failures = append(failures, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	respond := func(code int, size int, hdr ...string) *http.Response {
		text := strings.Repeat(string(rune('a'+code%26)), size)
		resp, b := relResponse(code, text, hdr...)
		mu.Lock()
		madeAll = append(madeAll, made{resp, b, text})
		mu.Unlock()
		return resp
	}
	tr := &Transport{
		Policy:        Policy{MaxRetries: int(retries), BaseDelay: time.Duration(opts>>1&3) * 100 * time.Millisecond},
		MaxRetryAfter: []time.Duration{0, -1, time.Second, 1 << 62}[opts>>3&3],
		Random:        func() float64 { return 0.5 },
		Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			mu.Lock()
			i := attempts
			attempts++
			mu.Unlock()
			s := script[min(i, len(script)-1)]
			kind := s % 9
			if r.Body != nil && s&0x80 != 0 {
				kind = 99
			}
			mu.Lock()
			kinds = append(kinds, kind)
			mu.Unlock()
			if r.Body != nil {
				if s&0x80 != 0 { // read part of it, then give up as a reset would
					io.ReadFull(r.Body, make([]byte, 100))
					r.Body.Close()
					return nil, fmt.Errorf("write: %w", syscall.ECONNRESET)
				}
				got, _ := io.ReadAll(r.Body)
				r.Body.Close()
				if !bytes.Equal(got, orig) {
					fail("attempt %d: body of %d bytes, want %d", i+1, len(got), len(orig))
				}
				if r.ContentLength > 0 && r.ContentLength != int64(len(orig)) {
					fail("attempt %d: ContentLength %d for %d bytes", i+1, r.ContentLength, len(orig))
				}
			} else if len(orig) > 0 {
				fail("attempt %d: no body, want %d bytes", i+1, len(orig))
			}
			switch s % 9 {
			case 0:
				return respond(200, int(s>>4)), nil
			case 1:
				return respond(503, int(s>>4)*10), nil
			case 2:
				return respond(503, 5, "Retry-After", fuzzRetryAfters[int(s>>4)%len(fuzzRetryAfters)]), nil
			case 3:
				return nil, fmt.Errorf("read: %w", syscall.ECONNRESET)
			case 4:
				return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
			case 5:
				return respond(429, 70<<10), nil
			case 6:
				return respond(502, 3), fmt.Errorf("read: %w", io.ErrUnexpectedEOF)
			case 7:
				return respond(404, 9), nil
			default:
				time.Sleep(time.Duration(s>>4) * time.Second) // a slow attempt, in virtual time
				return respond(504, 1), nil
			}
		}),
	}
	var onRetry, onGiveUp int
	tr.OnRetry = func(RetryEvent) { onRetry++ }
	tr.OnGiveUp = func(RetryEvent) { onGiveUp++ }
	resp, err := tr.RoundTrip(req)

	if (resp == nil) == (err == nil) {
		t.Fatalf("resp %v, err %v: want exactly one", resp, err)
	}
	if resp != nil {
		got, rerr := io.ReadAll(resp.Body)
		resp.Body.Close()
		var found bool
		for _, m := range madeAll {
			if m.resp == resp {
				found = true
				if string(got) != m.text || rerr != nil {
					t.Errorf("returned %d body %d bytes (%v), want %d bytes", resp.StatusCode, len(got), rerr, len(m.text))
				}
			}
		}
		if !found {
			t.Errorf("returned a response the base never made")
		}
	}
	for i, m := range madeAll {
		if !m.body.closed.Load() {
			t.Errorf("response %d (%d) not closed", i+1, m.resp.StatusCode)
		}
	}
	if caller != nil && caller.closes.Load() != 1 {
		t.Errorf("caller's body closed %d times, want 1", caller.closes.Load())
	}
	for _, f := range failures {
		t.Error(f)
	}
	max := 1 + Policy{MaxRetries: int(retries)}.retries()
	if attempts > max {
		t.Errorf("%d attempts, at most %d allowed", attempts, max)
	}
	if m == "POST" {
		for i := 0; i < attempts-1; i++ {
			if kinds[i] != 4 {
				t.Errorf("POST without a key sent again after attempt %d of kind %d (kinds %v)", i+1, kinds[i], kinds)
				break
			}
		}
	}
	if onRetry != attempts-1 {
		t.Errorf("%d OnRetry for %d attempts", onRetry, attempts)
	}
	if onGiveUp > 1 {
		t.Errorf("%d OnGiveUp", onGiveUp)
	}
	var e *Error
	if err != nil && !errors.As(err, &e) {
		t.Errorf("error %v is not an *Error", err)
	}
}
