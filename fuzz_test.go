package httpretry

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/iotest"
	"time"
)

// The fuzz targets. Their seed corpora live in testdata/fuzz/<target>, so a
// plain go test replays them; make fuzz runs each target for FUZZTIME.

// FuzzParseRetryAfter: any Retry-After, any Date, any now. No panic, never a
// negative wait, delta-seconds exact (saturating), decimal seconds exact
// to the nanosecond above (saturating), and a date measured
// against a parsable Date header does not depend on the local clock.
func FuzzParseRetryAfter(f *testing.F) {
	for _, v := range []string{"", "0", "120", "-1", "1e9", "99999999999999999999", " 7 ", "1.5", "2.128", "9223372036.9",
		"Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994",
		"Mon, 01 Jan 1900 00:00:00 GMT", "Wed, 01 Jan 3000 00:00:00 GMT"} {
		f.Add(v, "", int64(784111777), int64(0))
		f.Add(v, "Sun, 06 Nov 1994 08:49:07 GMT", int64(0), int64(999))
	}
	f.Fuzz(func(t *testing.T, value, date string, unix, nanos int64) {
		now := time.Unix(unix, nanos)
		h := http.Header{}
		if value != "" {
			h.Set("Retry-After", value)
		}
		if date != "" {
			h.Set("Date", date)
		}
		wait, ok := parseRetryAfter(h, now)
		if wait < 0 {
			t.Fatalf("negative wait %v", wait)
		}
		if !ok && wait != 0 {
			t.Fatalf("not ok but wait %v", wait)
		}
		v := strings.TrimSpace(value)
		if v != "" && strings.Trim(v, "0123456789") == "" {
			secs, _ := new(big.Int).SetString(v, 10)
			want := new(big.Int).Mul(secs, big.NewInt(int64(time.Second)))
			if want.Cmp(big.NewInt(math.MaxInt64)) > 0 {
				want.SetInt64(math.MaxInt64)
			}
			if !ok || int64(wait) != want.Int64() {
				t.Fatalf("delta-seconds %q: %v, %v; want %v", v, wait, ok, time.Duration(want.Int64()))
			}
		}
		if whole, frac, dotted := strings.Cut(v, "."); dotted && whole != "" && frac != "" &&
			strings.Trim(whole+frac, "0123456789") == "" { // decimal seconds: exact, rounded up to the nanosecond, saturating
			secs, _ := new(big.Rat).SetString(v)
			ns := new(big.Rat).Mul(secs, big.NewRat(int64(time.Second), 1))
			want := new(big.Int).Quo(ns.Num(), ns.Denom())
			if !ns.IsInt() {
				want.Add(want, big.NewInt(1))
			}
			if want.Cmp(big.NewInt(math.MaxInt64)) > 0 {
				want.SetInt64(math.MaxInt64)
			}
			if !ok || int64(wait) != want.Int64() {
				t.Fatalf("decimal seconds %q: %v, %v; want %v", v, wait, ok, time.Duration(want.Int64()))
			}
		}
		if ok { // a cache's Age never lengthens the wait, nor makes it negative
			h.Set("Age", strconv.FormatInt(nanos&0xffff, 10))
			if aged, ok3 := parseRetryAfter(h, now); !ok3 || aged < 0 || aged > wait {
				t.Fatalf("with Age %s: %v, %v; want a wait in [0, %v]", h.Get("Age"), aged, ok3, wait)
			}
			h.Del("Age")
		}
		if _, err := http.ParseTime(date); err == nil && ok {
			other, ok2 := parseRetryAfter(h, now.Add(-1000*time.Hour))
			if other != wait || ok2 != ok {
				t.Fatalf("with a Date header the wait moved with the clock: %v vs %v", wait, other)
			}
		}
		if at, err := http.ParseTime(v); err == nil {
			h.Set("Date", at.Format(http.TimeFormat))
			if w, ok := parseRetryAfter(h, now); !ok || (w != 0 && strings.Trim(v, "0123456789") != "") {
				t.Fatalf("a date equal to the response's Date waits %v, %v", w, ok)
			}
		}
		for _, u := range []float64{0, 0.5, math.Nextafter(1, 0)} {
			s := spreadUp(wait, u)
			if s < wait || s-wait > wait/10 {
				t.Fatalf("spreadUp(%v, %v) = %v", wait, u, s)
			}
		}
	})
}

// FuzzPolicyDelay: any policy, attempt number, previous wait and random
// value. The wait lies in [0, cap], is a pure function of its inputs and
// matches the documented formula of its jitter, computed here with big
// integers so that nothing can overflow.
func FuzzPolicyDelay(f *testing.F) {
	f.Add(0, int64(0), int64(0), 0, 1, int64(0), 0.5)
	f.Add(5, int64(time.Millisecond), int64(time.Second), int(JitterNone), 62, int64(0), 0.0)
	f.Add(-1, int64(-1), int64(-1), int(JitterEqual), -3, int64(-5), math.Inf(1))
	f.Add(math.MaxInt, int64(math.MaxInt64), int64(math.MaxInt64), int(JitterDecorrelated), math.MaxInt, int64(math.MaxInt64), math.Nextafter(1, 0))
	f.Add(3, int64(time.Hour), int64(time.Second), 99, 2, int64(time.Minute), math.NaN())
	f.Add(1, int64(1), int64(3), int(JitterFull), 2, int64(1), 0.999)
	f.Fuzz(func(t *testing.T, retries int, base, limit int64, jitter, n int, prev int64, u float64) {
		p := Policy{MaxRetries: retries, BaseDelay: time.Duration(base), MaxDelay: time.Duration(limit), Jitter: Jitter(jitter)}
		d := p.Delay(n, time.Duration(prev), u)
		if d2 := p.Delay(n, time.Duration(prev), u); d2 != d {
			t.Fatalf("not pure: %v then %v", d, d2)
		}
		wantCap := time.Duration(limit)
		if wantCap <= 0 {
			wantCap = DefaultMaxDelay
		}
		if d < 0 || d > wantCap {
			t.Fatalf("Delay = %v, outside [0, %v]", d, wantCap)
		}
		if r := p.retries(); r < 0 || (retries > 0 && r != retries) {
			t.Fatalf("retries() = %d for MaxRetries %d", r, retries)
		}

		// The exponential step, min(cap, base·2^(n-1)), in big integers.
		b := time.Duration(base)
		if b == 0 {
			b = DefaultBaseDelay
		}
		b = min(max(b, 0), wantCap)
		shift := uint(max(n, 1) - 1)
		expo := wantCap
		if shift < 200 {
			e := new(big.Int).Lsh(big.NewInt(int64(b)), shift)
			if e.Cmp(big.NewInt(int64(wantCap))) < 0 {
				expo = time.Duration(e.Int64())
			}
		}
		if b == 0 {
			expo = 0
		}
		switch p.Jitter {
		case JitterNone:
			if d != expo {
				t.Fatalf("JitterNone: %v, want %v", d, expo)
			}
		case JitterEqual:
			if d < expo/2 || d > expo {
				t.Fatalf("JitterEqual: %v outside [%v, %v]", d, expo/2, expo)
			}
		case JitterDecorrelated:
			if b > 0 && d < b {
				t.Fatalf("JitterDecorrelated: %v below the base %v", d, b)
			}
		default:
			if d > expo {
				t.Fatalf("JitterFull: %v above %v", d, expo)
			}
		}
	})
}

// relGoAway has the shape of net/http's and x/net's HTTP/2 GoAwayError.
type relGoAway struct {
	LastStreamID uint32
	ErrCode      uint32
	DebugData    string
}

func (e relGoAway) Error() string { return "goaway" }

// relOddStream has the field names of a StreamError but a Code that is not
// an integer; it must be recognized as nothing.
type relOddStream struct {
	StreamID uint32
	Code     string
	Cause    error
}

func (e relOddStream) Error() string { return "odd stream" }

// relTimeout is a net.Error that says it timed out.
type relTimeout struct{}

func (relTimeout) Error() string   { return "i/o timeout" }
func (relTimeout) Timeout() bool   { return true }
func (relTimeout) Temporary() bool { return true }

// relWrap is a wrapper whose Unwrap may return nil.
type relWrap struct{ err error }

func (e *relWrap) Error() string { return "wrap" }
func (e *relWrap) Unwrap() error { return e.err }

// relMulti is a multi-error whose list may hold nils.
type relMulti []error

func (e relMulti) Error() string   { return "multi" }
func (e relMulti) Unwrap() []error { return e }

var relLeaves = []error{
	io.EOF, io.ErrUnexpectedEOF, context.Canceled, context.DeadlineExceeded,
	syscall.ECONNRESET, syscall.ECONNREFUSED, syscall.ETIMEDOUT, syscall.EPIPE,
	ErrAttemptTimeout, errNilResponse, errors.New("opaque"), relTimeout{},
	&tls.CertificateVerificationError{Err: errors.New("bad cert")}, tls.AlertError(42),
	tls.RecordHeaderError{Msg: "not tls"}, x509.UnknownAuthorityError{}, x509.HostnameError{Host: "h"},
	x509.CertificateInvalidError{}, h2StreamError{StreamID: 1, Code: h2RefusedStream},
	h2StreamError{StreamID: 3, Code: 2}, relGoAway{LastStreamID: 1}, &relGoAway{}, relOddStream{Code: "7"},
	http.ErrSchemeMismatch, &url.Error{Op: "Get", URL: "x", Err: errors.New("unsupported protocol scheme")},
}

// relBuildError turns fuzz bytes into a tree of wrapped errors: each byte
// pushes a leaf or wraps (or joins) what is on the stack.
// refusedInEveryBranch reports whether every failure joined in err's tree
// is a refused connection: one joined with another failure may have been
// sent by that other (a Base that tried twice, or two backends).
func refusedInEveryBranch(err error) bool {
	if err == syscall.ECONNREFUSED {
		return true
	}
	switch u := err.(type) {
	case interface{ Unwrap() []error }:
		n := 0
		for _, e := range u.Unwrap() {
			if e == nil {
				continue
			}
			if n++; !refusedInEveryBranch(e) {
				return false
			}
		}
		return n > 0
	case interface{ Unwrap() error }:
		return refusedInEveryBranch(u.Unwrap())
	}
	return false
}

func relBuildError(data []byte) error {
	var stack []error
	pop := func() error {
		if len(stack) == 0 {
			return nil
		}
		e := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		return e
	}
	for _, c := range data {
		op := int(c) % (len(relLeaves) + 10)
		if op < len(relLeaves) {
			stack = append(stack, relLeaves[op])
			continue
		}
		switch op - len(relLeaves) {
		case 0:
			if e := pop(); e != nil {
				stack = append(stack, fmt.Errorf("ctx %d: %w", c, e))
			}
		case 1:
			stack = append(stack, &url.Error{Op: "Post", URL: "http://x", Err: pop()})
		case 2:
			op := [...]string{"dial", "read", "write", "proxyconnect"}[c%4]
			stack = append(stack, &net.OpError{Op: op, Net: "tcp", Err: pop()})
		case 3:
			stack = append(stack, os.NewSyscallError("connect", pop()))
		case 4:
			stack = append(stack, &relWrap{err: pop()})
		case 5:
			a, b := pop(), pop()
			if j := errors.Join(a, b); j != nil {
				stack = append(stack, j)
			}
		case 6:
			a, b := pop(), pop()
			stack = append(stack, relMulti{a, nil, b})
		case 7:
			if a, b := pop(), pop(); a != nil && b != nil {
				stack = append(stack, fmt.Errorf("%w and %w", a, b))
			}
		case 8:
			stack = append(stack, h2StreamError{StreamID: uint32(c), Code: uint32(c % 16), Cause: pop()})
		case 9:
			stack = append(stack, relGoAway{LastStreamID: uint32(c), ErrCode: uint32(c % 16)})
		}
	}
	var err error
	for _, e := range stack {
		if e != nil {
			err = errors.Join(err, e)
		}
	}
	return err
}

// FuzzClassify: the classifier over random trees of wrapped errors, alone
// and through a Transport. It never panics, answers the same twice, never
// retries the caller's own cancellation or a TLS failure, and the returned
// *Error still reaches every cause.
func FuzzClassify(f *testing.F) {
	for i := range relLeaves {
		f.Add([]byte{byte(i)})
		f.Add([]byte{byte(i), byte(len(relLeaves) + 1), byte(len(relLeaves) + 2)})
	}
	f.Add([]byte{2, 4, byte(len(relLeaves) + 5), byte(len(relLeaves))})
	f.Add([]byte{8, 2, byte(len(relLeaves) + 7)})
	f.Add([]byte{12, 5, byte(len(relLeaves) + 6), byte(len(relLeaves) + 4)})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 64 {
			data = data[:64]
		}
		err := relBuildError(data)
		if err == nil {
			return
		}
		retry, reason := classifyError(err)
		if r2, reason2 := classifyError(err); r2 != retry || reason2 != reason {
			t.Fatalf("not deterministic for %v", err)
		}
		if retry != (reason != "") {
			t.Fatalf("retry %v with reason %q", retry, reason)
		}
		own := !errors.Is(err, ErrAttemptTimeout)
		if own && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) && retry {
			t.Fatalf("retries the caller's own cancellation: %v (%s)", err, reason)
		}
		if own && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) && isTLSError(err) && retry {
			t.Fatalf("retries a TLS failure: %v (%s)", err, reason)
		}
		sent := !neverSent(err)
		if refusedInEveryBranch(err) && sent {
			t.Fatalf("connection refused counted as sent: %v", err)
		}
		if dr, dreason := DefaultClassifier(nil, nil, err); dr != retry || dreason != reason {
			t.Fatalf("DefaultClassifier disagrees: %v %q vs %v %q", dr, dreason, retry, reason)
		}

		// Through a Transport, as a POST without a key: retried only when
		// retryable for the request (a deadline that is not the caller's is
		// a timeout, see classifyFailure) and provably never sent.
		var calls int
		tr := &Transport{Policy: Policy{MaxRetries: 1, BaseDelay: -1}, Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			calls++
			return nil, err
		})}
		req, _ := http.NewRequest("POST", "http://example.invalid/", nil)
		retry, _ = classifyFailure(req, err)
		resp, got := tr.RoundTrip(req)
		if resp != nil {
			t.Fatal("got a response from an always-failing base")
		}
		want := 1
		if retry && !sent {
			want = 2
		}
		if calls != want {
			t.Fatalf("%d attempts for %v (retry %v, sent %v); want %d", calls, err, retry, sent, want)
		}
		var e *Error
		if !errors.As(got, &e) || e.Attempts != want || !errors.Is(got, err) {
			t.Fatalf("returned %v; want an *Error after %d attempts wrapping the cause", got, want)
		}
		for _, leaf := range relLeaves {
			if errors.Is(got, leaf) != errors.Is(err, leaf) {
				t.Fatalf("errors.Is(%v) differs through the *Error", leaf)
			}
		}
	})
}

// relChunkyReader returns at most step bytes per Read, and with eofData the
// last bytes together with io.EOF.
type relChunkyReader struct {
	data    []byte
	step    int
	eofData bool
}

func (r *relChunkyReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), r.step)], r.data)
	r.data = r.data[n:]
	if r.eofData && len(r.data) == 0 {
		return n, io.EOF
	}
	return n, nil
}

// FuzzBodyReplay: request bodies of random sizes, limits and read patterns
// through a Transport whose base reads each attempt's body its own way,
// sometimes only partly before failing, sometimes finishing the read after
// it returned. Every attempt that reads its body to the end sees the
// original bytes; a body over the limit is sent once, whole; the caller's
// body is closed exactly once.
func FuzzBodyReplay(f *testing.F) {
	f.Add(uint32(0), int32(0), uint8(0), uint16(1), uint8(0), uint8(2))
	f.Add(uint32(1), int32(1), uint8(1), uint16(7), uint8(1), uint8(3))
	f.Add(uint32(1000), int32(999), uint8(2), uint16(100), uint8(2), uint8(1))
	f.Add(uint32(5000), int32(1000), uint8(7), uint16(333), uint8(3), uint8(2)) // readable at its offsets, over the limit, read late
	f.Add(uint32(1000), int32(1000), uint8(3), uint16(513), uint8(3), uint8(2))
	f.Add(uint32(70000), int32(-1), uint8(4), uint16(4096), uint8(4), uint8(2))
	f.Add(uint32(200000), int32(65536), uint8(5), uint16(32768), uint8(5), uint8(3))
	f.Add(uint32(513), int32(512), uint8(6), uint16(511), uint8(6), uint8(1))
	f.Add(uint32(5000), int32(math.MaxInt32), uint8(6), uint16(1000), uint8(1), uint8(1))
	f.Fuzz(func(t *testing.T, size uint32, limit int32, source uint8, step uint16, readMode, retries uint8) {
		lim := int64(limit) % (1 << 18)
		if limit > 1<<30 {
			lim = math.MaxInt64 - int64(math.MaxInt32-limit) // near the largest int64: buffer anything
		}
		relBodyReplay(t, int(size%(1<<18)), lim, source, int(step), readMode, int(retries%4))
	})
}

func relBodyReplay(t *testing.T, size int, limit int64, source uint8, step int, readMode uint8, retries int) {
	if limit < -1 {
		limit = -1
	}
	orig := make([]byte, size)
	for i := range orig {
		orig[i] = byte(i*7 + i/251)
	}
	step = max(step, 1)

	// The caller's body: one of the shapes callers hand over.
	var body io.Reader
	var known bool
	switch source % 8 {
	case 0: // bytes.Reader: NewRequest sets ContentLength and GetBody
		body, known = bytes.NewReader(orig), true
	case 1: // unknown length, small reads
		body = &relChunkyReader{data: orig, step: step}
	case 2: // unknown length, the last bytes come with io.EOF
		body = &relChunkyReader{data: orig, step: step, eofData: true}
	case 3:
		body = iotest.OneByteReader(bytes.NewReader(orig))
	case 4:
		body = iotest.HalfReader(bytes.NewReader(orig))
	case 5:
		body = iotest.DataErrReader(bytes.NewReader(orig))
	case 6: // a known length without GetBody
		body = &relChunkyReader{data: orig, step: step}
		known = true
	case 7: // readable at its offsets, as a file: its Read through the counted body, its ReadAt beside
		body = &relChunkyReader{data: orig, step: step}
	}
	caller := newRelBody(body)
	var sent io.ReadCloser = caller
	if source%8 == 7 {
		sent = relAtBody{caller, bytes.NewReader(orig)}
	}
	req, err := http.NewRequest("PUT", "http://example.invalid/", sent)
	if source%8 == 0 {
		// NewRequest's own GetBody over a bytes.Reader; the first
		// attempt reads the counted caller's body over the same bytes.
		req, err = http.NewRequest("PUT", "http://example.invalid/", body)
		req.Body = caller
	}
	if err != nil {
		t.Fatal(err)
	}
	if known {
		req.ContentLength = int64(size)
	}

	var (
		mu       sync.Mutex
		attempts int
		late     sync.WaitGroup
		failures []string
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		failures = append(failures, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	check := func(n int, got []byte, r *http.Request) {
		if !bytes.Equal(got, orig) {
			fail("attempt %d: body of %d bytes differs from the original %d bytes", n, len(got), len(orig))
		}
		if r.ContentLength > 0 && r.ContentLength != int64(len(orig)) {
			fail("attempt %d: ContentLength %d for a body of %d bytes", n, r.ContentLength, len(orig))
		}
	}
	readAll := func(r io.Reader) []byte {
		var out bytes.Buffer
		buf := make([]byte, step)
		for {
			k, err := r.Read(buf)
			out.Write(buf[:k])
			if err != nil {
				return out.Bytes()
			}
		}
	}
	tr := &Transport{
		Policy:          Policy{MaxRetries: retries, BaseDelay: -1},
		MaxBufferedBody: limit,
		Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			mu.Lock()
			attempts++
			n := attempts
			mu.Unlock()
			if r.Body == nil || r.Body == http.NoBody {
				check(n, nil, r)
				resp, _ := relResponse(503, "")
				return resp, nil
			}
			switch readMode % 4 {
			case 0: // io.Copy: WriteTo when the body has it
				var out bytes.Buffer
				io.Copy(&out, r.Body)
				check(n, out.Bytes(), r)
			case 1: // Read with a small buffer
				check(n, readAll(r.Body), r)
			case 2: // read part, then fail as a reset connection would
				part := make([]byte, min(step, size))
				io.ReadFull(r.Body, part)
				if !bytes.Equal(part, orig[:len(part)]) {
					fail("attempt %d: the first %d bytes differ", n, len(part))
				}
				r.Body.Close()
				return nil, fmt.Errorf("write: %w", syscall.ECONNRESET)
			case 3: // return first, finish reading concurrently with the next attempt
				late.Add(1)
				go func() {
					defer late.Done()
					check(n, readAll(r.Body), r)
					r.Body.Close()
				}()
				resp, _ := relResponse(503, "")
				return resp, nil
			}
			r.Body.Close()
			resp, _ := relResponse(503, "")
			return resp, nil
		}),
	}
	resp, err := tr.RoundTrip(req)
	late.Wait()
	if resp != nil {
		resp.Body.Close()
	}
	if resp == nil && err == nil {
		t.Fatal("neither a response nor an error")
	}
	for _, f := range failures {
		t.Error(f)
	}
	effLimit := limit
	if effLimit == 0 {
		effLimit = DefaultMaxBufferedBody
	}
	// An unread body of unknown length is a body, even when it turns out
	// empty: with a negative limit it is streamed once.
	replayable := source%8 == 0 || source%8 == 7 || (effLimit >= 0 && int64(size) <= effLimit)
	want := 1
	if replayable {
		want = 1 + retries
		if retries == 0 {
			want = 1 + DefaultMaxRetries
		}
	}
	if attempts != want {
		t.Errorf("%d attempts, want %d (size %d, limit %d, source %d)", attempts, want, size, limit, source%8)
	}
	if c := caller.closes.Load(); c != 1 {
		t.Errorf("caller's body closed %d times, want 1", c)
	}
}

// relAtBody is a counted body readable at its offsets, as an *os.File.
type relAtBody struct {
	*relBody
	at *bytes.Reader
}

func (b relAtBody) ReadAt(p []byte, off int64) (int, error) { return b.at.ReadAt(p, off) }

func (b relAtBody) Seek(off int64, whence int) (int64, error) { return b.at.Seek(off, whence) }

// TestBodyReplayShapes runs the body-replay property over a fixed grid, so
// that the edges around the limit are covered even without -fuzz.
func TestBodyReplayShapes(t *testing.T) {
	var runs atomic.Int32
	for _, size := range []int{0, 1, 511, 512, 513, 4096} {
		for _, limit := range []int64{-1, 0, 1, 512, 4096, math.MaxInt64} {
			for source := uint8(0); source < 8; source++ {
				for mode := uint8(0); mode < 4; mode++ {
					relBodyReplay(t, size, limit, source, 100, mode, 2)
					runs.Add(1)
				}
			}
		}
	}
	if runs.Load() != 6*6*8*4 {
		t.Fatal("grid incomplete")
	}
}
