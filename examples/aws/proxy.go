package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Fault is what the proxy does with one request.
type Fault int

const (
	// Pass forwards the request to S3 and relays its answer.
	Pass Fault = iota
	// ResetBefore resets the connection as soon as the request arrives:
	// S3 never sees it.
	ResetBefore
	// ResetAfter forwards the request, lets S3 carry it out, then resets
	// the connection instead of answering. The client cannot tell this from
	// ResetBefore, which is why a POST must not be re-sent after it.
	ResetAfter
	// Unavailable answers 503 ServiceUnavailable, without Retry-After.
	Unavailable
	// RetryAfter answers 503 ServiceUnavailable with Retry-After.
	RetryAfter
	// SlowDown answers 503 with S3's SlowDown error body, S3's way of
	// saying "too many requests".
	SlowDown
	// InternalError answers 500 with S3's InternalError body, which AWS
	// documents as retryable.
	InternalError
)

var faultNames = [...]string{"pass", "reset before S3", "reset after S3", "503", "503 Retry-After", "503 SlowDown", "500 InternalError"}

// String names the fault for the report.
func (f Fault) String() string { return faultNames[f] }

// status returns the status a fault answers with, 0 for one that answers
// nothing.
func (f Fault) status() int {
	switch f {
	case Unavailable, RetryAfter, SlowDown:
		return http.StatusServiceUnavailable
	case InternalError:
		return http.StatusInternalServerError
	}
	return 0
}

// Record is what the proxy saw and did for one request that reached it.
type Record struct {
	Arrived  time.Time // the request's headers arrived
	Answered time.Time // the proxy answered or reset
	Method   string
	Path     string // URL path: /bucket/key
	// SDKAttempt is the SDK's amz-sdk-request header ("attempt=2; max=3"):
	// the SDK's own retry count, which httpretry's retries repeat.
	SDKAttempt string
	Fault      Fault
	Outage     bool // the fault came from Outage
	// Wire is the request's Content-Length as received: the body's
	// length on the wire, aws-chunked framing included.
	Wire int64
	// Executed is true when the request was forwarded to S3, which then
	// carried it out (or refused it) whatever happened to the answer.
	Executed bool
	// Status is what S3 answered, or what the proxy answered instead; 0
	// for a reset before S3.
	Status int
	// WireSHA256 is the hash of the body as it came over the wire,
	// aws-chunked framing and trailer included; empty when it was not read.
	WireSHA256 string
	// Checked says what the S3-like checks verified on the body (see
	// verifyUpload); empty for requests without a body.
	Checked string
	// Rejected is the S3 error code when a check failed.
	Rejected string
}

// Proxy is a fault-injecting reverse proxy in front of S3. Faults come
// from a schedule (Schedule, Always), from an outage (Outage) or at random
// (Chaos); everything else is forwarded. Before forwarding an upload it
// checks the body as S3 would (verifyUpload), so a retry that re-sent
// different bytes would be refused. It records every request.
type Proxy struct {
	URL string

	srv        *httptest.Server
	backend    string       // S3's URL
	client     *http.Client // to S3
	retryAfter int          // seconds, for RetryAfter

	mu          sync.Mutex
	plans       []*plan
	outageUntil time.Time
	chaos       *rand.Rand // nil when calm
	chaosRate   float64
	records     []Record
}

// plan is a scheduled run of faults for the requests that match.
type plan struct {
	match   func(*http.Request) bool
	faults  []Fault // consumed in order
	forever bool    // faults[0] for every match
}

// NewProxy starts a proxy in front of backend on a loopback port, over
// TLS when useTLS is set (the client must then trust Certificate).
// retryAfter is the Retry-After, in seconds, of the RetryAfter fault.
func NewProxy(backend string, useTLS bool, retryAfter int) *Proxy {
	p := &Proxy{backend: backend, retryAfter: retryAfter, client: &http.Client{Transport: &http.Transport{}}}
	p.srv = httptest.NewUnstartedServer(http.HandlerFunc(p.serve))
	if useTLS {
		p.srv.StartTLS() // HTTP/1.1 only, so a connection can be hijacked and reset
	} else {
		p.srv.Start()
	}
	p.URL = p.srv.URL
	return p
}

// Server returns the proxy's test server, for its certificate.
func (p *Proxy) Server() *httptest.Server { return p.srv }

// Close stops the proxy and closes its connections.
func (p *Proxy) Close() {
	p.srv.Close()
	p.client.CloseIdleConnections()
}

// On matches requests by method and URL path ("/bucket/key").
func On(method, path string) func(*http.Request) bool {
	return func(r *http.Request) bool { return r.Method == method && r.URL.Path == path }
}

// Schedule gives the next requests that match these faults, one each, in
// order. Plans are looked at in the order they were scheduled.
func (p *Proxy) Schedule(match func(*http.Request) bool, faults ...Fault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.plans = append(p.plans, &plan{match: match, faults: faults})
}

// Always gives every request that matches the fault f.
func (p *Proxy) Always(match func(*http.Request) bool, f Fault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.plans = append(p.plans, &plan{match: match, faults: []Fault{f}, forever: true})
}

// Outage resets every connection that brings a request during d from now,
// as a restarting server or a load balancer without healthy targets does.
// It returns the time the outage ends.
func (p *Proxy) Outage(d time.Duration) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.outageUntil = time.Now().Add(d)
	return p.outageUntil
}

// Chaos gives each unscheduled request a random fault with probability
// rate, from a generator seeded with seed. Rate 0 ends it.
func (p *Proxy) Chaos(rate float64, seed uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.chaosRate, p.chaos = rate, nil
	if rate > 0 {
		p.chaos = rand.New(rand.NewPCG(seed, seed))
	}
}

// chaosFaults are the faults Chaos draws from. RetryAfter is left out: it
// would make the run slow, not more instructive.
var chaosFaults = []Fault{ResetBefore, ResetAfter, Unavailable, SlowDown, InternalError}

// Records returns a copy of the records from index from on.
func (p *Proxy) Records(from int) []Record {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Record(nil), p.records[min(from, len(p.records)):]...)
}

// Len returns the number of records so far.
func (p *Proxy) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.records)
}

// next decides the fault for r, and whether the outage gave it.
func (p *Proxy) next(r *http.Request) (Fault, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Now().Before(p.outageUntil) {
		return ResetBefore, true
	}
	for _, pl := range p.plans {
		if len(pl.faults) == 0 || !pl.match(r) {
			continue
		}
		f := pl.faults[0]
		if !pl.forever {
			pl.faults = pl.faults[1:]
		}
		return f, false
	}
	if p.chaos != nil && p.chaos.Float64() < p.chaosRate {
		return chaosFaults[p.chaos.IntN(len(chaosFaults))], false
	}
	return Pass, false
}

// record appends rec, stamped with the time of the answer. It is called
// before the answer is written, so a client that has its answer finds the
// record there.
func (p *Proxy) record(rec Record) {
	rec.Answered = time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.records = append(p.records, rec)
}

// serve handles one request: a fault, or the S3-like checks and a forward.
func (p *Proxy) serve(w http.ResponseWriter, r *http.Request) {
	rec := Record{Arrived: time.Now(), Method: r.Method, Path: r.URL.Path, SDKAttempt: r.Header.Get("Amz-Sdk-Request"), Wire: r.ContentLength}
	rec.Fault, rec.Outage = p.next(r)
	switch rec.Fault {
	case ResetBefore:
		p.record(rec)
		reset(w)
		return
	case Unavailable, RetryAfter, SlowDown, InternalError:
		// Read the body first, as a front end does before it answers: the
		// client then always gets the answer, not a write error. Hash it,
		// to compare with the retry's.
		h := sha256.New()
		if n, _ := io.Copy(h, r.Body); n > 0 {
			rec.WireSHA256 = hex.EncodeToString(h.Sum(nil))
		}
		rec.Status = rec.Fault.status()
		p.record(rec)
		p.answerFault(w, rec.Fault)
		return
	}

	wire, err := io.ReadAll(r.Body)
	if err != nil {
		p.record(rec)
		reset(w)
		return
	}
	if len(wire) > 0 {
		sum := sha256.Sum256(wire)
		rec.WireSHA256 = hex.EncodeToString(sum[:])
	}
	payload, checked, code := verifyUpload(r.Header, wire)
	rec.Checked = checked
	if code != "" {
		rec.Rejected, rec.Status = code, http.StatusBadRequest
		p.record(rec)
		writeS3Error(w, http.StatusBadRequest, code, "the body did not match its checksum: "+checked)
		return
	}

	resp, err := p.forward(r, payload)
	if err != nil {
		rec.Status = http.StatusBadGateway
		p.record(rec)
		writeS3Error(w, http.StatusBadGateway, "BadGateway", err.Error())
		return
	}
	rec.Executed, rec.Status = true, resp.status
	p.record(rec)
	if rec.Fault == ResetAfter {
		reset(w) // S3 acted; its answer is lost
		return
	}
	for k, vs := range resp.header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.status)
	w.Write(resp.body)
}

// s3Response is S3's answer, read whole.
type s3Response struct {
	status int
	header http.Header
	body   []byte
}

// forward sends r to S3 with its verified payload in place of the wire
// body: S3's front end strips aws-chunked framing before storage does.
func (p *Proxy) forward(r *http.Request, payload []byte) (*s3Response, error) {
	out, err := http.NewRequestWithContext(r.Context(), r.Method, p.backend+r.URL.RequestURI(), bytes.NewReader(payload))
	if err != nil {
		return nil, err
	}
	for k, vs := range r.Header {
		out.Header[k] = vs
	}
	out.ContentLength = int64(len(payload))
	out.Header.Del("Content-Length")
	out.Header.Del("X-Amz-Decoded-Content-Length")
	out.Header.Del("X-Amz-Trailer")
	if ce := strings.TrimSpace(strings.ReplaceAll(out.Header.Get("Content-Encoding"), "aws-chunked", "")); ce == "" || ce == "," {
		out.Header.Del("Content-Encoding")
	}
	if strings.HasPrefix(out.Header.Get("X-Amz-Content-Sha256"), "STREAMING-") {
		out.Header.Set("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD")
	}
	resp, err := p.client.Do(out)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return &s3Response{status: resp.StatusCode, header: resp.Header, body: body}, nil
}

// answerFault writes the response of a status fault, in S3's XML error
// format, which the SDK parses into an API error.
func (p *Proxy) answerFault(w http.ResponseWriter, f Fault) {
	switch f {
	case Unavailable:
		writeS3Error(w, f.status(), "ServiceUnavailable", "Service is unable to handle request.")
	case RetryAfter:
		w.Header().Set("Retry-After", strconv.Itoa(p.retryAfter))
		writeS3Error(w, f.status(), "ServiceUnavailable", "Service is unable to handle request.")
	case SlowDown:
		writeS3Error(w, f.status(), "SlowDown", "Please reduce your request rate.")
	case InternalError:
		writeS3Error(w, f.status(), "InternalError", "We encountered an internal error. Please try again.")
	}
}

// writeS3Error writes an S3 error document.
func writeS3Error(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>`+"\n"+
		`<Error><Code>%s</Code><Message>%s</Message><RequestId>FAULT</RequestId></Error>`, code, msg)
}

// reset drops the client's connection with a TCP reset (SO_LINGER 0), the
// way a crashed server or an idle-timeout on a middlebox does, rather than
// with an orderly close.
func reset(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler) // not hijackable: abort the response instead
	}
	raw := conn
	if nc, ok := conn.(interface{ NetConn() net.Conn }); ok {
		raw = nc.NetConn() // under TLS: reset the TCP connection itself
	}
	if tcp, ok := raw.(*net.TCPConn); ok {
		tcp.SetLinger(0)
	}
	raw.Close()
}
