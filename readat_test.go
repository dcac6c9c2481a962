package httpretry

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
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
	f, _ := tempFileWith(t, data)
	return &countedFile{File: f}, data
}

// tempFileWith writes data to a file of the test's and opens it.
func tempFileWith(t *testing.T, data []byte) (f *os.File, name string) {
	t.Helper()
	name = filepath.Join(t.TempDir(), "body")
	if err := os.WriteFile(name, data, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, name
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

// signalFile is an *os.File whose first Close is signalled and every
// Close counted.
type signalFile struct {
	*os.File
	closes atomic.Int32
	closed chan struct{}
}

func (f *signalFile) Close() error {
	if f.closes.Add(1) == 1 {
		close(f.closed)
	}
	return f.File.Close()
}

func openSignalFile(t *testing.T, data []byte) *signalFile {
	t.Helper()
	f, _ := tempFileWith(t, data)
	return &signalFile{File: f, closed: make(chan struct{})}
}

// waitClosed waits up to 3 s for f's first Close, collecting garbage
// meanwhile, as a view dropped unclosed is released when it is collected.
// A bound, not a pause: it returns as soon as the file is closed.
func waitClosed(f *signalFile) bool {
	for range 150 {
		runtime.GC()
		select {
		case <-f.closed:
			return true
		case <-time.After(20 * time.Millisecond):
		}
	}
	return false
}

// TestFileBodyDroppedByHTTP2ReplaysIsClosed: net/http's HTTP/2 transport
// replays a request that has a GetBody after a reset with PROTOCOL_ERROR
// or a graceful GOAWAY, taking a body from GetBody for a replay it then
// does not send, and dropping it unclosed. That view held its reference,
// and the caller's file was never closed; plain net/http, given the same
// request (no GetBody), closes it once (a review's find).
func TestFileBodyDroppedByHTTP2ReplaysIsClosed(t *testing.T) {
	data := bytes.Repeat([]byte("h2"), 4<<10)
	for _, tc := range []struct {
		name  string
		fault func(w io.Writer, stream uint32) bool
	}{
		{"reset PROTOCOL_ERROR", func(w io.Writer, stream uint32) bool {
			return relH2Write(w, relH2Rst, 0, stream, relU32s(0x1 /* PROTOCOL_ERROR */)) == nil
		}},
		{"graceful GOAWAY", func(w io.Writer, stream uint32) bool {
			relH2Write(w, relH2GoAway, 0, 0, relU32s(0, 0 /* NO_ERROR */))
			return false
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := relStartH2(t, func(n int, stream uint32, w io.Writer) bool {
				if n <= 2 { // plain net/http's one stream, then the Transport's first
					return tc.fault(w, stream)
				}
				return relH2Respond(w, stream, "h2 ok") == nil
			})
			plain := openSignalFile(t, data)
			req, _ := http.NewRequest(http.MethodPut, srv.url, plain)
			if _, err := srv.client.RoundTrip(req); err == nil || !waitClosed(plain) || plain.closes.Load() != 1 {
				t.Fatalf("plain net/http: err %v, file closed %d times; want an error, closed once (premise)", err, plain.closes.Load())
			}

			f := openSignalFile(t, data)
			req, _ = http.NewRequest(http.MethodPut, srv.url, f)
			resp, err := (&Transport{Base: srv.client, Policy: noWait, MaxBufferedBody: 1 << 10}).RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(b) != "h2 ok" || srv.streams.Load() != 3 {
				t.Fatalf("body %q after %d streams; want h2 ok after 3", b, srv.streams.Load())
			}
			if !waitClosed(f) || f.closes.Load() != 1 {
				t.Errorf("the call succeeded, the file closed %d times; want once", f.closes.Load())
			}
			relWaitConns(t, srv.ln, srv.client)
		})
	}
}

// TestFileChangedBetweenAttemptsIsNotSentAsAnother: a file body of no
// declared length is sent chunked; truncated between attempts, its retry
// ended early, and the server took half the upload for the whole one;
// appended to, the retry sent other bytes. Now every view reads the bytes
// of the first to reach the end: a shorter file fails the retry with
// io.ErrUnexpectedEOF (StopRewind), a longer one is cut there. A body kept
// in memory is replayed as it was (a review's find).
func TestFileChangedBetweenAttemptsIsNotSentAsAnother(t *testing.T) {
	truncate := func(name string) { os.Truncate(name, 2<<10) }
	appendTo := func(name string) {
		f, _ := os.OpenFile(name, os.O_WRONLY|os.O_APPEND, 0)
		f.Write([]byte("appended"))
		f.Close()
	}
	for _, tc := range []struct {
		name   string
		limit  int64
		change func(string)
		fails  bool
	}{
		{"buffered, truncated", 1 << 20, truncate, false},
		{"read at its offsets, truncated", 1 << 10, truncate, true},
		{"read at its offsets, appended to", 1 << 10, appendTo, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := bytes.Repeat([]byte("0123456789abcdef"), 256)
			f, name := tempFileWith(t, data)
			var mu sync.Mutex
			var got [][]byte
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, err := io.ReadAll(r.Body)
				mu.Lock()
				got = append(got, b)
				n := len(got)
				mu.Unlock()
				if err != nil {
					w.WriteHeader(http.StatusBadRequest)
				} else if n == 1 {
					w.WriteHeader(http.StatusServiceUnavailable)
				}
			}))
			defer srv.Close()
			req, _ := http.NewRequest(http.MethodPut, srv.URL, f)
			tr := &Transport{Base: srv.Client().Transport, Policy: noWait, MaxBufferedBody: tc.limit,
				OnRetry: func(RetryEvent) { tc.change(name) }} // between the attempts
			resp, err := tr.RoundTrip(req)
			var e *Error
			if tc.fails {
				if !errors.As(err, &e) || e.Reason != StopRewind || !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Errorf("err %v; want the retry's body cut short, StopRewind", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			mu.Lock()
			defer mu.Unlock()
			if len(got) != 2 || !bytes.Equal(got[0], data) || !bytes.Equal(got[1], data) {
				t.Errorf("%d attempts sent %v bytes; want 2, each the file's %d as it was", len(got), lens(got), len(data))
			}
		})
	}
}

// lens returns the lengths of bs.
func lens(bs [][]byte) []int {
	var n []int
	for _, b := range bs {
		n = append(n, len(b))
	}
	return n
}

// TestFileBodyToServersAnsweringBeforeReading: servers that answer 503
// before reading the upload, over HTTP/1.1 and HTTP/2, so that net/http
// may still read an attempt's view after its response came: the last
// attempt sends the whole file, which is closed once (run with -race).
func TestFileBodyToServersAnsweringBeforeReading(t *testing.T) {
	data := make([]byte, 3<<20)
	for i := range data {
		data[i] = byte(i * 31)
	}
	for _, h2 := range []bool{false, true} {
		t.Run(map[bool]string{false: "HTTP/1.1", true: "HTTP/2"}[h2], func(t *testing.T) {
			var n atomic.Int32
			var last atomic.Value
			srv := startServer(t, h2, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if n.Add(1) < 3 {
					w.WriteHeader(http.StatusServiceUnavailable) // before reading the body
					return
				}
				b, _ := io.ReadAll(r.Body)
				last.Store(b)
			}))
			f := openSignalFile(t, data)
			req, _ := http.NewRequest(http.MethodPut, srv.URL, f)
			resp, err := (&Transport{Base: srv.Client().Transport, Policy: noWait}).RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 || (h2 && resp.ProtoMajor != 2) {
				t.Fatalf("status %d %s", resp.StatusCode, resp.Proto)
			}
			if b, _ := last.Load().([]byte); !bytes.Equal(b, data) {
				t.Errorf("the last attempt sent %d bytes, want the file's %d", len(b), len(data))
			}
			if !waitClosed(f) || f.closes.Load() != 1 {
				t.Errorf("file closed %d times, want once", f.closes.Load())
			}
		})
	}
}

// TestGetBodyAfterTheCallEndedIsAnError: a Base that asks GetBody for a
// view after the call has ended and every view was closed gets an error,
// rather than a view of a closed file whose release would close it again.
func TestGetBodyAfterTheCallEndedIsAnError(t *testing.T) {
	f, _ := tempFile(t, 4<<10)
	var getBody func() (io.ReadCloser, error)
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		getBody = r.GetBody
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
		return response(200, ""), nil
	})
	req, _ := http.NewRequest(http.MethodPut, "http://x/", f)
	resp, err := (&Transport{Base: base, MaxBufferedBody: 1 << 10}).RoundTrip(req)
	if err != nil || getBody == nil {
		t.Fatalf("err %v, GetBody %v; want a 200 and a GetBody for Base", err, getBody != nil)
	}
	resp.Body.Close()
	if body, err := getBody(); !errors.Is(err, errBodyClosed) || body != nil {
		t.Errorf("GetBody after the call: %v, %v; want errBodyClosed", body, err)
	}
	if n := f.closes.Load(); n != 1 {
		t.Errorf("file closed %d times, want once", n)
	}
}

// unseekableAt has ReadAt but a Seek that fails, as some readers of
// remote objects do: it is not read at its offsets, and is sent once.
type unseekableAt struct{ *bytes.Reader }

func (unseekableAt) Seek(int64, int) (int64, error) { return 0, errors.New("no seeking") }

func (unseekableAt) Close() error { return nil }

func TestBodyThatCannotTellItsOffsetIsSentOnce(t *testing.T) {
	data := bytes.Repeat([]byte("u"), 4<<10)
	base := newScripted(status(503))
	req, _ := http.NewRequest(http.MethodPut, "http://x/", unseekableAt{bytes.NewReader(data)})
	resp, err := (&Transport{Base: base, Policy: noWait, MaxBufferedBody: 1 << 10}).RoundTrip(req)
	if err != nil || resp.StatusCode != 503 || base.calls() != 1 || base.bodies[0] != string(data) {
		t.Fatalf("status %v, err %v, %d attempts; want the 503 of one attempt that sent the whole body", resp, err, base.calls())
	}
}

// TestFileTruncatedBeforeAnyViewReadItFailsTheRetry: attempt 1, sent with
// Expect: 100-continue, is answered 503 before any byte of its body is
// read; the file is then truncated. The retry's view, the first to reach
// the end, had no other view's bytes to fall short of, and its chunked
// half went as the whole upload; now a file that Stat says has shrunk
// since the call began fails the retry (a review's find).
func TestFileTruncatedBeforeAnyViewReadItFailsTheRetry(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 4096)
	f, name := tempFileWith(t, data)
	var n atomic.Int32
	var mu sync.Mutex
	var got [][]byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable) // before reading: no 100 Continue
			return
		}
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, b)
		mu.Unlock()
	}))
	defer srv.Close()
	base := srv.Client().Transport.(*http.Transport).Clone()
	base.ExpectContinueTimeout = 5 * time.Second // a bound: the server answers at once
	req, _ := http.NewRequest(http.MethodPut, srv.URL, f)
	req.Header.Set("Expect", "100-continue")
	tr := &Transport{Base: base, Policy: noWait, MaxBufferedBody: 1 << 10,
		OnRetry: func(RetryEvent) { os.Truncate(name, 2<<10) }}
	resp, err := tr.RoundTrip(req)
	var e *Error
	if err == nil {
		resp.Body.Close()
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("status %d: the server got %v bytes as the whole upload of %d", resp.StatusCode, lens(got), len(data))
	}
	if !errors.As(err, &e) || e.Reason != StopRewind || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("err %v; want the retry's body cut short, StopRewind", err)
	}
}

// TestFileBodyOfACallNeverRetriedIsSentAsItIs: with WithoutRetries, a file
// over the limit (or any, with no limit) is the caller's body, sent as it
// is: with a view and its GetBody, net/http's HTTP/2 transport replayed it
// by itself after a reset that does not prove it unprocessed, where plain
// net/http sends one stream (a review's find).
func TestFileBodyOfACallNeverRetriedIsSentAsItIs(t *testing.T) {
	data := bytes.Repeat([]byte("h2"), 4<<10)
	for _, tc := range []struct {
		name     string
		limit    int64
		declared bool
	}{{"no buffering (-1)", -1, false}, {"declared over the limit", 1 << 10, true}} {
		t.Run(tc.name, func(t *testing.T) {
			srv := relStartH2(t, func(n int, stream uint32, w io.Writer) bool {
				if n == 1 {
					return relH2Write(w, relH2Rst, 0, stream, relU32s(0x1 /* PROTOCOL_ERROR */)) == nil
				}
				return relH2Respond(w, stream, "h2 ok") == nil
			})
			f := openSignalFile(t, data)
			req, _ := http.NewRequestWithContext(WithoutRetries(context.Background()), http.MethodPut, srv.url, f)
			if tc.declared {
				req.ContentLength = int64(len(data))
			}
			resp, err := (&Transport{Base: srv.client, MaxBufferedBody: tc.limit}).RoundTrip(req)
			if err == nil {
				resp.Body.Close()
			}
			if n := srv.streams.Load(); n != 1 {
				t.Errorf("%d streams sent (err %v); want 1, as plain net/http", n, err)
			}
			if !waitClosed(f) || f.closes.Load() != 1 {
				t.Errorf("file closed %d times, want once", f.closes.Load())
			}
			relWaitConns(t, srv.ln, srv.client)
		})
	}
}

// zeroAt is a body whose Read is sound but whose ReadAt returns (0, nil)
// at the end, against io.ReaderAt's contract, a common slip.
type zeroAt struct{ *bytes.Reader }

func (z zeroAt) ReadAt(p []byte, off int64) (int, error) {
	n, err := z.Reader.ReadAt(p, off)
	if err == io.EOF {
		err = nil
	}
	return n, err
}

func (zeroAt) Close() error { return nil }

// TestReaderAtThatGivesNothingEndsTheAttempt: such a body read at its
// offsets gave (0, nil) at its end for ever; net/http's copy spun on it,
// and RoundTrip never returned, whatever its deadline. A view that gives
// nothing and no error now ends with io.ErrNoProgress (a review's find).
func TestReaderAtThatGivesNothingEndsTheAttempt(t *testing.T) {
	base := newScripted(status(200))
	req, _ := http.NewRequest(http.MethodPut, "http://x/", zeroAt{bytes.NewReader(bytes.Repeat([]byte("z"), 4<<10))})
	done := make(chan error, 1)
	go func() {
		_, err := (&Transport{Base: base, Policy: noWait, MaxBufferedBody: -1}).RoundTrip(req)
		done <- err
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second): // a bound on a hang
		t.Fatal("RoundTrip has not returned 5 s after it was called")
	}
	if base.calls() != 1 || len(base.bodies[0]) != 4<<10 {
		t.Errorf("%d attempts, the first sent %d bytes; want 1, the body's %d before its end", base.calls(), len(base.bodies[0]), 4<<10)
	}
}
