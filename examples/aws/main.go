// Command aws runs the AWS SDK for Go v2 S3 client over httpretry, against
// an in-memory S3 (gofakes3) behind a fault-injecting proxy, and measures
// what that costs.
//
// Everything runs on loopback. The S3 client has the SDK's own retries off
// (aws.NopRetryer) and an *http.Client whose Transport is an
// httpretry.Transport. The proxy resets connections, answers 503s (with
// and without Retry-After, and S3's SlowDown), a 500 InternalError and a
// short outage, at set points and at random; it checks every upload as S3
// would and records what it forwarded. The run then reports, per
// operation, whether it succeeded, how many attempts it took, how many of
// them S3 carried out and how many bytes were verified by SHA-256 after the
// download; and what users of the SDK should know:
//
//   - The SDK never sets Request.GetBody: smithy-go's Request.Build wraps
//     the body in a reader of its own. httpretry therefore buffers each
//     upload of up to MaxBufferedBody (1 MiB by default) and streams a
//     larger one once, without retrying it. The run measures what the
//     buffer costs: one extra copy of the body per upload in flight.
//
//   - The limit applies to the bytes on the wire: over HTTPS the SDK sends
//     aws-chunked framing and a checksum trailer, so an object of exactly
//     1 MiB is not retried.
//
//   - A retried upload re-sends the very bytes of the first attempt, so the
//     SDK's checksum and signature, computed once, still verify.
//
//   - A POST (DeleteObjects) is not re-sent after a failure that may have
//     reached S3; the run shows S3 carried it out exactly once.
//
//   - S3's 500 InternalError is retryable, but not by httpretry's default:
//     add it with a Classifier.
//
//   - With both the SDK's retryer and httpretry on, attempts multiply.
//
//     cd examples && go run ./aws
package main

import (
	"fmt"
	"io"
	"os"
	"time"
)

func main() {
	if _, err := run(os.Stdout, defaultConfig); err != nil {
		fmt.Fprintln(os.Stderr, "aws:", err)
		os.Exit(1)
	}
}

// config holds the run's numbers.
type config struct {
	retryAfter   int           // seconds of the Retry-After the proxy sends
	outage       time.Duration // length of the outage during the medium upload
	chaosObjects int           // objects uploaded and read back under random faults
	chaosRate    float64       // share of requests given a random fault
	seed         uint64        // of the random faults
	memBytes     int           // bytes uploaded per memory measurement, at least 4 uploads
}

var defaultConfig = config{
	retryAfter:   1,
	outage:       300 * time.Millisecond,
	chaosObjects: 6,
	chaosRate:    0.3,
	seed:         7,
	memBytes:     8 << 20,
}

// run runs the whole example and writes its report to w. The summary is
// for the test.
func run(w io.Writer, cfg config) (*summary, error) {
	start := time.Now()
	l := newLab(cfg)
	defer l.close()
	sum, err := l.scenario()
	if err != nil {
		return nil, err
	}
	sum.memory, err = measureBuffering(cfg.memBytes)
	if err != nil {
		return nil, err
	}
	report(w, sum)
	fmt.Fprintf(w, "\n(run took %v)\n", time.Since(start).Round(10*time.Millisecond))
	return sum, nil
}
