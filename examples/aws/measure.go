package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// memRow is one measurement: bytes allocated per PutObject of a body of
// size, with a plain transport and with httpretry at MaxBufferedBody limit.
type memRow struct {
	size  int
	limit int64 // MaxBufferedBody; 0 is httpretry's default, 1 MiB
	wire  int64 // Content-Length on the wire (aws-chunked framing included)
	runs  int   // uploads measured each way
	bare  int64 // bytes allocated per upload without httpretry
	retry int64 // bytes allocated per upload with httpretry
}

// extra is what httpretry added per upload.
func (m memRow) extra() int64 { return m.retry - m.bare }

// buffered reports whether httpretry keeps this body for a replay: the
// wire length, not the object's size, is held against the limit.
func (m memRow) buffered() bool {
	limit := m.limit
	if limit == 0 {
		limit = 1 << 20
	}
	return m.wire <= limit
}

// memCases are the sizes measured: well under the limit, just under it on
// the wire, exactly the limit as an object (over it on the wire), over it,
// and over it with the limit raised.
var memCases = []struct {
	size  int
	limit int64
}{
	{100 << 10, 0},
	{1000 << 10, 0},
	{1 << 20, 0},
	{1536 << 10, 0},
	{1536 << 10, 4 << 20},
}

// measureBuffering measures what httpretry's body buffer costs an S3
// upload. It sends about volume bytes of PutObjects per case (at least
// four), over HTTPS as to S3, to a
// loopback sink that discards the body, once through a plain
// *http.Transport and once through httpretry over that same transport, and
// compares runtime.MemStats.TotalAlloc, the bytes allocated, per upload.
// Everything else (the SDK's signing and checksums, TLS, the sink) costs
// the same both ways, so the difference is httpretry's, almost all of it
// the buffer. Nothing else runs meanwhile. Averaging over a volume rather
// than a count evens out the noise of pooled buffers that the race
// detector makes sync.Pool drop at random.
func measureBuffering(volume int) ([]memRow, error) {
	sk := newSink()
	defer sk.close()
	bare := newS3(sk.srv.URL, &http.Client{Transport: sk.base}, aws.NopRetryer{})
	var rows []memRow
	for _, c := range memCases {
		retrying := newS3(sk.srv.URL, &http.Client{Transport: newTransport(sk.base, policy, c.limit)}, aws.NopRetryer{})
		o := newObject("mem", c.size, 9)
		row := memRow{size: c.size, limit: c.limit, runs: max(4, volume/c.size)}
		var err error
		if row.bare, err = allocPerUpload(bare, o, row.runs); err != nil {
			return nil, err
		}
		if row.retry, err = allocPerUpload(retrying, o, row.runs); err != nil {
			return nil, err
		}
		row.wire = sk.wire.Load()
		rows = append(rows, row)
	}
	return rows, nil
}

// sink is a loopback HTTPS server that reads and discards uploads, and a
// transport that trusts it.
type sink struct {
	srv  *httptest.Server
	base *http.Transport
	wire atomic.Int64 // the last upload's Content-Length
}

// newSink starts a sink.
func newSink() *sink {
	sk := &sink{}
	sk.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sk.wire.Store(r.ContentLength)
		io.Copy(io.Discard, r.Body)
		w.Header().Set("ETag", `"0"`)
	}))
	pool := x509.NewCertPool()
	pool.AddCert(sk.srv.Certificate())
	sk.base = http.DefaultTransport.(*http.Transport).Clone()
	sk.base.TLSClientConfig = &tls.Config{RootCAs: pool}
	return sk
}

// close stops the sink and closes its connections.
func (sk *sink) close() {
	sk.base.CloseIdleConnections()
	sk.srv.Close()
}

// allocPerUpload returns the bytes allocated per PutObject of o with c,
// over runs uploads after one to warm up (connection, TLS, pools).
func allocPerUpload(c *s3.Client, o object, runs int) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := put(ctx, c, o); err != nil {
		return 0, err
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		if err := put(ctx, c, o); err != nil {
			return 0, err
		}
	}
	runtime.ReadMemStats(&after)
	return int64(after.TotalAlloc-before.TotalAlloc) / int64(runs), nil
}
