// Package bench compares httpretry with other Go retry libraries: the
// success-path cost of each as an http.RoundTripper (cases.go, run by
// go test -bench and by cmd/report) and their behaviour in a retry storm
// (package storm, run by cmd/storm).
//
// Every system under comparison is built in this one file from the same
// Params, so that a row added here, such as a variant of httpretry with a
// feature turned off, shows up in every benchmark and storm table.
package bench

import (
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/PuerkitoBio/rehttp"
	"github.com/failsafe-go/failsafe-go/failsafehttp"
	"github.com/hashicorp/go-retryablehttp"
	"github.com/httpretry/httpretry"
)

// Params are the retry numbers every system is configured with.
type Params struct {
	// MaxRetries is the number of attempts after the first one.
	MaxRetries int
	// BaseDelay is the first backoff step.
	BaseDelay time.Duration
	// MaxDelay caps every backoff wait.
	MaxDelay time.Duration
	// RandomSeed, when not zero, seeds the random values of httpretry's
	// jitter (Transport.Random); the peers draw their own. The storm
	// simulator gives each client its own seed, the same in every
	// variant, so that storm control on and off meet the same draws.
	RandomSeed uint64
}

// DefaultParams are httpretry's own defaults, used by the benchmarks.
var DefaultParams = Params{MaxRetries: 5, BaseDelay: 200 * time.Millisecond, MaxDelay: 10 * time.Second}

// System is one retrying RoundTripper under comparison.
type System struct {
	// Name labels the system's rows and series.
	Name string
	// New wraps base, which sends each attempt, with the system's retries.
	New func(base http.RoundTripper, p Params) http.RoundTripper
	// Variant marks httpretry with a part turned off: it is in every
	// report, but make storm runs it only when named, to stay within a
	// minute.
	Variant bool
}

// retryableStatuses are the statuses every system retries, httpretry's
// default set; the peers' own defaults retry every 5xx but 501.
var retryableStatuses = []int{429, 502, 503, 504}

// Systems are the systems under comparison, in the order of every table.
// Each peer is set up the way its documentation shows for HTTP, with the
// shared Params and its own jitter (retryablehttp's default backoff has
// none; failsafe's is ±50%, applied after a Retry-After too); none logs.
var Systems = []System{
	{Name: "bare", New: func(base http.RoundTripper, _ Params) http.RoundTripper { return base }},
	{Name: "httpretry", New: newHTTPRetry},
	{Name: "retryablehttp", New: newRetryableHTTP},
	{Name: "failsafe", New: newFailsafe},
	{Name: "rehttp", New: newRehttp},
	{Name: "naive loop", New: func(base http.RoundTripper, p Params) http.RoundTripper {
		return &loop{base: base, retries: p.MaxRetries}
	}},
	{Name: "exp no jitter", New: func(base http.RoundTripper, p Params) http.RoundTripper {
		return &loop{base: base, retries: p.MaxRetries, base0: p.BaseDelay, cap: p.MaxDelay}
	}},
	// httpretry with parts of its storm control turned off, to show what
	// each part does.
	{Name: "httpretry (storm control off)", New: func(base http.RoundTripper, p Params) http.RoundTripper {
		t := newHTTPRetry(base, p).(*httpretry.Transport)
		t.Storm = httpretry.StormControl{NoBudget: true, NoHostGate: true}
		return t
	}, Variant: true},
	{Name: "httpretry (budget only)", New: func(base http.RoundTripper, p Params) http.RoundTripper {
		t := newHTTPRetry(base, p).(*httpretry.Transport)
		t.Storm.NoHostGate = true
		return t
	}, Variant: true},
}

// Lookup returns the systems whose names are given, in that order; an
// unknown name is reported as false.
func Lookup(names []string) ([]System, bool) {
	var out []System
	for _, n := range names {
		found := false
		for _, s := range Systems {
			if s.Name == n {
				out, found = append(out, s), true
				break
			}
		}
		if !found {
			return nil, false
		}
	}
	return out, true
}

// newHTTPRetry is httpretry with its defaults but the shared numbers.
func newHTTPRetry(base http.RoundTripper, p Params) http.RoundTripper {
	return &httpretry.Transport{
		Base:   base,
		Policy: httpretry.Policy{MaxRetries: p.MaxRetries, BaseDelay: p.BaseDelay, MaxDelay: p.MaxDelay},
		Random: seededRandom(p.RandomSeed),
	}
}

// seededRandom returns a stream of values in [0, 1) seeded with seed, safe
// for concurrent use, or nil (httpretry's own) for a zero seed. Seeded,
// a difference between storm control on and off is storm control's, not
// the draws': in one run of unseeded draws a sequential client's four
// calls took 2.74 s on against 1.41 s off, and 2.20-3.45 s against
// 2.19-3.41 s over seven more.
func seededRandom(seed uint64) func() float64 {
	if seed == 0 {
		return nil
	}
	var mu sync.Mutex
	r := rand.New(rand.NewPCG(seed, 0x717e))
	return func() float64 {
		mu.Lock()
		defer mu.Unlock()
		return r.Float64()
	}
}

// newRetryableHTTP is go-retryablehttp's RoundTripper around a Client with
// its default backoff (exponential, honouring Retry-After) and check.
func newRetryableHTTP(base http.RoundTripper, p Params) http.RoundTripper {
	c := retryablehttp.NewClient()
	c.HTTPClient = &http.Client{Transport: base}
	c.Logger = nil
	c.RetryMax = p.MaxRetries
	c.RetryWaitMin = p.BaseDelay
	c.RetryWaitMax = p.MaxDelay
	return &retryablehttp.RoundTripper{Client: c}
}

// newFailsafe is failsafehttp's round tripper with its HTTP retry policy
// builder, exponential backoff with jitter, returning the last response
// on exhaustion as the others do.
func newFailsafe(base http.RoundTripper, p Params) http.RoundTripper {
	policy := failsafehttp.NewRetryPolicyBuilder().
		WithMaxRetries(p.MaxRetries).
		WithBackoff(p.BaseDelay, p.MaxDelay).
		WithJitterFactor(0.5).
		ReturnLastFailure().
		Build()
	return failsafehttp.NewRoundTripper(base, policy)
}

// newRehttp is rehttp's Transport retrying temporary errors and the shared
// statuses of idempotent methods, with its exponential jitter delay.
func newRehttp(base http.RoundTripper, p Params) http.RoundTripper {
	return rehttp.NewTransport(base,
		rehttp.RetryAll(
			rehttp.RetryMaxRetries(p.MaxRetries),
			rehttp.RetryHTTPMethods("GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"),
			rehttp.RetryAny(rehttp.RetryTemporaryErr(), rehttp.RetryStatuses(retryableStatuses...)),
		),
		rehttp.ExpJitterDelay(p.BaseDelay, p.MaxDelay),
	)
}
