// Package httpretry provides Transport, an http.RoundTripper that retries
// failed requests the way well-run systems do: jittered exponential backoff,
// a classifier that retries overload and connection failures but never a
// 400 or a bad certificate, Retry-After as a floor, replayable request
// bodies, and no wait that outlives the request's context.
//
// One RoundTrip is one logical request. The caller's request is never modified
// and its body is closed exactly once; only idempotent requests (or ones with
// an Idempotency-Key or X-Idempotency-Key, ones that provably never left, or
// any with Transport.RetryAllMethods) are retried; the last response is
// returned as a response, a 503 included, and every discarded response is
// drained so its connection is reused. Storm control (see StormControl) keeps
// the retries of many requests failing at once from overloading their host, and
// leaves a request alone on its host to its own backoff.
//
// Use it as an http.Client's Transport:
//
//	client := &http.Client{Transport: &httpretry.Transport{}}
//	resp, err := client.Get("https://example.com/")
//
// or wrap any other transport with Base, such as a tracing one. WithPolicy
// and WithoutRetries change the retries of the requests made with a given
// context, and OnRetry and OnGiveUp report every attempt whose failure the
// classifier calls retryable.
package httpretry
