package bench

// Side-by-side correctness checks of httpretry and its three peers, each
// built by systems.go (the configuration the comparison uses), against
// loopback servers: the README's "Beside the others" table. Each test
// asserts what httpretry promises in README.md; a failure of httpretry is
// a test failure, a peer's is logged as "PEER <name>: ..." (set
// PEER_STRICT=1 to make those failures too; go test -v -run TestPeer
// shows them). Times are bounded loosely, for a busy machine: they tell a
// wait not started from one waited out, never a speed.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/httpretry/httpretry"
)

// reviewParams keeps every test short: 3 retries, waits of 20-100 ms.
var reviewParams = Params{MaxRetries: 3, BaseDelay: 20 * time.Millisecond, MaxDelay: 100 * time.Millisecond}

func reviewSystems(t *testing.T) []System {
	s, ok := Lookup([]string{"httpretry", "retryablehttp", "failsafe", "rehttp"})
	if !ok {
		t.Fatal("lookup")
	}
	return s
}

// expect fails the test for httpretry and logs for a peer.
func expect(t *testing.T, sys string, ok bool, format string, args ...any) {
	t.Helper()
	if ok {
		return
	}
	msg := fmt.Sprintf(format, args...)
	if sys == "httpretry" || os.Getenv("PEER_STRICT") != "" {
		t.Errorf("%s: %s", sys, msg)
	} else {
		t.Logf("PEER %s: %s", sys, msg)
	}
}

// recServer records every attempt: its body's hash and length, its
// headers, its arrival time; answer picks the reply of attempt n (0-based).
type recServer struct {
	*httptest.Server
	mu       sync.Mutex
	attempts []recAttempt
	conns    atomic.Int64
}

type recAttempt struct {
	at      time.Time
	sum     [32]byte
	n       int64
	cl      int64
	te      []string
	proto   string
	readErr error
}

func newRecServer(t *testing.T, tlsH2 bool, answer func(n int, w http.ResponseWriter, r *http.Request)) *recServer {
	s := &recServer{}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := sha256.New()
		n, err := io.Copy(h, r.Body)
		var a recAttempt
		a.at, a.n, a.cl, a.te, a.proto, a.readErr = time.Now(), n, r.ContentLength, r.TransferEncoding, r.Proto, err
		copy(a.sum[:], h.Sum(nil))
		s.mu.Lock()
		i := len(s.attempts)
		s.attempts = append(s.attempts, a)
		s.mu.Unlock()
		answer(i, w, r)
	}))
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	if tlsH2 {
		s.EnableHTTP2 = true
		s.StartTLS()
	} else {
		s.Start()
	}
	t.Cleanup(s.Close)
	return s
}

func (s *recServer) got() []recAttempt {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]recAttempt(nil), s.attempts...)
}

// failFirst answers 503 (with a small body) to the first k attempts, then 200.
func failFirst(k int) func(int, http.ResponseWriter, *http.Request) {
	return func(n int, w http.ResponseWriter, _ *http.Request) {
		if n < k {
			http.Error(w, fmt.Sprintf("unavailable %d", n), http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok"))
	}
}

// client returns sys set up with p against srv, its connections closed
// when the test ends.
func client(t *testing.T, sys System, srv *recServer, p Params) http.RoundTripper {
	base := newBase(srv)
	t.Cleanup(base.CloseIdleConnections)
	return sys.New(base, p)
}

// retryAfterTheFirst sends a GET through sys to a server that answers its
// first attempt 503 with the Retry-After that header gives, and later ones
// 200; it returns how long after the time that Retry-After names the
// retry came, and false (the test failed) when none came.
func retryAfterTheFirst(t *testing.T, sys System, header func() (value string, names time.Time)) (late time.Duration, ok bool) {
	t.Helper()
	var mu sync.Mutex
	var named time.Time
	srv := newRecServer(t, false, func(n int, w http.ResponseWriter, _ *http.Request) {
		if n > 0 {
			w.Write([]byte("ok"))
			return
		}
		v, at := header()
		mu.Lock()
		named = at
		mu.Unlock()
		w.Header().Set("Retry-After", v)
		http.Error(w, "unavailable", http.StatusServiceUnavailable)
	})
	resp, err := get(client(t, sys, srv, reviewParams), srv.URL)
	readAll(resp)
	got := srv.got()
	if len(got) < 2 {
		expect(t, sys.Name, false, "%d attempts, %s %v", len(got), status(resp), err)
		return 0, false
	}
	mu.Lock()
	defer mu.Unlock()
	late = got[1].at.Sub(named)
	t.Logf("%s: the retry came %v after the time the Retry-After named", sys.Name, late.Round(time.Millisecond))
	return late, true
}

// getWithin sends a GET of url through rt with a deadline d away, and
// returns how long after the deadline it returned. The context lives
// until the test ends, so that a response's body stays readable.
func getWithin(t *testing.T, rt http.RoundTripper, url string, d time.Duration) (resp *http.Response, late time.Duration, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	deadline, _ := ctx.Deadline()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err = rt.RoundTrip(req)
	return resp, time.Since(deadline), err
}

// get sends a GET of url through rt.
func get(rt http.RoundTripper, url string) (*http.Response, error) {
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	return rt.RoundTrip(req)
}

func newBase(s *recServer) *http.Transport {
	b := &http.Transport{MaxIdleConnsPerHost: 4}
	if s.TLS != nil {
		b.TLSClientConfig = &tls.Config{RootCAs: s.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs}
		b.ForceAttemptHTTP2 = true
	}
	return b
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// plainReader hides every type that http.NewRequest recognises, and counts
// its Close calls.
type plainReader struct {
	r      io.Reader
	closed atomic.Int32
}

func (p *plainReader) Read(b []byte) (int, error) { return p.r.Read(b) }
func (p *plainReader) Close() error               { p.closed.Add(1); return nil }

func readAll(resp *http.Response) string {
	if resp == nil || resp.Body == nil {
		return ""
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return string(b) + " [read error: " + err.Error() + "]"
	}
	return string(b)
}

// TestPeerBodyReplay: every attempt of a retried request carries the
// caller's body byte for byte.
func TestPeerBodyReplay(t *testing.T) {
	t.Parallel()
	type bodyCase struct {
		name    string
		size    int
		header  string
		makeReq func(url string, payload []byte) (*http.Request, *plainReader)
		// wantAttempts is httpretry's promise; 0: retried to success (3).
		wantAttempts int
	}
	plain := func(method string) func(string, []byte) (*http.Request, *plainReader) {
		return func(url string, payload []byte) (*http.Request, *plainReader) {
			pr := &plainReader{r: bytes.NewReader(payload)}
			req, _ := http.NewRequest(method, url, pr)
			return req, pr
		}
	}
	getBody := func(url string, payload []byte) (*http.Request, *plainReader) {
		req, _ := http.NewRequest(http.MethodPut, url, bytes.NewReader(payload))
		return req, nil
	}
	pipe := func(url string, payload []byte) (*http.Request, *plainReader) {
		pr, pw := io.Pipe()
		go func() {
			for i := 0; i < len(payload); i += 7000 {
				pw.Write(payload[i:min(i+7000, len(payload))])
			}
			pw.Close()
		}()
		req, _ := http.NewRequest(http.MethodPut, url, pr)
		return req, nil
	}
	cases := []bodyCase{
		{name: "PUT plain 100KiB", size: 100 << 10, makeReq: plain(http.MethodPut)},
		{name: "PUT GetBody 2MiB", size: 2 << 20, makeReq: getBody},
		{name: "PUT pipe 200KiB", size: 200 << 10, makeReq: pipe},
		{name: "PUT pipe 3MiB (over MaxBufferedBody)", size: 3 << 20, makeReq: pipe, wantAttempts: 1},
		{name: "POST key plain 10KiB", size: 10 << 10, header: "Idempotency-Key", makeReq: plain(http.MethodPost)},
		{name: "PUT empty plain", size: 0, makeReq: plain(http.MethodPut)},
	}
	for _, c := range cases {
		for _, sys := range reviewSystems(t) {
			t.Run(c.name+"/"+sys.Name, func(t *testing.T) {
				t.Parallel()
				srv := newRecServer(t, false, failFirst(2))
				rt := client(t, sys, srv, reviewParams)
				payload := randomBytes(c.size)
				want := sha256.Sum256(payload)
				req, pr := c.makeReq(srv.URL, payload)
				if c.header != "" {
					req.Header.Set(c.header, "k1")
				}
				resp, err := rt.RoundTrip(req)
				body := readAll(resp)
				got := srv.got()
				wantN := 3
				if c.wantAttempts != 0 && sys.Name == "httpretry" {
					wantN = c.wantAttempts
				}
				expect(t, sys.Name, len(got) == wantN, "attempts %d, want %d (err %v)", len(got), wantN, err)
				for i, a := range got {
					expect(t, sys.Name, a.sum == want && a.n == int64(c.size) && a.readErr == nil,
						"attempt %d: %d bytes (want %d), same=%v, readErr=%v, CL=%d TE=%v", i+1, a.n, c.size, a.sum == want, a.readErr, a.cl, a.te)
				}
				if wantN == 3 {
					expect(t, sys.Name, err == nil && resp != nil && resp.StatusCode == 200 && body == "ok", "result %v %v %q", status(resp), err, body)
				}
				if pr != nil {
					expect(t, sys.Name, pr.closed.Load() >= 1, "the caller's request body was never closed (RoundTripper contract)")
				}
				t.Logf("%s: attempts %d, bytes %v, CL %v, result %s err=%v", sys.Name, len(got), sizes(got), cls(got), status(resp), err)
			})
		}
	}
}

func sizes(as []recAttempt) []int64 {
	var s []int64
	for _, a := range as {
		s = append(s, a.n)
	}
	return s
}

func cls(as []recAttempt) []int64 {
	var s []int64
	for _, a := range as {
		s = append(s, a.cl)
	}
	return s
}

func status(resp *http.Response) string {
	if resp == nil {
		return "<nil response>"
	}
	return resp.Status
}

// TestPeerKeylessPOST: a POST without an idempotency key is never sent
// twice: not after a 503, not after the connection is cut once the server
// read it.
func TestPeerKeylessPOST(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"503", "reset after read"} {
		for _, sys := range reviewSystems(t) {
			t.Run(mode+"/"+sys.Name, func(t *testing.T) {
				t.Parallel()
				srv := newRecServer(t, false, func(n int, w http.ResponseWriter, _ *http.Request) {
					if n > 0 {
						w.Write([]byte("ok"))
						return
					}
					if mode == "503" {
						http.Error(w, "unavailable", http.StatusServiceUnavailable)
						return
					}
					c, _, _ := w.(http.Hijacker).Hijack()
					c.(*net.TCPConn).SetLinger(0)
					c.Close()
				})
				rt := client(t, sys, srv, reviewParams)
				req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("charge the card"))
				resp, err := rt.RoundTrip(req)
				readAll(resp)
				got := srv.got()
				expect(t, sys.Name, len(got) == 1, "keyless POST sent %d times (result %s, err %v)", len(got), status(resp), err)
			})
		}
	}
}

// TestPeerRetryAfterForms: no retry goes before the time a Retry-After
// names, in each of its forms (RFC 9110 §10.2.3 and §5.6.7: a recipient
// must accept the two obsolete date forms too), and in the decimal
// seconds some servers send, which RFC 9110 does not define.
func TestPeerRetryAfterForms(t *testing.T) {
	t.Parallel()
	forms := []struct {
		name string
		fmt  func(at time.Time) string
	}{
		{"delta-seconds", nil},
		{"decimal seconds", func(time.Time) string { return "1.5" }},
		{"IMF-fixdate", func(at time.Time) string { return at.UTC().Format(http.TimeFormat) }},
		{"RFC 850", func(at time.Time) string { return at.UTC().Format("Monday, 02-Jan-06 15:04:05 GMT") }},
		{"asctime", func(at time.Time) string { return at.UTC().Format(time.ANSIC) }},
	}
	for _, f := range forms {
		for _, sys := range reviewSystems(t) {
			t.Run(f.name+"/"+sys.Name, func(t *testing.T) {
				t.Parallel()
				late, ok := retryAfterTheFirst(t, sys, func() (string, time.Time) {
					if f.fmt == nil {
						return "1", time.Now().Add(time.Second)
					}
					if f.name == "decimal seconds" {
						return f.fmt(time.Time{}), time.Now().Add(1500 * time.Millisecond)
					}
					at := time.Now().Truncate(time.Second).Add(2 * time.Second)
					return f.fmt(at), at
				})
				if ok {
					expect(t, sys.Name, late >= 0, "retry %v before the Retry-After time (%s)", (-late).Round(time.Millisecond), f.name)
				}
			})
		}
	}
}

// TestPeerHugeRetryAfter: a 429 asking for an hour comes back at once,
// as a response, after one attempt.
func TestPeerHugeRetryAfter(t *testing.T) {
	t.Parallel()
	for _, sys := range reviewSystems(t) {
		t.Run(sys.Name, func(t *testing.T) {
			t.Parallel()
			srv := newRecServer(t, false, func(n int, w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Retry-After", "3600")
				http.Error(w, "too many", http.StatusTooManyRequests)
			})
			rt := client(t, sys, srv, reviewParams)
			ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
			start := time.Now()
			resp, err := rt.RoundTrip(req)
			el := time.Since(start)
			body := readAll(resp)
			n := len(srv.got())
			expect(t, sys.Name, err == nil && resp != nil && resp.StatusCode == 429 && el < time.Second && n == 1,
				"after %v: %s %q err=%v, %d attempts", el.Round(time.Millisecond), status(resp), body, err, n)
		})
	}
}

// TestPeerDeadlineAlways503: against a host that always answers 503, a
// deadline shorter than the backoff returns the last 503 (body intact,
// nil error) no later than the deadline; when the deadline cut a retry
// already at the server, the 503 before it (on a busy machine a retry sent
// a moment before the deadline may not be answered in time).
func TestPeerDeadlineAlways503(t *testing.T) {
	t.Parallel()
	p := Params{MaxRetries: 5, BaseDelay: 150 * time.Millisecond, MaxDelay: time.Second}
	for _, sys := range reviewSystems(t) {
		t.Run(sys.Name, func(t *testing.T) {
			t.Parallel()
			srv := newRecServer(t, false, func(n int, w http.ResponseWriter, _ *http.Request) {
				http.Error(w, fmt.Sprintf("unavailable %d", n), http.StatusServiceUnavailable)
			})
			rt := client(t, sys, srv, p)
			resp, late, err := getWithin(t, rt, srv.URL, 400*time.Millisecond)
			body := readAll(resp)
			n := len(srv.got())
			wantBody := fmt.Sprintf("unavailable %d\n", n-1)
			if late >= 0 && body == fmt.Sprintf("unavailable %d\n", n-2) {
				wantBody = body // the deadline cut a retry the server had seen: the 503 before it is the answer
			}
			expect(t, sys.Name, err == nil && resp != nil && resp.StatusCode == 503 && body == wantBody && late < 200*time.Millisecond,
				"%v after the deadline: %s %q (want %q) err=%v; %d attempts", late.Round(time.Millisecond), status(resp), body, wantBody, err, n)
			if err != nil {
				t.Logf("%s: errors.Is(err, DeadlineExceeded)=%v", sys.Name, errors.Is(err, context.DeadlineExceeded))
			}
		})
	}
}

// TestPeerDeadlineCutsHungRetry: the deadline cuts a retry that hangs; the
// outcome before it, the 503 with its body, is returned.
func TestPeerDeadlineCutsHungRetry(t *testing.T) {
	t.Parallel()
	for _, sys := range reviewSystems(t) {
		t.Run(sys.Name, func(t *testing.T) {
			t.Parallel()
			srv := newRecServer(t, false, func(n int, w http.ResponseWriter, r *http.Request) {
				if n == 0 {
					http.Error(w, "first", http.StatusServiceUnavailable)
					return
				}
				<-r.Context().Done()
			})
			rt := client(t, sys, srv, reviewParams)
			resp, late, err := getWithin(t, rt, srv.URL, 400*time.Millisecond)
			body := readAll(resp)
			expect(t, sys.Name, err == nil && resp != nil && resp.StatusCode == 503 && body == "first\n" && late < 200*time.Millisecond,
				"%v after the deadline: %s %q err=%v", late.Round(time.Millisecond), status(resp), body, err)
			if err != nil {
				t.Logf("%s: err %v; Is(DeadlineExceeded)=%v", sys.Name, err, errors.Is(err, context.DeadlineExceeded))
			}
		})
	}
}

// TestPeerCancel: canceling during a wait returns at once an error that
// errors.Is finds context.Canceled in.
func TestPeerCancel(t *testing.T) {
	t.Parallel()
	p := Params{MaxRetries: 3, BaseDelay: time.Second, MaxDelay: time.Second}
	for _, sys := range reviewSystems(t) {
		t.Run(sys.Name, func(t *testing.T) {
			t.Parallel()
			srv := newRecServer(t, false, failFirst(100))
			rt := client(t, sys, srv, p)
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(100*time.Millisecond, cancel)
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
			start := time.Now()
			resp, err := rt.RoundTrip(req)
			el := time.Since(start)
			readAll(resp)
			// With full jitter a wait may end before the cancel: then a
			// second attempt and a second wait.
			expect(t, sys.Name, resp == nil && errors.Is(err, context.Canceled) && el < 700*time.Millisecond,
				"after %v: %s err=%v (Is Canceled: %v)", el.Round(time.Millisecond), status(resp), err, errors.Is(err, context.Canceled))
		})
	}
}

// TestPeerConnReuse: retried 503s, whose bodies are read, do not cost a
// connection each; the bodies are small (1 KiB) and mid-sized (16 KiB, an
// error page of a CDN).
func TestPeerConnReuse(t *testing.T) {
	t.Parallel()
	for _, size := range []int{1 << 10, 16 << 10} {
		for _, sys := range reviewSystems(t) {
			t.Run(fmt.Sprintf("%dB/%s", size, sys.Name), func(t *testing.T) {
				t.Parallel()
				page := strings.Repeat("e", size)
				srv := newRecServer(t, false, func(n int, w http.ResponseWriter, _ *http.Request) {
					if n%3 != 2 {
						w.WriteHeader(http.StatusServiceUnavailable)
						w.Write([]byte(page))
						return
					}
					w.Write([]byte("ok"))
				})
				rt := client(t, sys, srv, reviewParams)
				for range 5 {
					resp, err := get(rt, srv.URL)
					if b := readAll(resp); err != nil || b != "ok" {
						t.Fatalf("%s: %v %q", sys.Name, err, b)
					}
				}
				c := srv.conns.Load()
				expect(t, sys.Name, c == 1, "15 attempts (10 retried 503s) used %d connections", c)
			})
		}
	}
}

// TestPeerHTTP2: over HTTP/2, a plain-reader PUT is replayed byte for byte
// on one connection.
func TestPeerHTTP2(t *testing.T) {
	t.Parallel()
	for _, sys := range reviewSystems(t) {
		t.Run(sys.Name, func(t *testing.T) {
			t.Parallel()
			srv := newRecServer(t, true, failFirst(2))
			rt := client(t, sys, srv, reviewParams)
			payload := randomBytes(300 << 10)
			want := sha256.Sum256(payload)
			req, _ := http.NewRequest(http.MethodPut, srv.URL, &plainReader{r: bytes.NewReader(payload)})
			resp, err := rt.RoundTrip(req)
			body := readAll(resp)
			got := srv.got()
			ok := err == nil && resp != nil && resp.StatusCode == 200 && body == "ok" && len(got) == 3
			for _, a := range got {
				ok = ok && a.sum == want && a.proto == "HTTP/2.0"
			}
			expect(t, sys.Name, ok && srv.conns.Load() == 1, "%s %v %q, %d attempts %v %v, %d conns", status(resp), err, body, len(got), sizes(got), protos(got), srv.conns.Load())
		})
	}
}

func protos(as []recAttempt) []string {
	var s []string
	for _, a := range as {
		s = append(s, a.proto)
	}
	return s
}

// TestPeerErrors: after retries of connection resets and refusals run
// out, errors.Is and errors.As reach the cause.
func TestPeerErrors(t *testing.T) {
	t.Parallel()
	t.Run("reset", func(t *testing.T) {
		for _, sys := range reviewSystems(t) {
			t.Run(sys.Name, func(t *testing.T) {
				t.Parallel()
				srv := newRecServer(t, false, func(n int, w http.ResponseWriter, _ *http.Request) {
					c, _, _ := w.(http.Hijacker).Hijack()
					c.(*net.TCPConn).SetLinger(0)
					c.Close()
				})
				rt := client(t, sys, srv, reviewParams)
				resp, err := get(rt, srv.URL)
				readAll(resp)
				n := len(srv.got())
				var op *net.OpError
				expect(t, sys.Name, n == 4 && errors.Is(err, syscall.ECONNRESET) && errors.As(err, &op),
					"%d attempts; err %v; Is ECONNRESET %v", n, err, errors.Is(err, syscall.ECONNRESET))
			})
		}
	})
	t.Run("refused", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		for _, sys := range reviewSystems(t) {
			t.Run(sys.Name, func(t *testing.T) {
				t.Parallel()
				var dials atomic.Int32
				base := &http.Transport{DialContext: func(ctx context.Context, network, a string) (net.Conn, error) {
					dials.Add(1)
					return (&net.Dialer{}).DialContext(ctx, network, a)
				}}
				rt := sys.New(base, reviewParams)
				req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/", nil)
				resp, err := rt.RoundTrip(req)
				readAll(resp)
				var op *net.OpError
				var he *httpretry.Error
				ok := dials.Load() == 4 && errors.Is(err, syscall.ECONNREFUSED) && errors.As(err, &op)
				if sys.Name == "httpretry" {
					ok = ok && errors.As(err, &he) && he.Attempts == 4 && he.Reason == httpretry.StopExhausted
				}
				expect(t, sys.Name, ok, "%d dials; err %v", dials.Load(), err)
			})
		}
	})
}

// TestPeerFinal503: when the retries run out, the last 503 is returned as
// a response, its body whole.
func TestPeerFinal503(t *testing.T) {
	t.Parallel()
	for _, sys := range reviewSystems(t) {
		t.Run(sys.Name, func(t *testing.T) {
			t.Parallel()
			page := strings.Repeat("x", 10<<10)
			srv := newRecServer(t, false, func(n int, w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(http.StatusServiceUnavailable)
				fmt.Fprintf(w, "%d:%s", n, page)
			})
			rt := client(t, sys, srv, reviewParams)
			resp, err := get(rt, srv.URL)
			body := readAll(resp)
			expect(t, sys.Name, err == nil && resp != nil && resp.StatusCode == 503 && body == "3:"+page,
				"%s err=%v body %d bytes", status(resp), err, len(body))
		})
	}
}

// TestPeerRequestUntouched: RoundTrip must not modify the caller's request
// (net/http's RoundTripper contract), and must close its body.
func TestPeerRequestUntouched(t *testing.T) {
	t.Parallel()
	for _, sys := range reviewSystems(t) {
		t.Run(sys.Name, func(t *testing.T) {
			t.Parallel()
			srv := newRecServer(t, false, failFirst(1))
			rt := client(t, sys, srv, reviewParams)
			pr := &plainReader{r: strings.NewReader("hello")}
			req, _ := http.NewRequest(http.MethodPut, srv.URL, pr)
			resp, err := rt.RoundTrip(req)
			readAll(resp)
			expect(t, sys.Name, err == nil && req.Body == io.ReadCloser(pr) && req.GetBody == nil,
				"err %v; the caller's req.Body is now %T (was *plainReader)", err, req.Body)
			expect(t, sys.Name, pr.closed.Load() == 1, "the caller's body closed %d times", pr.closed.Load())
			expect(t, sys.Name, resp != nil && resp.Request == req, "resp.Request is not the caller's request")
		})
	}
}

// TestPeerSeekableBody: a *os.File body (io.ReadSeeker, no GetBody, no
// length, as http.NewRequest leaves it) of 3 MiB. At offset 0: retried?
// At offset 1000 (the caller consumed a prefix): are the bytes sent the
// ones from the caller's position on?
func TestPeerSeekableBody(t *testing.T) {
	t.Parallel()
	payload := randomBytes(3 << 20)
	path := t.TempDir() + "/body"
	if err := os.WriteFile(path, payload, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, off := range []int64{0, 1000} {
		for _, sys := range reviewSystems(t) {
			t.Run(fmt.Sprintf("offset %d/%s", off, sys.Name), func(t *testing.T) {
				t.Parallel()
				srv := newRecServer(t, false, failFirst(2))
				rt := client(t, sys, srv, reviewParams)
				f, err := os.Open(path)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				f.Seek(off, io.SeekStart)
				want := sha256.Sum256(payload[off:])
				req, _ := http.NewRequest(http.MethodPut, srv.URL, f)
				resp, err := rt.RoundTrip(req)
				readAll(resp)
				got := srv.got()
				for i, a := range got {
					expect(t, sys.Name, a.sum == want, "attempt %d sent %d bytes, not the %d from the caller's offset", i+1, a.n, len(payload)-int(off))
				}
				t.Logf("%s: %d attempts %v, result %s err=%v", sys.Name, len(got), sizes(got), status(resp), err)
			})
		}
	}
}

// TestPeerRetryAfterDateLate: a Retry-After date, the next whole second,
// less than a second away: the retry goes no earlier than the date, and,
// counted from the response's Date of whole seconds (README: a date "up
// to a second more"), no more than a second and the spread after it. A
// peer that counts from its own clock goes right at the date: here
// httpretry is up to a second later, by how far into its second the
// response was sent.
func TestPeerRetryAfterDateLate(t *testing.T) {
	t.Parallel()
	for _, sys := range reviewSystems(t) {
		t.Run(sys.Name, func(t *testing.T) {
			t.Parallel()
			late, ok := retryAfterTheFirst(t, sys, func() (string, time.Time) {
				at := time.Now().Truncate(time.Second).Add(time.Second) // less than a second away
				return at.UTC().Format(http.TimeFormat), at
			})
			if ok {
				expect(t, sys.Name, late >= 0 && late < 1300*time.Millisecond,
					"the retry went %v after the Retry-After date, the next whole second", late.Round(time.Millisecond))
			}
		})
	}
}

// TestPeerHandlerFailsBeforeAnswering: a handler that fails before it
// answers (here a panic with http.ErrAbortHandler; a WriteTimeout does
// the same) closes the connection over HTTP/1 and resets the stream with
// INTERNAL_ERROR over HTTP/2: either way a GET is retried.
func TestPeerHandlerFailsBeforeAnswering(t *testing.T) {
	t.Parallel()
	for _, h2 := range []bool{false, true} {
		for _, sys := range reviewSystems(t) {
			t.Run(fmt.Sprintf("h2=%v/%s", h2, sys.Name), func(t *testing.T) {
				t.Parallel()
				srv := newRecServer(t, h2, func(n int, w http.ResponseWriter, _ *http.Request) {
					if n == 0 {
						panic(http.ErrAbortHandler)
					}
					w.Write([]byte("ok"))
				})
				resp, err := get(client(t, sys, srv, reviewParams), srv.URL)
				body := readAll(resp)
				expect(t, sys.Name, err == nil && body == "ok" && len(srv.got()) == 2, "%s %q err=%v after %d attempts", status(resp), body, err, len(srv.got()))
			})
		}
	}
}

// TestPeerProxyRefusesConnect: an HTTPS GET through a forward proxy whose
// first CONNECT is answered 503 (it could not reach the host) is retried
// with a second CONNECT.
func TestPeerProxyRefusesConnect(t *testing.T) {
	t.Parallel()
	for _, sys := range reviewSystems(t) {
		t.Run(sys.Name, func(t *testing.T) {
			t.Parallel()
			srv := newRecServer(t, true, func(int, http.ResponseWriter, *http.Request) {})
			proxy, connects := startConnectProxy(t)
			base := newBase(srv)
			base.Proxy = http.ProxyURL(proxy)
			t.Cleanup(base.CloseIdleConnections)
			resp, err := get(sys.New(base, reviewParams), srv.URL)
			readAll(resp)
			expect(t, sys.Name, err == nil && resp.StatusCode == 200 && connects.Load() == 2 && len(srv.got()) == 1,
				"%s err=%v after %d CONNECTs", status(resp), err, connects.Load())
		})
	}
}

// startConnectProxy starts a forward proxy on loopback that answers the
// first CONNECT 503 and tunnels the others, and counts them.
func startConnectProxy(t *testing.T) (*url.URL, *atomic.Int32) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var connects atomic.Int32
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	track := func(c net.Conn) { mu.Lock(); conns = append(conns, c); mu.Unlock() }
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			track(c)
			wg.Go(func() {
				defer c.Close()
				br := bufio.NewReader(c)
				req, err := http.ReadRequest(br)
				if err != nil || req.Method != http.MethodConnect {
					return
				}
				if connects.Add(1) == 1 {
					io.WriteString(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")
					return
				}
				up, err := net.Dial("tcp", req.Host)
				if err != nil {
					return
				}
				track(up)
				defer up.Close()
				io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n")
				go func() { io.Copy(up, br); up.Close() }()
				io.Copy(c, up)
			})
		}
	})
	return &url.URL{Scheme: "http", Host: ln.Addr().String()}, &connects
}
