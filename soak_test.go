package httpretry

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// soakDefaultN is the size of the soak that runs with every go test; make
// soak sets HTTPRETRY_SOAK_N for a bigger one.
const soakDefaultN = 5000

const (
	soakConcurrency = 64
	soakFaultRate   = 0.30
	soakSeed        = 20261201
)

// The faults the soak server injects, each with equal share of the 30%.
const (
	faultReset      = iota // request read, then an RST: executed, no response
	faultCutHeaders        // status line, then an RST: executed, no response
	faultIgnoreBody        // 503 without reading the body: not executed
	faultSlow              // headers later than AttemptTimeout: not executed
	faultCutBody           // 200 and half the body, then the connection dies: executed
	faultBigError          // 502 with a 256 KiB body: not executed
	fault429               // 429 with Retry-After: 0: not executed
	faultKinds
)

var faultNames = [faultKinds]string{"reset", "cut headers", "ignore body", "slow headers", "cut body", "big 502", "429"}

// soakServer answers each request by its X-Req-Id and attempt, picking
// faults from a hash of (seed, id, attempt) so a run is reproducible
// however the requests interleave.
type soakServer struct {
	mu         sync.Mutex
	attempts   map[string]int // attempts seen per request id
	executions map[string]int // executions per request id
	method     map[string]string
	keyed      map[string]bool
	faults     [faultKinds]atomic.Int64
	corrupted  atomic.Int64 // bodies received whole whose checksum differs
	whole      atomic.Int64 // bodies received whole
}

func (s *soakServer) roll(id string, attempt int) (float64, int) {
	h := sha256.Sum256([]byte(fmt.Sprintf("%d/%s/%d", soakSeed, id, attempt)))
	u := float64(binary.BigEndian.Uint64(h[:8])>>11) / (1 << 53)
	return u, int(binary.BigEndian.Uint64(h[8:16]) % faultKinds)
}

func (s *soakServer) execute(r *http.Request, id string) {
	s.mu.Lock()
	s.executions[id]++
	s.method[id] = r.Method
	s.keyed[id] = r.Header.Get("Idempotency-Key") != ""
	s.mu.Unlock()
}

func (s *soakServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := r.Header.Get("X-Req-Id")
	s.mu.Lock()
	s.attempts[id]++
	attempt := s.attempts[id]
	s.mu.Unlock()
	u, kind := s.roll(id, attempt)
	if u >= soakFaultRate {
		kind = -1
	} else {
		s.faults[kind].Add(1)
	}

	switch kind {
	case faultIgnoreBody:
		w.WriteHeader(503)
		return
	case faultSlow:
		select {
		case <-r.Context().Done():
		case <-time.After(time.Second):
		}
		return
	case faultBigError:
		w.WriteHeader(502)
		w.Write(make([]byte, 256<<10))
		return
	case fault429:
		w.Header().Set("Retry-After", "0")
		w.WriteHeader(429)
		return
	}

	body, err := io.ReadAll(r.Body)
	if err != nil {
		return // the client's side broke off; nothing executed
	}
	s.whole.Add(1)
	sum := sha256.Sum256(body)
	got := hex.EncodeToString(sum[:])
	if got != r.Header.Get("X-Sum") {
		s.corrupted.Add(1)
	}
	s.execute(r, id)
	echo := id + " " + got

	switch kind {
	case faultReset, faultCutHeaders:
		c, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		if kind == faultCutHeaders {
			io.WriteString(c, "HTTP/1.1 200 OK\r\n")
			time.Sleep(time.Millisecond)
		}
		relReset(c)
	case faultCutBody:
		w.Header().Set("Content-Length", strconv.Itoa(len(echo)))
		w.WriteHeader(200)
		io.WriteString(w, echo[:len(echo)/2])
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	default:
		io.WriteString(w, echo)
	}
}

// soakRand is a seeded source safe for concurrent use.
type soakRand struct {
	mu sync.Mutex
	r  *rand.Rand
}

func (s *soakRand) Float64() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.r.Float64()
}

// soakRequest is one logical request of the soak, drawn from the seed.
type soakRequest struct {
	id     string
	seq    uint64
	method string
	key    bool
	size   int  // body length; -1: no body
	getter bool // body given as a bytes.Reader, so with GetBody
}

// body returns the request's body, generated from the seed when it is sent
// so that a big soak does not hold every body in memory.
func (r soakRequest) body() []byte {
	if r.size < 0 {
		return nil
	}
	var seed [32]byte
	binary.BigEndian.PutUint64(seed[:], soakSeed)
	binary.BigEndian.PutUint64(seed[8:], r.seq)
	b := make([]byte, r.size)
	rand.NewChaCha8(seed).Read(b)
	return b
}

// TestSoak sends HTTPRETRY_SOAK_N (default soakDefaultN) logical requests,
// 64 at a time, through one Transport to a server that injects 30% faults
// (and a dialer that sends a share of new connections to a closed port),
// and checks that no body is corrupted, no POST without a key is executed
// twice, every request ends in a response or an *Error, and goroutines and
// connections return to their baseline.
func TestSoak(t *testing.T) {
	relNoLeaks(t)
	n := soakDefaultN
	if v := os.Getenv("HTTPRETRY_SOAK_N"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n <= 0 {
			t.Fatalf("HTTPRETRY_SOAK_N=%q: want a positive number", v)
		}
	}

	srvState := &soakServer{attempts: map[string]int{}, executions: map[string]int{}, method: map[string]string{}, keyed: map[string]bool{}}
	ln := relListen(t, "127.0.0.1:0")
	srv := httptest.NewUnstartedServer(srvState)
	srv.Listener.Close()
	srv.Listener = ln
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Start()
	defer srv.Close()

	// Connection refused, at the dial: a share of new connections goes to
	// a port where nothing listens.
	probe := relListen(t, "127.0.0.1:0")
	deadAddr := probe.Addr().String()
	probe.Close()
	dialRand := &soakRand{r: rand.New(rand.NewPCG(soakSeed, 3))}
	var dials, refusedDials atomic.Int64
	var dialer net.Dialer
	base := &http.Transport{
		MaxIdleConnsPerHost: soakConcurrency,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			if dialRand.Float64() < soakFaultRate/faultKinds {
				refusedDials.Add(1)
				addr = deadAddr
			}
			return dialer.DialContext(ctx, network, addr)
		},
	}
	random := &soakRand{r: rand.New(rand.NewPCG(soakSeed, 1))}
	var stops [StopInvalid + 2]atomic.Int64
	var retries atomic.Int64
	tr := &Transport{
		Base:            base,
		Policy:          Policy{MaxRetries: 4, BaseDelay: time.Millisecond, MaxDelay: 20 * time.Millisecond},
		AttemptTimeout:  150 * time.Millisecond,
		MaxBufferedBody: 96 << 10,
		Random:          random.Float64,
		OnRetry:         func(RetryEvent) { retries.Add(1) },
		OnGiveUp: func(e RetryEvent) {
			if int(e.Stop) >= 0 && int(e.Stop) < len(stops) {
				stops[e.Stop].Add(1)
			}
		},
	}

	// The requests, drawn up front from the seed.
	gen := rand.New(rand.NewPCG(soakSeed, 2))
	reqs := make([]soakRequest, n)
	for i := range reqs {
		r := soakRequest{id: fmt.Sprintf("r%06d", i), seq: uint64(i), size: -1}
		switch p := gen.IntN(100); {
		case p < 40:
			r.method = "GET"
		case p < 65:
			r.method = "PUT"
		case p < 85:
			r.method = "POST"
		default:
			r.method, r.key = "POST", true
		}
		if r.method != "GET" {
			size := gen.IntN(16 << 10)
			if gen.IntN(10) == 0 {
				size = gen.IntN(192 << 10) // sometimes over MaxBufferedBody
			}
			r.size = size
			r.getter = gen.IntN(2) == 0
		}
		reqs[i] = r
	}

	var (
		ok200, otherStatus, bodyErrors, wrappedErrors atomic.Int64
		clientCorrupt, badOutcomes                    atomic.Int64
		firstBad                                      atomic.Value
	)
	bad := func(format string, args ...any) {
		badOutcomes.Add(1)
		firstBad.CompareAndSwap(nil, fmt.Sprintf(format, args...))
	}
	start := time.Now()
	work := make(chan soakRequest)
	var wg sync.WaitGroup
	for range soakConcurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range work {
				var body io.Reader
				payload := r.body()
				if payload != nil {
					body = io.NopCloser(bytes.NewReader(payload))
					if r.getter {
						body = bytes.NewReader(payload)
					}
				}
				req, err := http.NewRequest(r.method, srv.URL+"/"+r.id, body)
				if err != nil {
					bad("%s: %v", r.id, err)
					continue
				}
				sum := sha256.Sum256(payload)
				req.Header.Set("X-Req-Id", r.id)
				req.Header.Set("X-Sum", hex.EncodeToString(sum[:]))
				if r.key {
					req.Header.Set("Idempotency-Key", r.id)
				}
				resp, err := tr.RoundTrip(req)
				switch {
				case err != nil && resp != nil:
					bad("%s: both a response and an error", r.id)
				case err != nil:
					var e *Error
					if !errors.As(err, &e) || e.Attempts < 0 {
						bad("%s: error %v is not an *Error", r.id, err)
					}
					wrappedErrors.Add(1)
				case resp == nil:
					bad("%s: neither a response nor an error", r.id)
				default:
					b, rerr := io.ReadAll(resp.Body)
					resp.Body.Close()
					want := r.id + " " + hex.EncodeToString(sum[:])
					switch {
					case rerr != nil:
						bodyErrors.Add(1) // the connection died mid-body, after the hand-over
					case resp.StatusCode != 200:
						otherStatus.Add(1)
					case string(b) != want:
						clientCorrupt.Add(1)
						firstBad.CompareAndSwap(nil, fmt.Sprintf("%s: body %q, want %q", r.id, b, want))
					default:
						ok200.Add(1)
					}
				}
			}
		}()
	}
	for _, r := range reqs {
		work <- r
	}
	close(work)
	wg.Wait()
	elapsed := time.Since(start)

	// Duplicate executions, by kind of request.
	var dupUnkeyedPOST, dupOther int
	srvState.mu.Lock()
	for id, k := range srvState.executions {
		if k > 1 {
			if srvState.method[id] == "POST" && !srvState.keyed[id] {
				dupUnkeyedPOST++
			} else {
				dupOther++
			}
		}
	}
	attempts := 0
	for _, a := range srvState.attempts {
		attempts += a
	}
	srvState.mu.Unlock()

	var faults []string
	for k := range faultKinds {
		faults = append(faults, fmt.Sprintf("%s %d", faultNames[k], srvState.faults[k].Load()))
	}
	var stopList []string
	for s := range stops {
		if c := stops[s].Load(); c > 0 {
			stopList = append(stopList, fmt.Sprintf("%v %d", StopReason(s), c))
		}
	}
	t.Logf("soak: %d requests, %d concurrent, %v (%.0f req/s); %d attempts reached the server, %d retries",
		n, soakConcurrency, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds(), attempts, retries.Load())
	t.Logf("soak: faults injected: %v; connections refused %d of %d dials", faults, refusedDials.Load(), dials.Load())
	t.Logf("soak: outcomes: 200 %d, other status %d, body read error %d, *Error %d; gave up: %v",
		ok200.Load(), otherStatus.Load(), bodyErrors.Load(), wrappedErrors.Load(), stopList)
	t.Logf("soak: bodies received whole %d, corrupted at the server %d, at the client %d; duplicate executions: unkeyed POST %d, others %d",
		srvState.whole.Load(), srvState.corrupted.Load(), clientCorrupt.Load(), dupUnkeyedPOST, dupOther)

	if c := srvState.corrupted.Load() + clientCorrupt.Load(); c != 0 {
		t.Errorf("%d corrupted bodies; first: %v", c, firstBad.Load())
	}
	if dupUnkeyedPOST != 0 {
		t.Errorf("%d POSTs without an Idempotency-Key executed more than once", dupUnkeyedPOST)
	}
	if badOutcomes.Load() != 0 {
		t.Errorf("%d requests ended in neither a response nor an *Error; first: %v", badOutcomes.Load(), firstBad.Load())
	}
	if total := ok200.Load() + otherStatus.Load() + bodyErrors.Load() + wrappedErrors.Load(); total != int64(n) {
		t.Errorf("%d outcomes for %d requests", total, n)
	}
	if refusedDials.Load() == 0 {
		t.Error("no connection refused")
	}
	for k := range faultKinds {
		if srvState.faults[k].Load() == 0 {
			t.Errorf("fault %q never injected", faultNames[k])
		}
	}
	if retries.Load() == 0 || ok200.Load() < int64(n)*6/10 {
		t.Errorf("%d retries, %d of %d succeeded: the Transport is not recovering", retries.Load(), ok200.Load(), n)
	}

	relWaitConns(t, ln, tr)
}
