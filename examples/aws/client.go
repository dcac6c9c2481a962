package main

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/httpretry/httpretry"
)

// policy keeps the run quick: waits from 25 ms. Equal jitter (half the
// exponential step, plus up to as much again at random) gives every wait a
// floor, so six retries always outlast the 300 ms outage of the run (at
// least 12.5+25+50+100+200+200 ms); full jitter, the default, spreads
// clients better but may draw six short waits.
var policy = httpretry.Policy{
	MaxRetries: 6,
	BaseDelay:  25 * time.Millisecond,
	MaxDelay:   400 * time.Millisecond,
	Jitter:     httpretry.JitterEqual,
}

// s3Classifier retries what httpretry retries by default, and a 500: AWS
// documents S3's 500 InternalError as retryable, and the SDK's own
// retryer retries it. httpretry leaves 500 alone by default because most
// APIs mean "bug" by it.
//
// The classifier only says the outcome is transient: a POST is still not
// re-sent, whatever it returns, and neither is a body over MaxBufferedBody.
func s3Classifier(req *http.Request, resp *http.Response, err error) (bool, string) {
	if resp != nil && resp.StatusCode == http.StatusInternalServerError {
		return true, "status 500 (S3 InternalError)"
	}
	return httpretry.DefaultClassifier(req, resp, err)
}

// newTransport returns the retrying transport of the run: Base counts
// attempts, the hooks note why each retry happened and why retries
// stopped, per operation (see opStats). maxBuffered is MaxBufferedBody;
// zero is httpretry's default of 1 MiB.
func newTransport(base http.RoundTripper, p httpretry.Policy, maxBuffered int64) *httpretry.Transport {
	return &httpretry.Transport{
		Base:            countingBase{base},
		Policy:          p,
		Classifier:      s3Classifier,
		MaxBufferedBody: maxBuffered,
		OnRetry: func(e httpretry.RetryEvent) {
			if st := statsOf(e.Request.Context()); st != nil {
				st.note(e.Reason, "")
				if b := e.Request.Body; b != nil && b != http.NoBody {
					// e.Request is the SDK's own request: look, don't touch.
					st.mu.Lock()
					st.bodies = append(st.bodies, sdkBody{typ: fmt.Sprintf("%T", b), getBody: e.Request.GetBody != nil})
					st.mu.Unlock()
				}
			}
		},
		OnGiveUp: func(e httpretry.RetryEvent) {
			if st := statsOf(e.Request.Context()); st != nil {
				st.note("", e.Stop.String())
			}
		},
	}
}

// newS3 returns an S3 client for endpoint that sends through hc and
// retries with retryer. aws.NopRetryer{} as Options.Retryer turns the SDK's
// own retries off, so that httpretry alone retries (RetryMaxAttempts: 1
// with no Retryer would do too: a standard retryer allowed one attempt).
//
// The options are built directly, so nothing reads ~/.aws or the network.
// Two of them must then be set by hand to match what
// config.LoadDefaultConfig gives: unset, RequestChecksumCalculation acts as
// when_required and PutObject is sent without any checksum.
func newS3(endpoint string, hc *http.Client, retryer aws.Retryer) *s3.Client {
	return s3.New(s3.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		UsePathStyle: true, // gofakes3 on 127.0.0.1 has no bucket subdomains
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "secret", Source: "example"}, nil
		}),
		Retryer:                    retryer,
		HTTPClient:                 hc,
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenSupported,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenSupported,
	})
}

// opStats is what one S3 operation cost at the transport. The run puts one
// in each operation's context; the SDK passes that context down to the
// *http.Request, where Base and the hooks find it.
type opStats struct {
	mu       sync.Mutex
	attempts int
	reasons  []string // of each retry, from OnRetry
	stop     string   // from OnGiveUp, when retries stopped on a retryable outcome
	// bodies are the SDK's request bodies that were retried, as OnRetry
	// saw them: their type and whether the SDK had set GetBody.
	bodies []sdkBody
}

// sdkBody describes a request body as the SDK handed it to the transport.
type sdkBody struct {
	typ     string // the Body's dynamic type
	getBody bool   // Request.GetBody was set
}

// note records a retry's reason or a give-up's stop reason.
func (s *opStats) note(reason, stop string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if reason != "" {
		s.reasons = append(s.reasons, reason)
	}
	if stop != "" {
		s.stop = stop
	}
}

// snapshot returns the counts so far.
func (s *opStats) snapshot() (attempts int, reasons []string, stop string, bodies []sdkBody) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.attempts, append([]string(nil), s.reasons...), s.stop, append([]sdkBody(nil), s.bodies...)
}

type statsKey struct{}

// withStats returns ctx carrying a fresh opStats.
func withStats(ctx context.Context) (context.Context, *opStats) {
	st := &opStats{}
	return context.WithValue(ctx, statsKey{}, st), st
}

// statsOf returns the opStats of ctx, or nil.
func statsOf(ctx context.Context) *opStats {
	st, _ := ctx.Value(statsKey{}).(*opStats)
	return st
}

// countingBase is httpretry's Base: every attempt passes through it once.
type countingBase struct{ next http.RoundTripper }

// RoundTrip counts the attempt and sends it.
func (c countingBase) RoundTrip(req *http.Request) (*http.Response, error) {
	if st := statsOf(req.Context()); st != nil {
		st.mu.Lock()
		st.attempts++
		st.mu.Unlock()
	}
	return c.next.RoundTrip(req)
}
