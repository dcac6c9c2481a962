package httpretry

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
)

// countedFile is an *os.File whose closes are counted.
type countedFile struct {
	*os.File
	closes atomic.Int32
}

func (f *countedFile) Close() error {
	f.closes.Add(1)
	return f.File.Close()
}

// tempFile writes size pattern bytes to a file and opens it.
func tempFile(t *testing.T, size int) (*countedFile, []byte) {
	t.Helper()
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i*7 + i>>10)
	}
	name := filepath.Join(t.TempDir(), "body")
	if err := os.WriteFile(name, data, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return &countedFile{File: f}, data
}

// TestFileBodyOverTheLimitIsRetried: a body over MaxBufferedBody that can
// be read at its offsets (an *os.File, which http.NewRequest gives no
// GetBody) is read afresh by every attempt, from where it stood when the
// call began, byte for byte over a real connection, and closed once, after
// the call. Before, it was sent once and its 503 returned
// (StopBodyTooLarge), where go-retryablehttp, which seeks it back, retried
// it (a review's find).
func TestFileBodyOverTheLimitIsRetried(t *testing.T) {
	const size, skip = 300 << 10, 1000
	for _, tc := range []struct {
		name     string
		limit    int64
		declared bool // ContentLength set: no read ahead
	}{
		{"read ahead past the limit", 64 << 10, false},
		{"declared over the limit", 64 << 10, true},
		{"no buffering (-1)", -1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, data := tempFile(t, size)
			if _, err := f.Seek(skip, io.SeekStart); err != nil { // the caller had read some: the body starts there
				t.Fatal(err)
			}
			want := sha256.Sum256(data[skip:])
			var mu sync.Mutex
			var got [][32]byte
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				mu.Lock()
				got = append(got, sha256.Sum256(b))
				n := len(got)
				mu.Unlock()
				if n < 3 {
					w.WriteHeader(http.StatusServiceUnavailable)
				}
			}))
			defer srv.Close()
			req, _ := http.NewRequest(http.MethodPut, srv.URL, f)
			if tc.declared {
				req.ContentLength = size - skip
			}
			tr := &Transport{Policy: noWait, MaxBufferedBody: tc.limit}
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 || len(got) != 3 {
				t.Fatalf("status %d after %d attempts; want 200 after 3", resp.StatusCode, len(got))
			}
			for i, h := range got {
				if h != want {
					t.Errorf("attempt %d sent other bytes than the file's from offset %d", i+1, skip)
				}
			}
			if n := f.closes.Load(); n != 1 {
				t.Errorf("file closed %d times, want once", n)
			}
		})
	}
}

// TestFileBodyIsClosedOnceNoAttemptReadsIt: the caller's file is closed
// once the call has ended and every attempt's view of it is closed, not
// under a view that Base still reads (net/http may still be sending an
// attempt's body once its response has come).
func TestFileBodyIsClosedOnceNoAttemptReadsIt(t *testing.T) {
	f, data := tempFile(t, 4<<10)
	var held []io.ReadCloser
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		held = append(held, r.Body) // read later, closed by the test
		if len(held) == 1 {
			return response(503, ""), nil
		}
		return response(200, ""), nil
	})
	req, _ := http.NewRequest(http.MethodPut, "http://x/", f)
	resp, err := (&Transport{Base: base, Policy: noWait, MaxBufferedBody: 1 << 10}).RoundTrip(req)
	if err != nil || resp.StatusCode != 200 || len(held) != 2 {
		t.Fatalf("status %v, err %v after %d attempts; want 200 after 2", resp, err, len(held))
	}
	resp.Body.Close()
	for i, body := range held {
		if f.closes.Load() != 0 {
			t.Fatalf("file closed with %d of 2 views open", 2-i)
		}
		if b, err := io.ReadAll(body); err != nil || !bytes.Equal(b, data) {
			t.Errorf("view %d read %d bytes, err %v; want the file's %d", i+1, len(b), err, len(data))
		}
		body.Close()
		body.Close() // a second close of a view releases nothing more
	}
	if n := f.closes.Load(); n != 1 {
		t.Errorf("file closed %d times, want once", n)
	}
}

// TestPipeBodyOverTheLimitIsSentOnce: an *os.File that cannot tell its
// offset (a pipe) is over the limit sent once, whole, and not retried.
func TestPipeBodyOverTheLimitIsSentOnce(t *testing.T) {
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("p"), 8<<10)
	go func() {
		pw.Write(data)
		pw.Close()
	}()
	base := newScripted(status(503))
	var stops []StopReason
	tr := &Transport{Base: base, Policy: noWait, MaxBufferedBody: 1 << 10, OnGiveUp: func(e RetryEvent) { stops = append(stops, e.Stop) }}
	req, _ := http.NewRequest(http.MethodPut, "http://x/", pr)
	resp, err := tr.RoundTrip(req)
	if err != nil || resp.StatusCode != 503 || base.calls() != 1 || base.bodies[0] != string(data) {
		t.Fatalf("status %v, err %v, %d attempts; want the 503 of one attempt that sent the whole body", resp, err, base.calls())
	}
	if len(stops) != 1 || stops[0] != StopBodyTooLarge {
		t.Errorf("stops %v, want StopBodyTooLarge", stops)
	}
}

// failingAt is a body read at its offsets whose ReadAt fails once a
// second read from its start has begun: a retry's view.
type failingAt struct {
	*bytes.Reader
	starts atomic.Int32
	closes atomic.Int32
}

var errDiskGone = errors.New("disk gone")

func (b *failingAt) ReadAt(p []byte, off int64) (int, error) {
	if off == 0 && b.starts.Add(1) > 1 || b.starts.Load() > 1 {
		return 0, errDiskGone
	}
	return b.Reader.ReadAt(p, off)
}

func (b *failingAt) Close() error { b.closes.Add(1); return nil }

// TestFileBodyFailingOnARetryIsStopRewind: a retry's view that fails as
// it is read ends the call with that error, StopRewind, as a body from
// GetBody does: the body failed, not the connection.
func TestFileBodyFailingOnARetryIsStopRewind(t *testing.T) {
	body := &failingAt{Reader: bytes.NewReader(bytes.Repeat([]byte("f"), 4<<10))}
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		_, err := io.ReadAll(r.Body)
		r.Body.Close()
		if err != nil {
			return nil, &unexpectedEOFError{err}
		}
		return response(503, ""), nil
	})
	req, _ := http.NewRequest(http.MethodPut, "http://x/", body)
	var stops []StopReason
	tr := &Transport{Base: base, Policy: noWait, MaxBufferedBody: 1 << 10, OnGiveUp: func(e RetryEvent) { stops = append(stops, e.Stop) }}
	_, err := tr.RoundTrip(req)
	var e *Error
	if !errors.As(err, &e) || e.Reason != StopRewind || e.Attempts != 2 || !errors.Is(err, errDiskGone) {
		t.Errorf("err %v; want the view's error after 2 attempts, StopRewind", err)
	}
	if len(stops) != 1 || stops[0] != StopRewind || body.closes.Load() != 1 {
		t.Errorf("stops %v, body closed %d times; want StopRewind, closed once", stops, body.closes.Load())
	}
}

// unexpectedEOFError is a transport error that wraps a request body's read
// error and is retried (it wraps io.ErrUnexpectedEOF too), as a connection
// cut short would be.
type unexpectedEOFError struct{ err error }

func (e *unexpectedEOFError) Error() string { return "body: " + e.err.Error() }

func (e *unexpectedEOFError) Unwrap() []error { return []error{e.err, io.ErrUnexpectedEOF} }

// deviceBody is a body with ReadAt and Seek that says it is a character
// device, as a terminal's *os.File does, whose Seek may succeed while its
// ReadAt fails.
type deviceBody struct{ *bytes.Reader }

func (deviceBody) Close() error { return nil }

func (deviceBody) Stat() (fs.FileInfo, error) { return deviceInfo{}, nil }

type deviceInfo struct{ fs.FileInfo }

func (deviceInfo) Mode() fs.FileMode { return fs.ModeDevice | fs.ModeCharDevice }

// TestDeviceBodyOverTheLimitIsSentOnce: a body that says it is not a
// regular file is not read at its offsets: over the limit it is sent once,
// whole, from its Read.
func TestDeviceBodyOverTheLimitIsSentOnce(t *testing.T) {
	data := bytes.Repeat([]byte("d"), 4<<10)
	base := newScripted(status(503))
	tr := &Transport{Base: base, Policy: noWait, MaxBufferedBody: 1 << 10}
	req, _ := http.NewRequest(http.MethodPut, "http://x/", deviceBody{bytes.NewReader(data)})
	resp, err := tr.RoundTrip(req)
	if err != nil || resp.StatusCode != 503 || base.calls() != 1 || base.bodies[0] != string(data) {
		t.Fatalf("status %v, err %v, %d attempts; want the 503 of one attempt that sent the whole body", resp, err, base.calls())
	}
}
