package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// bucket is the bucket every operation of the run uses.
const bucket = "demo"

// lab is the run's setup: S3, the proxies in front of it and the clients.
type lab struct {
	cfg config
	s3  *httptest.Server // gofakes3, its memory backend

	// front is an HTTPS proxy, as S3 is reached in production: the SDK then
	// sends uploads aws-chunked with a checksum trailer. plain is a plain
	// HTTP proxy (as a local MinIO would be), over which the SDK signs the
	// payload's SHA-256 instead.
	front, plain *Proxy

	base *http.Transport // trusts the HTTPS proxy; shared by the clients

	client    *s3.Client // via front: httpretry's default MaxBufferedBody
	bigClient *s3.Client // via front: MaxBufferedBody raised to 4 MiB
	plainCli  *s3.Client // via plain

	results []*result
}

// newLab starts S3 and the proxies and builds the clients.
func newLab(cfg config) *lab {
	l := &lab{cfg: cfg}
	l.s3 = httptest.NewServer(gofakes3.New(s3mem.New()).Server()) // plain HTTP: the proxies face the client
	l.front = NewProxy(l.s3.URL, true, cfg.retryAfter)
	l.plain = NewProxy(l.s3.URL, false, cfg.retryAfter)

	pool := x509.NewCertPool()
	pool.AddCert(l.front.Server().Certificate())
	l.base = http.DefaultTransport.(*http.Transport).Clone()
	l.base.TLSClientConfig = &tls.Config{RootCAs: pool}

	hc := &http.Client{Transport: newTransport(l.base, policy, 0)}
	l.client = newS3(l.front.URL, hc, aws.NopRetryer{})
	l.plainCli = newS3(l.plain.URL, hc, aws.NopRetryer{})
	l.bigClient = newS3(l.front.URL, &http.Client{Transport: newTransport(l.base, policy, 4<<20)}, aws.NopRetryer{})
	return l
}

// close stops everything the lab started.
func (l *lab) close() {
	l.base.CloseIdleConnections()
	l.front.Close()
	l.plain.Close()
	l.s3.Close()
}

// result is one operation's outcome, as the transport and the proxy saw it.
type result struct {
	Name     string
	Err      error
	Attempts int       // sent through httpretry's Base
	Reasons  []string  // why each retry was made (OnRetry)
	Stop     string    // why retries stopped on a retryable outcome (OnGiveUp)
	Bodies   []sdkBody // the SDK's request bodies that were retried
	Records  []Record  // what the proxy saw during the operation
	Verified int64     // bytes whose SHA-256 matched after a download
	Note     string
}

// executed returns how many of the operation's requests S3 carried out.
func (r *result) executed() int {
	n := 0
	for _, rec := range r.Records {
		if rec.Executed {
			n++
		}
	}
	return n
}

// step runs one operation through px and records its result.
func (l *lab) step(name string, px *Proxy, fn func(ctx context.Context) (verified int64, err error)) *result {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ctx, st := withStats(ctx)
	from := px.Len()
	verified, err := fn(ctx)
	r := &result{Name: name, Err: err, Verified: verified, Records: px.Records(from)}
	r.Attempts, r.Reasons, r.Stop, r.Bodies = st.snapshot()
	l.results = append(l.results, r)
	return r
}

// object is an object's key and its random, incompressible bytes.
type object struct {
	key  string
	data []byte
	sum  string // hex SHA-256 of data
}

// newObject returns an object of size bytes drawn from seed.
func newObject(key string, size int, seed uint64) object {
	var s [32]byte
	binary.LittleEndian.PutUint64(s[:], seed)
	data := make([]byte, size)
	rand.NewChaCha8(s).Read(data)
	sum := sha256.Sum256(data)
	return object{key: key, data: data, sum: hex.EncodeToString(sum[:])}
}

// path is the object's URL path, as the proxy matches it.
func (o object) path() string { return "/" + bucket + "/" + o.key }

// put uploads o with c, with the call's own options if any. The body is a
// *bytes.Reader, seekable, as the SDK requires to sign or checksum a body
// over plain HTTP and to rewind it for its own retries; the SDK still
// hands the transport a reader of its own, without GetBody.
func put(ctx context.Context, c *s3.Client, o object, opts ...func(*s3.Options)) error {
	in := &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(o.key), Body: bytes.NewReader(o.data)}
	_, err := c.PutObject(ctx, in, opts...)
	return err
}

// getVerified downloads o with c and checks its SHA-256. It returns the
// number of bytes verified.
func getVerified(ctx context.Context, c *s3.Client, o object) (int64, error) {
	out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(o.key)})
	if err != nil {
		return 0, err
	}
	defer out.Body.Close()
	h := sha256.New()
	n, err := io.Copy(h, out.Body)
	if err != nil {
		return 0, err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != o.sum || n != int64(len(o.data)) {
		return 0, fmt.Errorf("%s: got %d bytes, sha256 %.12s…, want %d bytes, %.12s…", o.key, n, got, len(o.data), o.sum)
	}
	return n, nil
}
