package bench

import (
	"bytes"
	"io"
	"net/http"
	"slices"
	"time"
)

// loop is the hand-written floor the libraries are measured against: it
// retries every error and every retryable status, immediately when base0 is
// zero (the naive loop), else after min(cap, base0·2^(n-1)) with no jitter,
// so that clients that failed together retry together.
type loop struct {
	base    http.RoundTripper
	retries int
	base0   time.Duration
	cap     time.Duration
}

// RoundTrip sends req up to 1+retries times.
func (l *loop) RoundTrip(req *http.Request) (*http.Response, error) {
	getBody := req.GetBody
	if req.Body != nil && req.Body != http.NoBody && getBody == nil {
		// A floor, not a library: it keeps the whole body, however large.
		buf, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		getBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf)), nil }
	}
	for n := 0; ; n++ {
		out := req.Clone(req.Context())
		if getBody != nil && (n > 0 || req.GetBody == nil) {
			body, err := getBody()
			if err != nil {
				return nil, err
			}
			out.Body = body
		}
		resp, err := l.base.RoundTrip(out)
		if n == l.retries || !(err != nil || slices.Contains(retryableStatuses, resp.StatusCode)) {
			return resp, err
		}
		if resp != nil {
			io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
			resp.Body.Close()
		}
		if d := l.delay(n + 1); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-req.Context().Done():
				t.Stop()
				return nil, req.Context().Err()
			case <-t.C:
			}
		}
	}
}

// delay is the wait before retry n (n ≥ 1).
func (l *loop) delay(n int) time.Duration {
	if l.base0 <= 0 {
		return 0
	}
	d := l.base0
	for i := 1; i < n && d < l.cap; i++ {
		d *= 2
	}
	return min(d, l.cap)
}
