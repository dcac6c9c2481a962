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
const soakDefaultN = 1500

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

// soakGenerate draws n requests from the seed: 40% GET, 25% PUT, 20% POST
// without and 15% with an Idempotency-Key, bodies up to 16 KiB and one in
// ten up to 192 KiB, half of them with GetBody.
func soakGenerate(n int) []soakRequest {
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
	return reqs
}

// TestSoak sends HTTPRETRY_SOAK_N (default soakDefaultN) logical requests,
// 64 at a time, through one Transport to a server that injects 30% faults
// (and a dialer that sends a share of new connections to a closed port),
// and checks that no body is corrupted, no POST without a key is executed
// twice, every request ends in a response or an *Error, and goroutines and
// connections return to their baseline.
//
// It runs twice: over HTTP/1.1 with the faults above, and with a fifth as
// many requests over HTTP/2 with GOAWAY, REFUSED_STREAM, stream resets and
// 503s.
func TestSoak(t *testing.T) {
	relNoLeaks(t)
	n := soakDefaultN
	if v := os.Getenv("HTTPRETRY_SOAK_N"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n <= 0 {
			t.Fatalf("HTTPRETRY_SOAK_N=%q: want a positive number", v)
		}
	}
	t.Run("HTTP/1.1", func(t *testing.T) { soakHTTP1(t, n) })
	// Each HTTP/2 GOAWAY costs TLS handshakes for the requests in flight,
	// slow under the race detector: a fifth of the requests go there.
	t.Run("HTTP/2", func(t *testing.T) { soakHTTP2(t, max(n/5, 1)) })
}

func soakHTTP1(t *testing.T, n int) {
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
	var stops [64]atomic.Int64 // by StopReason
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

	reqs := soakGenerate(n)

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
	// 70% of first attempts succeed; storm control may refuse retries, but
	// retrying must never leave fewer successes than not retrying would.
	if retries.Load() == 0 || ok200.Load() < int64(n)*55/100 {
		t.Errorf("%d retries, %d of %d succeeded: the Transport is not recovering", retries.Load(), ok200.Load(), n)
	}

	relWaitConns(t, ln, tr)
}

// The HTTP/2 soak's faults, drawn per stream.
const (
	h2FaultRefused      = iota // RST_STREAM REFUSED_STREAM at once: not executed
	h2FaultGoAwayBefore        // GOAWAY not covering the stream, then close: not executed
	h2FaultGoAwayAfter         // executed, then GOAWAY covering the stream, then close
	h2FaultResetMidBody        // executed, 200 and half a body, then RST_STREAM INTERNAL_ERROR
	h2Fault503                 // 503 without reading the body: not executed
	h2FaultKinds
)

var h2FaultNames = [h2FaultKinds]string{"refused stream", "GOAWAY before", "GOAWAY after", "reset mid-body", "503"}

// soakH2Body frames a request body so that the hand-written HTTP/2 server,
// which decodes no headers, can check it: sha256 of the rest, the request's
// sequence number, whether it is a POST without a key, then the payload.
func soakH2Body(r soakRequest) []byte {
	payload := r.body()
	if payload == nil {
		return nil
	}
	b := make([]byte, 41+len(payload))
	binary.BigEndian.PutUint64(b[32:], r.seq)
	if r.method == "POST" && !r.key {
		b[40] = 1
	}
	copy(b[41:], payload)
	sum := sha256.Sum256(b[32:])
	copy(b, sum[:])
	return b
}

// soakH2State is what the HTTP/2 soak server records.
type soakH2State struct {
	mu          sync.Mutex
	rng         *rand.Rand
	executions  map[uint64]int
	unkeyedPOST map[uint64]bool
	faults      [h2FaultKinds]atomic.Int64
	streams     atomic.Int64
	whole       atomic.Int64
	corrupted   atomic.Int64
}

func (s *soakH2State) draw() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rng.Float64() >= soakFaultRate {
		return -1
	}
	return s.rng.IntN(h2FaultKinds)
}

// serve runs one HTTP/2 connection: frames are read and answered on this
// goroutine, streams multiplexed as the client sends them. A GOAWAY is
// graceful, as servers send it: the streams it covers are still served,
// and the connection closes once they are done.
func (s *soakH2State) serve(c net.Conn) {
	c.SetDeadline(time.Now().Add(time.Minute))
	preface := make([]byte, 24)
	if _, err := io.ReadFull(c, preface); err != nil {
		return
	}
	if relH2Write(c, relH2Settings, 0, 0, nil) != nil {
		return
	}
	type stream struct {
		body  []byte
		fault int
	}
	streams := map[uint32]*stream{} // open and to be answered
	var goingAway bool
	var last uint32 // with goingAway: the last stream served
	goAway := func(lastID, code uint32) error {
		goingAway, last = true, lastID
		for id := range streams {
			if id > last {
				delete(streams, id) // the client sends these again itself
			}
		}
		return relH2Write(c, relH2GoAway, 0, 0, relU32s(lastID, code))
	}
	var hdr [9]byte
	lingering := false
	for {
		if goingAway && len(streams) == 0 && !lingering {
			// Let the client read the GOAWAY before the connection goes:
			// closing on frames it still sends would reset it first.
			lingering = true
			c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		}
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return
		}
		n := int(hdr[0])<<16 | int(hdr[1])<<8 | int(hdr[2])
		typ, flags := hdr[3], hdr[4]
		id := binary.BigEndian.Uint32(hdr[5:]) & 0x7fffffff
		payload := make([]byte, n)
		if _, err := io.ReadFull(c, payload); err != nil {
			return
		}
		var st *stream
		switch typ {
		case relH2Settings:
			if flags&relH2Ack == 0 && relH2Write(c, relH2Settings, relH2Ack, 0, nil) != nil {
				return
			}
			continue
		case relH2Headers:
			if goingAway {
				continue // sent before our GOAWAY arrived: not served
			}
			s.streams.Add(1)
			st = &stream{fault: s.draw()}
			if st.fault >= 0 {
				s.faults[st.fault].Add(1)
			}
			switch st.fault {
			case h2FaultRefused:
				if relH2Write(c, relH2Rst, 0, id, relU32s(h2RefusedStream)) != nil {
					return
				}
				continue
			case h2FaultGoAwayBefore:
				if goAway(max(id, 2)-2, 0) != nil {
					return
				}
				continue
			case h2Fault503:
				if relH2Write(c, relH2Headers, relH2EndHeaders|relH2EndStream, id, []byte{0x08, 3, '5', '0', '3'}) != nil {
					return
				}
				continue
			}
			streams[id] = st
		case relH2Data:
			if n > 0 { // give the flow-control window back
				if relH2Write(c, relH2Window, 0, 0, relU32s(uint32(n))) != nil {
					return
				}
				if streams[id] != nil && flags&relH2EndStream == 0 && relH2Write(c, relH2Window, 0, id, relU32s(uint32(n))) != nil {
					return
				}
			}
			if st = streams[id]; st == nil {
				continue
			}
			st.body = append(st.body, payload...)
		default:
			continue
		}
		if flags&relH2EndStream == 0 {
			continue
		}
		// The request is whole: execute it, then answer or fail.
		delete(streams, id)
		answer := "get"
		if len(st.body) > 0 {
			s.whole.Add(1)
			if len(st.body) < 41 {
				s.corrupted.Add(1)
				continue
			}
			sum := sha256.Sum256(st.body[32:])
			if !bytes.Equal(sum[:], st.body[:32]) {
				s.corrupted.Add(1)
			}
			seq := binary.BigEndian.Uint64(st.body[32:])
			s.mu.Lock()
			s.executions[seq]++
			s.unkeyedPOST[seq] = st.body[40] == 1
			s.mu.Unlock()
			whole := sha256.Sum256(st.body)
			answer = hex.EncodeToString(whole[:])
		}
		switch st.fault {
		case h2FaultGoAwayAfter:
			if !goingAway && goAway(id, 0) != nil { // covers the stream, which is never answered
				return
			}
		case h2FaultResetMidBody:
			if relH2Write(c, relH2Headers, relH2EndHeaders, id, []byte{0x88}) != nil ||
				relH2Write(c, relH2Data, 0, id, []byte(answer[:len(answer)/2])) != nil ||
				relH2Write(c, relH2Rst, 0, id, relU32s(2)) != nil {
				return
			}
		default:
			if relH2Respond(c, id, answer) != nil {
				return
			}
		}
	}
}

func soakHTTP2(t *testing.T, n int) {
	state := &soakH2State{rng: rand.New(rand.NewPCG(soakSeed, 4)), executions: map[uint64]int{}, unkeyedPOST: map[uint64]bool{}}
	srv := relStartH2With(t, func(_ *relH2Server, c net.Conn) { state.serve(c) })
	client := srv.client
	random := &soakRand{r: rand.New(rand.NewPCG(soakSeed, 5))}
	var retries atomic.Int64
	var stops [64]atomic.Int64 // by StopReason
	tr := &Transport{
		Base:            client,
		Policy:          Policy{MaxRetries: 4, BaseDelay: time.Millisecond, MaxDelay: 20 * time.Millisecond},
		AttemptTimeout:  2 * time.Second,
		MaxBufferedBody: 96 << 10,
		Random:          random.Float64,
		OnRetry:         func(RetryEvent) { retries.Add(1) },
		OnGiveUp: func(e RetryEvent) {
			if int(e.Stop) >= 0 && int(e.Stop) < len(stops) {
				stops[e.Stop].Add(1)
			}
		},
	}
	reqs := soakGenerate(n)
	var ok200, otherStatus, bodyErrors, wrappedErrors, clientCorrupt, badOutcomes atomic.Int64
	var firstBad atomic.Value
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
				framed := soakH2Body(r)
				var body io.Reader
				if framed != nil {
					body = io.NopCloser(bytes.NewReader(framed))
					if r.getter {
						body = bytes.NewReader(framed)
					}
				}
				req, _ := http.NewRequest(r.method, srv.url+"/"+r.id, body)
				if r.key {
					req.Header.Set("Idempotency-Key", r.id)
				}
				want := "get"
				if framed != nil {
					sum := sha256.Sum256(framed)
					want = hex.EncodeToString(sum[:])
				}
				resp, err := tr.RoundTrip(req)
				switch {
				case err != nil && resp != nil:
					bad("%s: both a response and an error", r.id)
				case err != nil:
					var e *Error
					if !errors.As(err, &e) {
						bad("%s: error %v is not an *Error", r.id, err)
					}
					wrappedErrors.Add(1)
				case resp == nil:
					bad("%s: neither a response nor an error", r.id)
				default:
					b, rerr := io.ReadAll(resp.Body)
					resp.Body.Close()
					switch {
					case rerr != nil:
						bodyErrors.Add(1)
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

	var dupUnkeyedPOST, dupOther int
	state.mu.Lock()
	for seq, k := range state.executions {
		if k > 1 {
			if state.unkeyedPOST[seq] {
				dupUnkeyedPOST++
			} else {
				dupOther++
			}
		}
	}
	state.mu.Unlock()
	var faults []string
	for k := range h2FaultKinds {
		faults = append(faults, fmt.Sprintf("%s %d", h2FaultNames[k], state.faults[k].Load()))
	}
	var stopList []string
	for s := range stops {
		if c := stops[s].Load(); c > 0 {
			stopList = append(stopList, fmt.Sprintf("%v %d", StopReason(s), c))
		}
	}
	t.Logf("soak h2: %d requests, %d concurrent, %v (%.0f req/s); %d streams reached the server over %d connections, %d retries",
		n, soakConcurrency, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds(), state.streams.Load(), srv.ln.total.Load(), retries.Load())
	t.Logf("soak h2: faults injected: %v", faults)
	t.Logf("soak h2: outcomes: 200 %d, other status %d, body read error %d, *Error %d; gave up: %v",
		ok200.Load(), otherStatus.Load(), bodyErrors.Load(), wrappedErrors.Load(), stopList)
	t.Logf("soak h2: bodies received whole %d, corrupted at the server %d, at the client %d; duplicate executions: unkeyed POST %d, others %d",
		state.whole.Load(), state.corrupted.Load(), clientCorrupt.Load(), dupUnkeyedPOST, dupOther)

	if c := state.corrupted.Load() + clientCorrupt.Load(); c != 0 {
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
	for k := range h2FaultKinds {
		if state.faults[k].Load() == 0 {
			t.Errorf("fault %q never injected", h2FaultNames[k])
		}
	}
	// 70% of first attempts succeed; storm control may refuse retries, but
	// retrying must never leave fewer successes than not retrying would.
	if retries.Load() == 0 || ok200.Load() < int64(n)*55/100 {
		t.Errorf("%d retries, %d of %d succeeded: the Transport is not recovering", retries.Load(), ok200.Load(), n)
	}
	relWaitConns(t, srv.ln, client)
}
