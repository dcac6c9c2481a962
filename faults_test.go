package httpretry

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/iotest"
	"testing/synctest"
	"time"
)

// Real faults over loopback sockets. Each test counts the connections open
// at its server and requires them back at zero once the client's idle
// connections are closed.

// relListener counts the connections it accepted that are still open.
type relListener struct {
	net.Listener
	open   atomic.Int64
	total  atomic.Int64
	mu     sync.Mutex
	conns  map[*relConn]struct{}
	closed chan struct{} // a connection closed (one pending signal is enough)
}

func relListen(t *testing.T, addr string) *relListener {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return &relListener{Listener: ln, conns: map[*relConn]struct{}{}, closed: make(chan struct{}, 1)}
}

func (l *relListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.open.Add(1)
	l.total.Add(1)
	rc := &relConn{Conn: c, l: l}
	l.mu.Lock()
	l.conns[rc] = struct{}{}
	l.mu.Unlock()
	return rc, nil
}

// closeAll closes every connection still open, for cleanup after a failure.
func (l *relListener) closeAll() {
	l.mu.Lock()
	conns := make([]*relConn, 0, len(l.conns))
	for c := range l.conns {
		conns = append(conns, c)
	}
	l.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

// relConn is an accepted connection that tells its listener when it closes.
type relConn struct {
	net.Conn
	l    *relListener
	once sync.Once
}

func (c *relConn) Close() error {
	c.once.Do(func() {
		c.l.open.Add(-1)
		c.l.mu.Lock()
		delete(c.l.conns, c)
		c.l.mu.Unlock()
		select {
		case c.l.closed <- struct{}{}:
		default:
		}
	})
	return c.Conn.Close()
}

// relReset closes c with an RST instead of a FIN.
func relReset(c net.Conn) {
	for inner := c; ; {
		switch x := inner.(type) {
		case *relConn:
			inner = x.Conn
			continue
		case *tls.Conn:
			inner = x.NetConn()
			continue
		case *net.TCPConn:
			x.SetLinger(0)
		}
		break
	}
	c.Close()
}

// relWaitConns closes the client's idle connections and waits until the
// server has no connection open. It closes them again now and then: a
// dial that a request started and no longer needed (HTTP/2 under -race
// on a loaded machine) may finish, and its connection go idle, after the
// first close; a connection kept busy by a body never closed stays open,
// and fails the test.
func relWaitConns(t *testing.T, l *relListener, client interface{ CloseIdleConnections() }) {
	t.Helper()
	client.CloseIdleConnections()
	timeout := time.NewTimer(3 * time.Second)
	defer timeout.Stop()
	again := time.NewTicker(100 * time.Millisecond)
	defer again.Stop()
	for l.open.Load() != 0 {
		select {
		case <-l.closed:
		case <-again.C:
			client.CloseIdleConnections()
		case <-timeout.C:
			t.Fatalf("%d of %d server connections still open", l.open.Load(), l.total.Load())
		}
	}
}

// relRaw is a hand-written HTTP/1.1 server: serve gets each request with
// its 1-based number, over all connections, and the connection to answer
// on; it returns false when it closed the connection.
type relRaw struct {
	ln   *relListener
	url  string
	reqs atomic.Int32
	wg   sync.WaitGroup
}

type relServe func(n int, req *http.Request, br *bufio.Reader, c net.Conn) (keep bool)

func relStartRaw(t *testing.T, serve relServe) *relRaw {
	t.Helper()
	s := &relRaw{ln: relListen(t, "127.0.0.1:0")}
	s.url = "http://" + s.ln.Addr().String()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := s.ln.Accept()
			if err != nil {
				return
			}
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					if !serve(int(s.reqs.Add(1)), req, br, c) {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		s.ln.Close()
		s.ln.closeAll()
		s.wg.Wait()
	})
	return s
}

// relOK answers 200 with body, after reading the request body.
func relOK(req *http.Request, c net.Conn, body string) bool {
	io.Copy(io.Discard, req.Body)
	_, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	return err == nil
}

// relClient is a fresh base transport, so that CloseIdleConnections reaches
// only the test's own connections, wrapped in a Transport with short waits.
func relClient() (*Transport, *http.Transport) {
	base := &http.Transport{}
	return &Transport{
		Base:   base,
		Policy: Policy{MaxRetries: 3, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond, Jitter: JitterNone},
	}, base
}

// relReadSignal makes base's connections signal, on the returned channel,
// each time one of them has read want bytes in all, so that a server that
// breaks a connection after writing waits for the client to have its bytes
// instead of sleeping.
func relReadSignal(base *http.Transport, want int) <-chan struct{} {
	got := make(chan struct{}, 16)
	var d net.Dialer
	base.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &relCountingConn{Conn: c, want: want, got: got}, nil
	}
	return got
}

// relCountingConn is a client connection that signals once it has read
// want bytes.
type relCountingConn struct {
	net.Conn
	want, read int // read is used only by the connection's reader
	got        chan<- struct{}
}

func (c *relCountingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.read < c.want && c.read+n >= c.want {
		select {
		case c.got <- struct{}{}:
		default:
		}
	}
	c.read += n
	return n, err
}

// relAwait waits for a signal of relReadSignal, or gives up after 5 s so
// that a server goroutine never hangs a test that failed otherwise.
func relAwait(got <-chan struct{}) {
	select {
	case <-got:
	case <-time.After(5 * time.Second):
	}
}

// relReasons records the OnRetry reasons of a Transport.
func relReasons(tr *Transport) func() []string {
	var mu sync.Mutex
	var reasons []string
	tr.OnRetry = func(e RetryEvent) {
		mu.Lock()
		reasons = append(reasons, e.Reason)
		mu.Unlock()
	}
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), reasons...)
	}
}

func relDo(t *testing.T, tr http.RoundTripper, method, url string, body io.Reader, hdr ...string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return tr.RoundTrip(req)
}

func relReadOK(t *testing.T, resp *http.Response, err error, want string) {
	t.Helper()
	if err != nil {
		t.Fatalf("RoundTrip: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 || string(b) != want {
		t.Fatalf("status %d, body %q, read error %v; want 200 %q", resp.StatusCode, b, err, want)
	}
}

func TestFaultResetBeforeResponse(t *testing.T) {
	relNoLeaks(t)
	srv := relStartRaw(t, func(n int, req *http.Request, br *bufio.Reader, c net.Conn) bool {
		io.Copy(io.Discard, req.Body)
		if req.Header.Get("X-Fail") == "always" || n == 1 {
			relReset(c)
			return false
		}
		return relOK(req, c, "ok")
	})
	tr, base := relClient()
	reasons := relReasons(tr)

	resp, err := relDo(t, tr, "GET", srv.url, nil)
	relReadOK(t, resp, err, "ok")
	if got := reasons(); len(got) != 1 || got[0] != "connection reset" {
		t.Errorf("retry reasons %q, want one connection reset", got)
	}
	if srv.reqs.Load() != 2 {
		t.Errorf("server saw %d requests, want 2", srv.reqs.Load())
	}

	// A POST without a key may have been executed: not retried.
	before := srv.reqs.Load()
	_, err = relDo(t, tr, "POST", srv.url, strings.NewReader("pay"), "X-Fail", "always")
	var e *Error
	if !errors.As(err, &e) || e.Attempts != 1 || e.Reason != StopNotReplayable || !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("POST: %v; want a not-replayable *Error after 1 attempt wrapping ECONNRESET", err)
	}
	if got := srv.reqs.Load() - before; got != 1 {
		t.Errorf("POST reached the server %d times, want 1", got)
	}

	// The same POST with an Idempotency-Key is retried to exhaustion.
	before = srv.reqs.Load()
	_, err = relDo(t, tr, "POST", srv.url, strings.NewReader("pay"), "X-Fail", "always", "Idempotency-Key", "k1")
	if !errors.As(err, &e) || e.Attempts != 4 || e.Reason != StopExhausted || !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("keyed POST: %v; want exhaustion after 4 attempts", err)
	}
	if got := srv.reqs.Load() - before; got != 4 {
		t.Errorf("keyed POST reached the server %d times, want 4", got)
	}
	relWaitConns(t, srv.ln, base)
}

// TestFaultResetMidHeaders: a connection that breaks between header
// lines, or inside the reason phrase or a header's value (net/http's
// unexpected EOF), is retried. One that breaks inside the status code or
// a header's name leaves net/http with a malformed line (its EOF is not in
// the error), which cannot be told from a server that sends garbage
// without matching error strings: that is returned after one attempt, as
// a not-retryable error.
func TestFaultResetMidHeaders(t *testing.T) {
	relNoLeaks(t)
	for _, tc := range []struct {
		cut     string
		retried bool
	}{
		{"HTTP/1.1 200 OK\r\n", true},
		{"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n", true},
		{"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 0\r\n", true},
		{"HTTP/1.1 503 Serv", true},
		{"HTTP/1.1 200 OK\r\nContent-Type: text/pl", true},
		{"HTTP/1.1 200 OK\r\nContent-Le", false},
		{"HTTP/1.1 2", false},
	} {
		for _, rst := range []bool{true, false} {
			t.Run(fmt.Sprintf("%q rst=%v", tc.cut, rst), func(t *testing.T) {
				tr, base := relClient()
				received := relReadSignal(base, len(tc.cut))
				srv := relStartRaw(t, func(n int, req *http.Request, br *bufio.Reader, c net.Conn) bool {
					if n%2 == 1 {
						io.Copy(io.Discard, req.Body)
						io.WriteString(c, tc.cut)
						relAwait(received) // the bytes reach the client before the reset
						if rst {
							relReset(c)
						} else {
							c.Close()
						}
						return false
					}
					return relOK(req, c, "whole")
				})
				reasons := relReasons(tr)
				resp, err := relDo(t, tr, "PUT", srv.url, strings.NewReader("body"))
				got := reasons()
				if !tc.retried {
					var e *Error
					if !errors.As(err, &e) || e.Attempts != 1 || e.Reason != StopNotRetryable || len(got) != 0 {
						t.Fatalf("resp %v, err %v, retries %q; want a not-retryable *Error after 1 attempt", resp, err, got)
					}
					relWaitConns(t, srv.ln, base)
					return
				}
				relReadOK(t, resp, err, "whole")
				if len(got) != 1 || (got[0] != "connection reset" && got[0] != "connection closed before a response") {
					t.Errorf("retry reasons %q", got)
				}
				relWaitConns(t, srv.ln, base)
			})
		}
	}
}

// TestFaultCloseMidBody: once a body is handed to the caller, a broken
// connection is the caller's read error, and nothing is sent again.
func TestFaultCloseMidBody(t *testing.T) {
	relNoLeaks(t)
	const full = 1000
	prefix := strings.Repeat("p", 100)
	for _, tc := range []struct {
		name    string
		tr      func(*Transport)
		status  int
		retries int
	}{
		{"200", func(*Transport) {}, 200, 0},
		{"200 with AttemptTimeout", func(tr *Transport) { tr.AttemptTimeout = 200 * time.Millisecond }, 200, 0},
		{"last 503", func(tr *Transport) { tr.Policy.MaxRetries = 1 }, 503, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			head := fmt.Sprintf("HTTP/1.1 %d X\r\nContent-Length: %d\r\n\r\n", tc.status, full)
			tr, base := relClient()
			received := relReadSignal(base, len(head)+len(prefix))
			srv := relStartRaw(t, func(n int, req *http.Request, br *bufio.Reader, c net.Conn) bool {
				io.Copy(io.Discard, req.Body)
				io.WriteString(c, head+prefix)
				relAwait(received) // the prefix reaches the client before the connection breaks
				if n%2 == 0 {
					relReset(c)
				} else {
					c.Close()
				}
				return false
			})
			tc.tr(tr)
			reasons := relReasons(tr)
			resp, err := relDo(t, tr, "GET", srv.url, nil)
			if err != nil {
				t.Fatal(err)
			}
			b, rerr := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status || string(b) != prefix || rerr == nil {
				t.Fatalf("status %d, %d bytes, read error %v; want %d, the %d-byte prefix and an error", resp.StatusCode, len(b), rerr, tc.status, len(prefix))
			}
			if !errors.Is(rerr, io.ErrUnexpectedEOF) && !errors.Is(rerr, syscall.ECONNRESET) {
				t.Errorf("read error %v, want unexpected EOF or a reset", rerr)
			}
			if int(srv.reqs.Load()) != 1+tc.retries || len(reasons()) != tc.retries {
				t.Errorf("server saw %d requests after %d retries; want %d", srv.reqs.Load(), len(reasons()), 1+tc.retries)
			}
			relWaitConns(t, srv.ln, base)
		})
	}
}

// TestFaultSlowHeaders: headers slower than AttemptTimeout fail the attempt
// and are retried; a slow body after prompt headers is not cut. In virtual
// time, over net/http's client and server on an in-memory network.
func TestFaultSlowHeaders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var slow atomic.Int32 // requests to hold back
		var reqs atomic.Int32
		n, base := startPipeServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			reqs.Add(1)
			if slow.Add(-1) >= 0 {
				select {
				case <-time.After(2 * time.Second): // virtual
				case <-r.Context().Done():
					return
				}
			}
			if r.URL.Path == "/slowbody" {
				w.WriteHeader(200)
				w.(http.Flusher).Flush()
				select { // virtual: three times the attempt timeout
				case <-time.After(150 * time.Millisecond):
				case <-r.Context().Done(): // the client cut the body
					return
				}
			}
			io.WriteString(w, "done")
		}))
		tr := &Transport{
			Base:           base,
			AttemptTimeout: 50 * time.Millisecond,
			Policy:         Policy{MaxRetries: 3, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond, Jitter: JitterNone},
		}
		reasons := relReasons(tr)
		const url = "http://slow.test"

		slow.Store(1)
		start := time.Now()
		resp, err := relDo(t, tr, "GET", url, nil)
		relReadOK(t, resp, err, "done")
		if got := reasons(); len(got) != 1 || got[0] != "attempt timeout" {
			t.Errorf("retry reasons %q, want one attempt timeout", got)
		}
		if d := time.Since(start); d > 100*time.Millisecond {
			t.Errorf("took %v: the slow attempt was not cut at its timeout", d)
		}

		slow.Store(100)
		reqs.Store(0)
		tr.Policy.MaxRetries = 2
		resp, err = relDo(t, tr, "GET", url, nil)
		if resp != nil { // a failure of the test, closed so that it fails cleanly
			resp.Body.Close()
		}
		var e *Error
		if !errors.As(err, &e) || e.Attempts != 3 || e.Reason != StopExhausted || !errors.Is(err, ErrAttemptTimeout) {
			t.Fatalf("all slow: %v; want exhaustion after 3 attempts wrapping ErrAttemptTimeout", err)
		}
		if n := strings.Count(err.Error(), ErrAttemptTimeout.Error()); n != 1 {
			t.Errorf("%q says %q %d times", err, ErrAttemptTimeout, n)
		}
		if reqs.Load() != 3 {
			t.Errorf("server saw %d requests, want 3", reqs.Load())
		}

		slow.Store(0)
		start = time.Now()
		resp, err = relDo(t, tr, "GET", url+"/slowbody", nil)
		relReadOK(t, resp, err, "done")
		if d := time.Since(start); d < 150*time.Millisecond {
			t.Errorf("the slow body came in %v, before the server wrote it", d)
		}

		base.CloseIdleConnections()
		synctest.Wait()
		if open := n.open.Load(); open != 0 {
			t.Errorf("%d server connections still open", open)
		}
	})
}

// TestFaultServerIgnoresBody: a server that answers 503 without reading a
// large request body, through net/http and by hand (closing with the body
// unread, which resets the connection under the client's writes).
func TestFaultServerIgnoresBody(t *testing.T) {
	relNoLeaks(t)
	payload := bytes.Repeat([]byte("0123456789abcdef"), 48<<10) // 768 KiB
	sum := sha256.Sum256(payload)
	want := hex.EncodeToString(sum[:])

	t.Run("net/http", func(t *testing.T) {
		var reqs atomic.Int32
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if reqs.Add(1) <= 2 {
				w.WriteHeader(503)
				return
			}
			h := sha256.New()
			io.Copy(h, r.Body)
			io.WriteString(w, hex.EncodeToString(h.Sum(nil)))
		})
		ln := relListen(t, "127.0.0.1:0")
		srv := httptest.NewUnstartedServer(h)
		srv.Listener.Close()
		srv.Listener = ln
		srv.Start()
		defer srv.Close()
		tr, base := relClient()
		// Hide the length and GetBody: the Transport buffers the body itself.
		resp, err := relDo(t, tr, "PUT", srv.URL, io.NopCloser(bytes.NewReader(payload)))
		relReadOK(t, resp, err, want)
		if reqs.Load() != 3 {
			t.Errorf("server saw %d requests, want 3", reqs.Load())
		}
		relWaitConns(t, ln, base)
	})
	t.Run("raw", func(t *testing.T) {
		srv := relStartRaw(t, func(n int, req *http.Request, br *bufio.Reader, c net.Conn) bool {
			if n <= 2 {
				io.WriteString(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
				c.Close() // with the body unread: the kernel answers the client with an RST
				return false
			}
			h := sha256.New()
			io.Copy(h, req.Body)
			return relOK(req, c, hex.EncodeToString(h.Sum(nil)))
		})
		tr, base := relClient()
		reasons := relReasons(tr)
		resp, err := relDo(t, tr, "PUT", srv.url, bytes.NewReader(payload))
		relReadOK(t, resp, err, want)
		if srv.reqs.Load() != 3 || len(reasons()) != 2 {
			t.Errorf("server saw %d requests, retries %q; want 3 requests", srv.reqs.Load(), reasons())
		}
		relWaitConns(t, srv.ln, base)
	})
}

// TestFaultRefusedThenUp: connection refused is retried for every method,
// and the server coming up on the same port gets the POST exactly once.
func TestFaultRefusedThenUp(t *testing.T) {
	relNoLeaks(t)
	probe := relListen(t, "127.0.0.1:0")
	addr := probe.Addr().String()
	probe.Close()

	var posts atomic.Int32
	var got atomic.Value
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got.Store(string(b))
		posts.Add(1)
		io.WriteString(w, "created")
	}))
	srv.Listener.Close()
	var ln *relListener
	defer func() {
		if ln != nil {
			srv.Close()
		}
	}()

	tr, base := relClient()
	tr.Policy.MaxRetries = 10
	var reasons []string
	tr.OnRetry = func(e RetryEvent) {
		reasons = append(reasons, e.Reason)
		if len(reasons) == 3 { // the server comes up during the third wait
			ln = relListen(t, addr)
			srv.Listener = ln
			srv.Start()
		}
	}
	resp, err := relDo(t, tr, "POST", "http://"+addr+"/", strings.NewReader("order-1"))
	relReadOK(t, resp, err, "created")
	if len(reasons) != 3 || reasons[0] != "connection refused" || reasons[2] != "connection refused" {
		t.Errorf("retry reasons %q, want three connection refused", reasons)
	}
	if posts.Load() != 1 || got.Load() != "order-1" {
		t.Errorf("server executed the POST %d times with body %q; want once with order-1", posts.Load(), got.Load())
	}
	relWaitConns(t, ln, base)
}

// TestFaultHugeErrorBody: a 100 MB body on a retried 503 is not downloaded:
// the drain stops after a few KiB and the connection is closed instead.
func TestFaultHugeErrorBody(t *testing.T) {
	relNoLeaks(t)
	const huge = 100 << 20
	for _, chunked := range []bool{false, true} {
		t.Run(fmt.Sprintf("chunked=%v", chunked), func(t *testing.T) {
			var reqs atomic.Int32
			var written atomic.Int64
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if reqs.Add(1) > 1 {
					io.WriteString(w, "fine")
					return
				}
				if !chunked {
					w.Header().Set("Content-Length", fmt.Sprint(huge))
				}
				w.WriteHeader(503)
				chunk := make([]byte, 32<<10)
				for written.Load() < huge {
					n, err := w.Write(chunk)
					written.Add(int64(n))
					if err != nil {
						return
					}
				}
			})
			ln := relListen(t, "127.0.0.1:0")
			srv := httptest.NewUnstartedServer(h)
			srv.Listener.Close()
			srv.Listener = ln
			srv.Start()
			defer srv.Close()
			tr, base := relClient()
			start := time.Now()
			resp, err := relDo(t, tr, "GET", srv.URL, nil)
			relReadOK(t, resp, err, "fine")
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("took %v", d)
			}
			relWaitConns(t, ln, base) // the handler's writes fail once the connection is gone
			if w := written.Load(); w >= huge/4 {
				t.Errorf("server wrote %d MB of the error body: the client read it", w>>20)
			}
			if ln.total.Load() != 2 {
				t.Errorf("%d connections; want 2: the first closed, not drained to the end", ln.total.Load())
			}
		})
	}
}

// HTTP/2 by hand: just enough framing to send SETTINGS, GOAWAY, RST_STREAM
// and a response of a status and a body.

const (
	relH2Data     = 0x0
	relH2Headers  = 0x1
	relH2Rst      = 0x3
	relH2Settings = 0x4
	relH2GoAway   = 0x7
	relH2Window   = 0x8

	relH2EndStream  = 0x1
	relH2EndHeaders = 0x4
	relH2Ack        = 0x1
)

func relH2Write(w io.Writer, typ, flags byte, stream uint32, payload []byte) error {
	var hdr [9]byte
	hdr[0], hdr[1], hdr[2] = byte(len(payload)>>16), byte(len(payload)>>8), byte(len(payload))
	hdr[3], hdr[4] = typ, flags
	binary.BigEndian.PutUint32(hdr[5:], stream&0x7fffffff)
	if _, err := w.Write(hdr[:]); err != nil {
		return err
	}
	_, err := w.Write(payload)
	return err
}

// relH2Respond sends status 200 (HPACK static index 8) and body on stream.
func relH2Respond(w io.Writer, stream uint32, body string) error {
	if err := relH2Write(w, relH2Headers, relH2EndHeaders, stream, []byte{0x88}); err != nil {
		return err
	}
	return relH2Write(w, relH2Data, relH2EndStream, stream, []byte(body))
}

func relU32s(vs ...uint32) []byte {
	b := make([]byte, 4*len(vs))
	for i, v := range vs {
		binary.BigEndian.PutUint32(b[4*i:], v)
	}
	return b
}

// relH2Server serves HTTP/2 over TLS by hand: onStream gets each request
// stream's number, counted over all connections, and answers it on w; it
// returns false when the connection is to be closed.
type relH2Server struct {
	ln      *relListener
	url     string
	client  *http.Transport
	streams atomic.Int32
	wg      sync.WaitGroup
}

// relTLS returns a self-signed ECDSA certificate for 127.0.0.1, cheap to
// handshake with under the race detector, and an HTTP/2 client that
// trusts it.
func relTLS(t *testing.T) ([]tls.Certificate, *http.Transport) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "httpretry test"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}},
		&http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}
}

func relStartH2(t *testing.T, onStream func(n int, stream uint32, w io.Writer) bool) *relH2Server {
	t.Helper()
	return relStartH2With(t, func(s *relH2Server, c net.Conn) { s.serveConn(c, onStream) })
}

// relStartH2With is relStartH2 with a handler of its own for each
// connection, after the TLS handshake.
func relStartH2With(t *testing.T, handle func(*relH2Server, net.Conn)) *relH2Server {
	t.Helper()
	cert, client := relTLS(t)
	s := &relH2Server{ln: relListen(t, "127.0.0.1:0"), client: client}
	s.url = "https://" + s.ln.Addr().String()
	tl := tls.NewListener(s.ln, &tls.Config{Certificates: cert, NextProtos: []string{"h2"}})
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := tl.Accept()
			if err != nil {
				return
			}
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				handle(s, c)
			}()
		}
	}()
	t.Cleanup(func() {
		s.ln.Close()
		s.ln.closeAll()
		s.wg.Wait()
		client.CloseIdleConnections()
	})
	return s
}

func (s *relH2Server) serveConn(c net.Conn, onStream func(int, uint32, io.Writer) bool) {
	c.SetDeadline(time.Now().Add(5 * time.Second))
	preface := make([]byte, 24)
	if _, err := io.ReadFull(c, preface); err != nil || string(preface) != "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" {
		return
	}
	if relH2Write(c, relH2Settings, 0, 0, nil) != nil {
		return
	}
	var hdr [9]byte
	for {
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return
		}
		n := int(hdr[0])<<16 | int(hdr[1])<<8 | int(hdr[2])
		typ, flags := hdr[3], hdr[4]
		stream := binary.BigEndian.Uint32(hdr[5:]) & 0x7fffffff
		if _, err := io.CopyN(io.Discard, c, int64(n)); err != nil {
			return
		}
		switch {
		case typ == relH2Settings && flags&relH2Ack == 0:
			if relH2Write(c, relH2Settings, relH2Ack, 0, nil) != nil {
				return
			}
		case typ == relH2Headers:
			if !onStream(int(s.streams.Add(1)), stream, c) {
				return
			}
		}
	}
}

func TestFaultHTTP2GoAway(t *testing.T) {
	relNoLeaks(t)
	// GOAWAY naming the stream as possibly processed, then the connection
	// closes: net/http returns its GoAwayError, which only httpretry retries,
	// and only for a replayable request.
	srv := relStartH2(t, func(n int, stream uint32, w io.Writer) bool {
		if n == 1 || n == 3 {
			relH2Write(w, relH2GoAway, 0, 0, relU32s(stream, 2 /* INTERNAL_ERROR */))
			return false
		}
		return relH2Respond(w, stream, "h2 ok") == nil
	})
	tr := &Transport{Base: srv.client, Policy: Policy{MaxRetries: 2, BaseDelay: time.Millisecond, Jitter: JitterNone}}
	reasons := relReasons(tr)
	resp, err := relDo(t, tr, "GET", srv.url, nil)
	relReadOK(t, resp, err, "h2 ok")
	if resp.ProtoMajor != 2 {
		t.Errorf("protocol %s, want HTTP/2", resp.Proto)
	}
	if got := reasons(); len(got) != 1 || got[0] != "http2 GOAWAY" {
		t.Errorf("retry reasons %q, want one http2 GOAWAY", got)
	}

	// Stream 3 is named processed by the GOAWAY: a POST without a key is
	// returned as the error. It has no body: the server closes the
	// connection after the GOAWAY, and a body written after the close
	// comes back as a broken pipe instead (see the next test).
	_, err = relDo(t, tr, "POST", srv.url, nil)
	var e *Error
	if !errors.As(err, &e) || e.Attempts != 1 || e.Reason != StopNotReplayable || !isGoAway(err) {
		t.Fatalf("POST after GOAWAY: %v; want a not-replayable *Error holding the GoAwayError", err)
	}
	if srv.streams.Load() != 3 {
		t.Errorf("server saw %d streams, want 3", srv.streams.Load())
	}
	relWaitConns(t, srv.ln, srv.client)
}

func TestFaultHTTP2GoAwayOnANewConnection(t *testing.T) {
	relNoLeaks(t)
	// A GOAWAY with an error code that names no stream processed, sent for
	// a new connection's first stream: net/http does not retry that stream
	// itself, and gives it an error of no type. It was never processed, so
	// even a POST without a key is retried, after its backoff. The server
	// leaves the connection to the client to close: closed at once, the
	// POST's body was now and then written into it after the close, and
	// came back as a broken pipe (1 run of make test under load).
	srv := relStartH2(t, func(n int, stream uint32, w io.Writer) bool {
		if n%2 == 1 {
			relH2Write(w, relH2GoAway, 0, 0, relU32s(0, 0xb /* ENHANCE_YOUR_CALM */))
			return true
		}
		return relH2Respond(w, stream, "h2 ok") == nil
	})
	tr := &Transport{Base: srv.client, Policy: Policy{MaxRetries: 2, BaseDelay: time.Millisecond, Jitter: JitterNone}}
	reasons := relReasons(tr)
	for _, method := range []string{"GET", "POST"} {
		srv.client.CloseIdleConnections() // each on a new connection's first stream
		resp, err := relDo(t, tr, method, srv.url, strings.NewReader("x"))
		relReadOK(t, resp, err, "h2 ok")
	}
	if got := reasons(); len(got) != 2 || got[0] != "http2 GOAWAY" || got[1] != "http2 GOAWAY" {
		t.Errorf("retry reasons %q, want two http2 GOAWAY", got)
	}
	if srv.streams.Load() != 4 {
		t.Errorf("server saw %d streams, want 4", srv.streams.Load())
	}
	relWaitConns(t, srv.ln, srv.client)
}

func TestFaultHTTP2RefusedStream(t *testing.T) {
	relNoLeaks(t)
	// REFUSED_STREAM before any response: the stream was not processed.
	// net/http's HTTP/2 transport replays a PUT itself, through the GetBody
	// the Transport gives the clones of a request that may be replayed. A
	// POST without a key gets none, as net/http would not replay it after
	// other resets; net/http gives it an error of no type, which the
	// Transport recognizes as never sent and retries itself.
	headersIn := make(chan struct{}) // the client has the fifth stream's response
	srv := relStartH2(t, func(n int, stream uint32, w io.Writer) bool {
		switch n {
		case 1, 3:
			return relH2Write(w, relH2Rst, 0, stream, relU32s(h2RefusedStream)) == nil
		case 5: // headers then a refused stream in the middle of the body
			if relH2Write(w, relH2Headers, relH2EndHeaders, stream, []byte{0x88}) != nil ||
				relH2Write(w, relH2Data, 0, stream, []byte("par")) != nil {
				return false
			}
			<-headersIn // a reset before RoundTrip took the headers would fail RoundTrip instead
			return relH2Write(w, relH2Rst, 0, stream, relU32s(h2RefusedStream)) == nil
		}
		return relH2Respond(w, stream, "h2 ok") == nil
	})
	var headersOnce sync.Once
	t.Cleanup(func() { headersOnce.Do(func() { close(headersIn) }) }) // before the server's cleanup, registered earlier, waits for it
	tr := &Transport{Base: srv.client, Policy: Policy{MaxRetries: 2, BaseDelay: time.Millisecond, Jitter: JitterNone}}
	reasons := relReasons(tr)
	resp, err := relDo(t, tr, "PUT", srv.url, io.NopCloser(strings.NewReader("buffered")))
	relReadOK(t, resp, err, "h2 ok")
	if got := reasons(); len(got) != 0 {
		t.Errorf("retry reasons %q: the base transport should have replayed the refused PUT", got)
	}
	resp, err = relDo(t, tr, "POST", srv.url, io.NopCloser(strings.NewReader("buffered")))
	relReadOK(t, resp, err, "h2 ok")
	if got := reasons(); len(got) != 1 || got[0] != "http2 stream refused" {
		t.Errorf("retry reasons %q, want one http2 stream refused: the Transport's own retry of the POST", got)
	}
	if srv.streams.Load() != 4 {
		t.Errorf("server saw %d streams, want 4", srv.streams.Load())
	}

	// The real net/http stream error, read from a body: httpretry's
	// classifier recognizes it as REFUSED_STREAM, never sent.
	resp, err = relDo(t, tr, "GET", srv.url, nil)
	headersOnce.Do(func() { close(headersIn) })
	if err != nil {
		t.Fatal(err)
	}
	b, rerr := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "par" || rerr == nil {
		t.Fatalf("body %q, error %v; want the prefix and a stream error", b, rerr)
	}
	if retry, reason := classifyError(rerr); !retry || reason != "http2 stream refused" || !neverSent(rerr) {
		t.Errorf("classifyError(%v) = %v %q, neverSent %v; want a refused stream", rerr, retry, reason, neverSent(rerr))
	}
	relWaitConns(t, srv.ln, srv.client)
}

// TestFaultHTTP2ResetPostIsSentOnce: a reset with PROTOCOL_ERROR does not
// prove the stream unprocessed, yet net/http's HTTP/2 transport replays a
// request that has a GetBody after it. A POST without a key and without
// GetBody reached the server twice through the Transport, whose clone had
// one over the buffered body (a review's find); plain net/http sends it
// once, and so does the Transport now. A PUT is still replayed.
func TestFaultHTTP2ResetPostIsSentOnce(t *testing.T) {
	relNoLeaks(t)
	reset := map[int]bool{1: true, 2: true, 3: true}
	srv := relStartH2(t, func(n int, stream uint32, w io.Writer) bool {
		if reset[n] {
			return relH2Write(w, relH2Rst, 0, stream, relU32s(0x1 /* PROTOCOL_ERROR */)) == nil
		}
		return relH2Respond(w, stream, "h2 ok") == nil
	})
	if _, err := relDo(t, srv.client, "POST", srv.url, io.NopCloser(strings.NewReader("amount=100"))); err == nil || srv.streams.Load() != 1 {
		t.Fatalf("plain net/http: error %v, %d streams; want an error after one (the premise)", err, srv.streams.Load())
	}
	tr := &Transport{Base: srv.client, Policy: Policy{MaxRetries: 2, BaseDelay: time.Millisecond, Jitter: JitterNone}}
	reasons := relReasons(tr)
	if _, err := relDo(t, tr, "POST", srv.url, io.NopCloser(strings.NewReader("amount=100"))); err == nil || srv.streams.Load() != 2 {
		t.Errorf("POST without a key: error %v, the server saw it %d times; want an error after once", err, srv.streams.Load()-1)
	}
	resp, err := relDo(t, tr, "PUT", srv.url, io.NopCloser(strings.NewReader("state")))
	relReadOK(t, resp, err, "h2 ok")
	if got := reasons(); len(got) != 0 || srv.streams.Load() != 4 {
		t.Errorf("PUT: retry reasons %q, %d streams in all; want the base transport's own replay, 4", got, srv.streams.Load())
	}
	relWaitConns(t, srv.ln, srv.client)
}

// TestFaultHTTP2InternalResetIsRetriedAsAnEOF: a server whose handler
// fails before answering (a panic, its WriteTimeout) resets the HTTP/2
// stream with INTERNAL_ERROR, where over HTTP/1 it closes the connection.
// The GET was retried over HTTP/1 (an EOF before a response) and given up
// over HTTP/2, where go-retryablehttp and failsafe retry both (a review's
// find). As the EOF, it is retried only for a request that may be
// replayed: a keyless POST is sent once.
func TestFaultHTTP2InternalResetIsRetriedAsAnEOF(t *testing.T) {
	relNoLeaks(t)
	reset := map[int]bool{1: true, 3: true}
	srv := relStartH2(t, func(n int, stream uint32, w io.Writer) bool {
		if reset[n] {
			return relH2Write(w, relH2Rst, 0, stream, relU32s(0x2 /* INTERNAL_ERROR */)) == nil
		}
		return relH2Respond(w, stream, "h2 ok") == nil
	})
	tr := &Transport{Base: srv.client, Policy: Policy{MaxRetries: 2, BaseDelay: time.Millisecond, Jitter: JitterNone}}
	reasons := relReasons(tr)
	resp, err := relDo(t, tr, "GET", srv.url, nil)
	relReadOK(t, resp, err, "h2 ok")
	if got := reasons(); len(got) != 1 || got[0] != "http2 stream reset" {
		t.Errorf("GET: retry reasons %q, want one http2 stream reset", got)
	}
	_, err = relDo(t, tr, "POST", srv.url, io.NopCloser(strings.NewReader("amount=100")))
	var e *Error
	if !errors.As(err, &e) || e.Reason != StopNotReplayable || srv.streams.Load() != 3 {
		t.Errorf("POST without a key: %v after %d streams in all; want StopNotReplayable after once (3)", err, srv.streams.Load())
	}
	relWaitConns(t, srv.ln, srv.client)
}

// TestFaultHTTP2GracefulGoAwayPostIsRetried: a GOAWAY without an error
// code that leaves a stream unprocessed: net/http cannot replay a POST
// without GetBody, and says so in an error of no type, which the
// Transport recognizes as never sent and retries itself.
func TestFaultHTTP2GracefulGoAwayPostIsRetried(t *testing.T) {
	relNoLeaks(t)
	srv := relStartH2(t, func(n int, stream uint32, w io.Writer) bool {
		if n == 1 {
			relH2Write(w, relH2GoAway, 0, 0, relU32s(0, 0 /* NO_ERROR */))
			return false
		}
		return relH2Respond(w, stream, "h2 ok") == nil
	})
	tr := &Transport{Base: srv.client, Policy: Policy{MaxRetries: 2, BaseDelay: time.Millisecond, Jitter: JitterNone}}
	reasons := relReasons(tr)
	resp, err := relDo(t, tr, "POST", srv.url, io.NopCloser(strings.NewReader("x")))
	relReadOK(t, resp, err, "h2 ok")
	if got := reasons(); len(got) != 1 || got[0] != "http2 GOAWAY" || srv.streams.Load() != 2 {
		t.Errorf("retry reasons %q, %d streams; want one http2 GOAWAY, 2", got, srv.streams.Load())
	}
	relWaitConns(t, srv.ln, srv.client)
}

// TestFaultAttemptTimeoutKeepsConnections: attempts cut by AttemptTimeout
// leave no connection behind once the client's idle ones are closed.
func TestFaultAttemptTimeoutKeepsConnections(t *testing.T) {
	relNoLeaks(t)
	srv := relStartRaw(t, func(n int, req *http.Request, br *bufio.Reader, c net.Conn) bool {
		io.Copy(io.Discard, req.Body)
		if n <= 3 {
			c.SetReadDeadline(time.Now().Add(time.Second))
			br.ReadByte() // wait for the client to give up on this connection
			return false
		}
		return relOK(req, c, "late")
	})
	tr, base := relClient()
	tr.AttemptTimeout = 30 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.url, nil)
	resp, err := tr.RoundTrip(req)
	relReadOK(t, resp, err, "late")
	if srv.ln.total.Load() != 4 {
		t.Errorf("%d connections, want 4 (each timed-out attempt closes its own)", srv.ln.total.Load())
	}
	relWaitConns(t, srv.ln, base)
}

// TestFaultStalledErrorBody: a retried 503 whose small body stops coming
// must not hold the request in the drain: the retry goes at once, over a
// new connection, long before the caller's deadline.
func TestFaultStalledErrorBody(t *testing.T) {
	relNoLeaks(t)
	check := func(t *testing.T, tr *Transport, url string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
		start := time.Now()
		resp, err := tr.RoundTrip(req)
		relReadOK(t, resp, err, "ok")
		if d := time.Since(start); d > time.Second {
			t.Errorf("took %v: the drain of the stalled body held the retry", d)
		}
	}
	t.Run("HTTP/1.1", func(t *testing.T) {
		srv := relStartRaw(t, func(n int, req *http.Request, br *bufio.Reader, c net.Conn) bool {
			io.Copy(io.Discard, req.Body)
			if n == 1 {
				io.WriteString(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 100\r\n\r\nabc")
				c.SetReadDeadline(time.Now().Add(10 * time.Second))
				br.ReadByte() // the rest never comes; wait for the client to hang up
				return false
			}
			return relOK(req, c, "ok")
		})
		tr, base := relClient()
		check(t, tr, srv.url)
		relWaitConns(t, srv.ln, base)
	})
	t.Run("HTTP/2", func(t *testing.T) {
		srv := relStartH2(t, func(n int, stream uint32, w io.Writer) bool {
			if n == 1 {
				// :status 503 as a literal with the indexed name :status.
				return relH2Write(w, relH2Headers, relH2EndHeaders, stream, []byte{0x08, 3, '5', '0', '3'}) == nil &&
					relH2Write(w, relH2Data, 0, stream, []byte("abc")) == nil
			}
			return relH2Respond(w, stream, "ok") == nil
		})
		tr := &Transport{Base: srv.client, Policy: Policy{MaxRetries: 2, BaseDelay: time.Millisecond, Jitter: JitterNone}}
		check(t, tr, srv.url)
		relWaitConns(t, srv.ln, srv.client)
	})
}

// TestFaultResetDuringUpload: a server that resets the connection while a
// large request body is still being written. net/http reports the reset as
// ECONNRESET, EPIPE or "use of closed network connection", depending on
// which of its reader and writer sees it first; all three are retried, and
// the upload arrives whole.
func TestFaultResetDuringUpload(t *testing.T) {
	relNoLeaks(t)
	payload := bytes.Repeat([]byte("0123456789abcdef"), 256<<10) // 4 MiB
	sum := sha256.Sum256(payload)
	want := hex.EncodeToString(sum[:])
	srv := relStartRaw(t, func(n int, req *http.Request, br *bufio.Reader, c net.Conn) bool {
		if n%3 != 0 {
			io.CopyN(io.Discard, req.Body, 64<<10) // part of the body, then a reset
			relReset(c)
			return false
		}
		h := sha256.New()
		io.Copy(h, req.Body)
		return relOK(req, c, hex.EncodeToString(h.Sum(nil)))
	})
	tr, base := relClient()
	tr.MaxBufferedBody = 8 << 20
	reasons := relReasons(tr)
	for range 10 {
		resp, err := relDo(t, tr, "PUT", srv.url, io.NopCloser(bytes.NewReader(payload)))
		relReadOK(t, resp, err, want)
	}
	if got := len(reasons()); got != 20 {
		t.Errorf("%d retries for 10 uploads each reset twice: %q", got, reasons())
	}
	t.Logf("the resets as the client saw them: %q", reasons())
	relWaitConns(t, srv.ln, base)
}

// cutShort reads n bytes, then fails as a truncated stream does.
type cutShort struct{ n int }

func (r *cutShort) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, io.ErrUnexpectedEOF
	}
	k := min(r.n, len(p))
	clear(p[:k])
	r.n -= k
	return k, nil
}

// TestFaultGetBodyCutShortIsNotRetriedAsAConnectionFailure: net/http
// returns a request body's read error as the attempt's, and a body from
// GetBody cut short, io.ErrUnexpectedEOF, passed for a connection closed
// before a response: the PUT was sent, cut short, once per retry (a
// review's find). The first attempt's body is the caller's, sent as it is,
// so that one retry goes; the retry's failure stops it with StopRewind.
func TestFaultGetBodyCutShortIsNotRetriedAsAConnectionFailure(t *testing.T) {
	var served atomic.Int32
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		io.Copy(io.Discard, r.Body)
	}))
	defer s.Close()
	tr, base := relClient()
	defer base.CloseIdleConnections()
	tr.Policy.MaxRetries = 5
	reasons := relReasons(tr)
	var stop StopReason
	tr.OnGiveUp = func(e RetryEvent) { stop = e.Stop }
	body := func() io.ReadCloser { return io.NopCloser(&cutShort{n: 3000}) }
	req, _ := http.NewRequest("PUT", s.URL, body())
	req.GetBody = func() (io.ReadCloser, error) { return body(), nil }
	req.ContentLength = 5000
	resp, err := tr.RoundTrip(req)
	if err == nil {
		resp.Body.Close()
		t.Fatal("a body cut short was sent whole")
	}
	var e *Error
	if !errors.As(err, &e) || e.Reason != StopRewind || e.Attempts != 2 || stop != StopRewind || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("got %v (OnGiveUp's stop %v); want an *Error after 2 attempts, StopRewind, wrapping io.ErrUnexpectedEOF", err, stop)
	}
	if n := served.Load(); n > 2 || len(reasons()) != 1 {
		t.Errorf("the server saw %d requests, OnRetry %q; want at most 2, and one retry", n, reasons())
	}
}

// endsAtClose gives n bytes, then blocks until it is closed and fails as a
// gzip reader does when its source is closed under it.
type endsAtClose struct {
	n      int
	closed chan struct{}
	once   sync.Once
}

func (r *endsAtClose) Read(p []byte) (int, error) {
	if r.n > 0 {
		k := min(r.n, len(p))
		clear(p[:k])
		r.n -= k
		return k, nil
	}
	<-r.closed
	return 0, io.ErrUnexpectedEOF
}

func (r *endsAtClose) Close() error { r.once.Do(func() { close(r.closed) }); return nil }

// TestFaultHTTP2ConnectionLostMidUploadIsNotTheBodys: HTTP/2 returns
// io.ErrUnexpectedEOF for a connection lost mid-upload and closes the
// body, whose own io.ErrUnexpectedEOF it ignores; matched by value, that
// was taken for the body's failure and the request stopped with
// StopRewind, where the next attempt succeeds (a review's find).
func TestFaultHTTP2ConnectionLostMidUploadIsNotTheBodys(t *testing.T) {
	var n atomic.Int32
	cut := make(chan struct{}, 1)
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch n.Add(1) {
		case 1:
			io.Copy(io.Discard, r.Body)
			w.WriteHeader(503)
		case 2:
			io.ReadFull(r.Body, make([]byte, 100))
			cut <- struct{}{}
			<-r.Context().Done()
		default:
			io.Copy(io.Discard, r.Body)
		}
	}))
	s.EnableHTTP2 = true
	s.StartTLS()
	defer s.Close()
	go func() { <-cut; s.CloseClientConnections() }() // the connection is lost mid-upload
	base := s.Client().Transport.(*http.Transport).Clone()
	defer base.CloseIdleConnections()
	var stop StopReason
	tr := &Transport{Base: base, Policy: Policy{MaxRetries: 3, BaseDelay: -1}, OnGiveUp: func(e RetryEvent) { stop = e.Stop }}
	var gets atomic.Int32
	body := func() io.ReadCloser {
		if gets.Add(1) == 2 {
			return &endsAtClose{n: 100, closed: make(chan struct{})}
		}
		return io.NopCloser(bytes.NewReader(make([]byte, 1000)))
	}
	req, _ := http.NewRequest("PUT", s.URL, body())
	req.GetBody = func() (io.ReadCloser, error) { return body(), nil }
	req.ContentLength = 1000
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("after %d requests at the server: %v (stop %v); want the third attempt's 200", n.Load(), err, stop)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("status %d, want 200", resp.StatusCode)
	}
}

// detailedError is an error type that == cannot compare when its detail
// holds a slice.
type detailedError struct{ detail any }

func (e detailedError) Error() string { return fmt.Sprint("bad chunk: ", e.detail) }

// TestFaultBodyErrorThatCannotBeComparedIsNoPanic: a retry's body error
// was matched with errors.Is, which compares with == and panics on an
// error value holding a slice (a review's find).
func TestFaultBodyErrorThatCannotBeComparedIsNoPanic(t *testing.T) {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) }))
	defer s.Close()
	tr, base := relClient()
	defer base.CloseIdleConnections()
	tr.Classifier = func(_ *http.Request, resp *http.Response, err error) (bool, string) { return err != nil, "any error" }
	body := func() io.ReadCloser {
		return io.NopCloser(io.MultiReader(bytes.NewReader(make([]byte, 100)), iotest.ErrReader(detailedError{detail: []string{"a"}})))
	}
	req, _ := http.NewRequest("PUT", s.URL, body())
	req.GetBody = func() (io.ReadCloser, error) { return body(), nil }
	req.ContentLength = 1000
	var err error
	if p := func() (p any) {
		defer func() { p = recover() }()
		_, err = tr.RoundTrip(req)
		return nil
	}(); p != nil {
		t.Fatalf("RoundTrip panicked: %v", p)
	}
	var e *Error
	if !errors.As(err, &e) || e.Reason != StopRewind || e.Attempts != 2 {
		t.Errorf("got %v; want an *Error after 2 attempts with StopRewind", err)
	}
}

// dropFirstOfTwo completes the TLS handshake (when there is one) of every
// other new connection, the first included, and closes it at once.
type dropFirstOfTwo struct {
	net.Listener
	n atomic.Int32
}

func (l *dropFirstOfTwo) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil || l.n.Add(1)%2 == 0 {
			return c, err
		}
		if tc, ok := c.(*tls.Conn); ok {
			tc.SetDeadline(time.Now().Add(5 * time.Second))
			tc.Handshake()
		}
		c.Close()
	}
}

// TestFaultNewConnectionClosedBeforeARequestIsRetried: a server that
// closes a new connection before any request reaches net/http's callers
// as an EOF, or, whichever of its goroutines sees it first, as "http:
// server closed idle connection" (retried by net/http only on a reused
// connection) or HTTP/2's "client conn could not be established": those
// two were not retried (a review's find). The HTTP/2 one proves the
// request unsent, so a keyless POST is retried too, and none reaches the
// handler twice. Which error comes is a race; the test holds either way.
func TestFaultNewConnectionClosedBeforeARequestIsRetried(t *testing.T) {
	relNoLeaks(t)
	for _, proto := range []string{"h2", "http/1.1 over TLS", "http/1.1"} {
		t.Run(proto, func(t *testing.T) {
			cert, base := relTLS(t)
			defer base.CloseIdleConnections()
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			scheme, inner := "https", ln
			switch proto {
			case "h2":
				inner = tls.NewListener(ln, &tls.Config{Certificates: cert, NextProtos: []string{"h2"}})
			case "http/1.1 over TLS":
				inner = tls.NewListener(ln, &tls.Config{Certificates: cert, NextProtos: []string{"http/1.1"}})
			default:
				scheme = "http"
			}
			var mu sync.Mutex
			seen := map[string]int{}
			srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				mu.Lock()
				seen[r.Method+" "+string(b)]++
				mu.Unlock()
			}), ErrorLog: log.New(io.Discard, "", 0)}
			go srv.Serve(&dropFirstOfTwo{Listener: inner})
			defer srv.Close()
			tr, _ := relClient()
			tr.Base = base
			for i := range 10 {
				method := "GET"
				if proto == "h2" && i%2 == 1 {
					method = "POST"
				}
				base.CloseIdleConnections() // a new connection each time, every other one dropped
				req, _ := http.NewRequest(method, scheme+"://"+ln.Addr().String(), strings.NewReader(fmt.Sprint(i)))
				req.GetBody = nil
				resp, err := tr.RoundTrip(req)
				if err != nil {
					var e *Error
					if method == "GET" || errors.As(err, &e) && e.Reason != StopNotReplayable {
						t.Errorf("%s %d: %v", method, i, err)
					}
					continue
				}
				resp.Body.Close()
			}
			for k, n := range seen {
				if n > 1 {
					t.Errorf("%s reached the handler %d times", k, n)
				}
			}
		})
	}
}

// TestFaultShort503ComesBackAsItCameWhenTheDeadlineCutsTheRetry: a 503
// that declares 100 bytes, sends 3 and closes, then a retry that hangs
// until the deadline. Retries run out, the 503 came back as it came, its
// 3 bytes then io.ErrUnexpectedEOF; the deadline cutting the retry, it
// came back as an *Error that called it too long or too slow, which it
// was not (a review's find).
func TestFaultShort503ComesBackAsItCameWhenTheDeadlineCutsTheRetry(t *testing.T) {
	relNoLeaks(t)
	srv := relStartRaw(t, func(n int, req *http.Request, br *bufio.Reader, c net.Conn) bool {
		io.Copy(io.Discard, req.Body)
		if n == 1 {
			io.WriteString(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 100\r\n\r\nabc")
			return false
		}
		c.SetReadDeadline(time.Now().Add(3 * time.Second)) // the retry hangs until the client's deadline
		br.ReadByte()
		return false
	})
	tr, base := relClient()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.url, nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("got %v; want the 503 before the cut retry", err)
	}
	b, rerr := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || string(b) != "abc" || !errors.Is(rerr, io.ErrUnexpectedEOF) {
		t.Errorf("status %d, body %q, read error %v; want 503, \"abc\", io.ErrUnexpectedEOF", resp.StatusCode, b, rerr)
	}
	relWaitConns(t, srv.ln, base)
}
