package httpretry

import (
	"context"
	"math"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name, value, date string
		want              time.Duration
		ok                bool
	}{
		{"absent", "", "", 0, false},
		{"blank", "   ", "", 0, false},
		{"delta seconds", "120", "", 2 * time.Minute, true},
		{"zero", "0", "", 0, true},
		{"surrounding space", " 7 ", "", 7 * time.Second, true},
		{"negative is garbage", "-1", "", 0, false},
		{"plus sign is garbage", "+5", "", 0, false},
		{"decimal seconds count", "1.5", "", 1500 * time.Millisecond, true},
		{"decimal seconds to the nanosecond", "2.128000001", "", 2128000001 * time.Nanosecond, true},
		{"finer than a nanosecond rounds up", "0.0000000001", "", time.Nanosecond, true},
		{"zeros past the nanosecond", "3.0000000000", "", 3 * time.Second, true},
		{"a dot without digits after is garbage", "5.", "", 0, false},
		{"a dot without digits before is garbage", ".5", "", 0, false},
		{"two dots are garbage", "1.2.3", "", 0, false},
		{"a sign after the dot is garbage", "1.-5", "", 0, false},
		{"garbage past the nanosecond", "1.0000000001x", "", 0, false},
		{"decimal at the largest Duration saturates", "9223372036.9", "", math.MaxInt64, true},
		{"decimal just under the largest Duration", "9223372036.854775807", "", math.MaxInt64, true},
		{"exponent is garbage", "1e9", "", 0, false},
		{"words", "soon", "", 0, false},
		{"overflowing delta saturates", "99999999999999999999", "", math.MaxInt64, true},
		{"largest exact delta", "9223372036", "", 9223372036 * time.Second, true},
		{"IMF-fixdate", "Sun, 01 Mar 2026 12:00:30 GMT", "", 30 * time.Second, true},
		{"RFC 850 date", "Sunday, 01-Mar-26 12:01:00 GMT", "", time.Minute, true},
		{"ANSI C date", "Sun Mar  1 12:00:10 2026", "", 10 * time.Second, true},
		{"date in the past means now", "Sun, 01 Mar 2026 11:00:00 GMT", "", 0, true},
		{"year 1900", "Mon, 01 Jan 1900 00:00:00 GMT", "", 0, true},
		{"year 3000 saturates", "Wed, 01 Jan 3000 00:00:00 GMT", "", math.MaxInt64, true},
		{"date against the server's Date", "Sun, 01 Mar 2026 08:00:20 GMT", "Sun, 01 Mar 2026 08:00:00 GMT", 20 * time.Second, true},
		{"bad Date falls back to now", "Sun, 01 Mar 2026 12:00:05 GMT", "yesterday", 5 * time.Second, true},
		{"Date does not affect delta", "3", "Sun, 01 Mar 2026 08:00:00 GMT", 3 * time.Second, true},
		{"garbage date", "Sun, 99 Foo 2026", "", 0, false},
		{"a cached response's Age counts", "Sun, 01 Mar 2026 08:00:21 GMT", "Sun, 01 Mar 2026 08:00:00 GMT|20", time.Second, true},
		{"Age past the date means now", "Sun, 01 Mar 2026 08:00:21 GMT", "Sun, 01 Mar 2026 08:00:00 GMT|70", 0, true},
		{"garbage Age is none", "Sun, 01 Mar 2026 08:00:21 GMT", "Sun, 01 Mar 2026 08:00:00 GMT|-5", 21 * time.Second, true},
		{"huge Age saturates", "Sun, 01 Mar 2026 08:00:21 GMT", "Sun, 01 Mar 2026 08:00:00 GMT|99999999999999999999", 0, true},
		{"Age without Date is none", "Sun, 01 Mar 2026 12:00:30 GMT", "|20", 30 * time.Second, true},
		{"Age does not affect delta", "3", "Sun, 01 Mar 2026 08:00:00 GMT|20", 3 * time.Second, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			if tt.value != "" {
				h.Set("Retry-After", tt.value)
			}
			date, age, _ := strings.Cut(tt.date, "|") // a cached response's Age after the bar
			if date != "" {
				h.Set("Date", date)
			}
			if age != "" {
				h.Set("Age", age)
			}
			got, ok := parseRetryAfter(h, now)
			assert.Equal(t, tt.ok, ok)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestParseRetryAfterClockSkew(t *testing.T) {
	// The client's clock is an hour fast; the server says "in 30 s" by its
	// own clock. The wait must be 30 s, not zero.
	clientNow := time.Date(2026, 3, 1, 13, 0, 0, 0, time.UTC)
	h := http.Header{}
	h.Set("Date", "Sun, 01 Mar 2026 12:00:00 GMT")
	h.Set("Retry-After", "Sun, 01 Mar 2026 12:00:30 GMT")
	got, ok := parseRetryAfter(h, clientNow)
	assert.True(t, ok)
	assert.Equal(t, 30*time.Second, got)
}

// TestRetryAfterWhoseSpreadWaitEndsPastTheDeadlineIsNotWaited: the spread
// counts against the deadline (rule 7): a Retry-After of 10 s with 10.5 s
// left is waited when the spread keeps it inside, and returned at once,
// StopDeadline, when the spread would end it past (a review's find, of
// the doc, which said "past the deadline" of the Retry-After alone).
func TestRetryAfterWhoseSpreadWaitEndsPastTheDeadlineIsNotWaited(t *testing.T) {
	for _, tc := range []struct {
		u       float64
		retried bool
	}{{0, true}, {0.99, false}} {
		synctest.Test(t, func(t *testing.T) {
			base := newScripted(status(503, "Retry-After", "10"), status(200))
			var stops []StopReason
			tr := &Transport{Base: base, Policy: Policy{BaseDelay: time.Millisecond, Jitter: JitterNone},
				Random: func() float64 { return tc.u }, OnGiveUp: func(e RetryEvent) { stops = append(stops, e.Stop) }}
			ctx, cancel := context.WithTimeout(context.Background(), 10500*time.Millisecond)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "GET", "http://x/", nil)
			start := time.Now()
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatalf("u %v: err %v; want a response", tc.u, err)
			}
			resp.Body.Close()
			took := time.Since(start)
			if tc.retried && (resp.StatusCode != 200 || base.calls() != 2 || took < 10*time.Second) {
				t.Errorf("u %v: status %d after %d attempts in %v; want the retry's 200 after the 10 s wait", tc.u, resp.StatusCode, base.calls(), took)
			}
			if !tc.retried && (resp.StatusCode != 503 || base.calls() != 1 || took != 0 || len(stops) != 1 || stops[0] != StopDeadline) {
				t.Errorf("u %v: status %d after %d attempts in %v, stops %v; want the 503 at once, StopDeadline", tc.u, resp.StatusCode, base.calls(), took, stops)
			}
		})
	}
}

// TestDecimalRetryAfterIsAFloor: a Retry-After of "2.5", which some
// servers send though RFC 9110 has whole seconds, is waited, not ignored
// for a retry 1 ms later (a review's find, from peers' issue threads).
func TestDecimalRetryAfterIsAFloor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := newScripted(status(429, "Retry-After", "2.5"), status(200))
		tr := &Transport{Base: base, Policy: Policy{BaseDelay: time.Millisecond, Jitter: JitterNone},
			Random: func() float64 { return 0 }}
		req, _ := http.NewRequest("GET", "http://x/", nil)
		start := time.Now()
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if took := time.Since(start); resp.StatusCode != 200 || took != 2500*time.Millisecond {
			t.Errorf("status %d after %v; want the retry's 200 after 2.5 s", resp.StatusCode, took)
		}
	})
}

// TestNamesADate: a Retry-After names a moment only as an HTTP date;
// delta-seconds, decimal ones included, are a delay.
func TestNamesADate(t *testing.T) {
	for v, want := range map[string]bool{
		"120":                               false,
		" 2.5 ":                             false,
		"Wed, 21 Oct 2015 07:28:00 GMT":     true,
		"Wednesday, 21-Oct-15 07:28:00 GMT": true,
	} {
		if got := namesADate(http.Header{"Retry-After": {v}}); got != want {
			t.Errorf("namesADate(%q) = %v, want %v", v, got, want)
		}
	}
}
