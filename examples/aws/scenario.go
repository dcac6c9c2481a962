package main

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/httpretry/httpretry"
)

// The objects of the run: one below httpretry's default buffer limit by
// far, one well below it, one above it.
var (
	small  = newObject("small", 1<<10, 1)
	medium = newObject("medium", 100<<10, 2)
	large  = newObject("large", 1536<<10, 3)
	// mediumHTTP goes through the plain-HTTP proxy.
	mediumHTTP = newObject("medium-http", 100<<10, 4)
)

// summary is what the run found, for the report and the test.
type summary struct {
	cfg     config
	results []*result
	all     []Record // every request both proxies saw, steps or not

	retryAfterGap time.Duration // from the 503 with Retry-After to the retry's arrival
	leftAfterDel  []string      // keys in the bucket after DeleteObjects
	multiplied    *result       // SDK retryer and httpretry both on
	alone         *result       // httpretry alone, same endpoint
	memory        []memRow
}

// find returns the result of the named operation.
func (s *summary) find(name string) *result {
	for _, r := range s.results {
		if r.Name == name {
			return r
		}
	}
	return nil
}

// Operation names, shared by the report and the test.
const (
	opCreate      = "CreateBucket"
	opPutSmall    = "PutObject small (1 KiB)"
	opPutMedium   = "PutObject medium (100 KiB), outage"
	opPutLarge    = "PutObject large (1.5 MiB)"
	opPutLargeBig = "PutObject large, MaxBufferedBody 4 MiB"
	opPutLargeSDK = "PutObject large, SDK retryer for this call"
	opGetSmall    = "GetObject small"
	opGetMedium   = "GetObject medium"
	opGetLarge    = "GetObject large"
	opChaos       = "chaos: PutObject+GetObject"
	opDelete      = "DeleteObjects small, medium (POST)"
	opPutHTTP     = "PutObject 100 KiB, plain HTTP"
	opGetHTTP     = "GetObject 100 KiB, plain HTTP"
	opMultiplied  = "GetObject, SDK retryer 3 × httpretry 1+3"
	opAlone       = "GetObject, httpretry 1+3 alone"
)

// scenario runs the operations in order, each with its faults.
func (l *lab) scenario() (*summary, error) {
	f := l.front
	sum := &summary{cfg: l.cfg}

	// A bucket, after a plain 503.
	f.Schedule(On(http.MethodPut, "/"+bucket), Unavailable)
	if r := l.step(opCreate, f, func(ctx context.Context) (int64, error) {
		_, err := l.client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)})
		return 0, err
	}); r.Err != nil {
		return nil, fmt.Errorf("%s: %w", r.Name, r.Err)
	}

	// Uploads. The small one loses its answer after S3 stored it: PUT is
	// idempotent, so httpretry re-sends it, from its buffer. The medium
	// one rides out an outage. The large one is over the buffer limit.
	f.Schedule(On(http.MethodPut, small.path()), ResetAfter)
	l.step(opPutSmall, f, func(ctx context.Context) (int64, error) { return 0, put(ctx, l.client, small) })

	l.step(opPutMedium, f, func(ctx context.Context) (int64, error) {
		end := f.Outage(l.cfg.outage)
		err := put(ctx, l.client, medium)
		time.Sleep(time.Until(end)) // should the upload give up early, spare the next steps the outage
		return 0, err
	})

	f.Schedule(On(http.MethodPut, large.path()), SlowDown)
	l.step(opPutLarge, f, func(ctx context.Context) (int64, error) { return 0, put(ctx, l.client, large) })

	f.Schedule(On(http.MethodPut, large.path()), SlowDown, ResetBefore)
	l.step(opPutLargeBig, f, func(ctx context.Context) (int64, error) { return 0, put(ctx, l.bigClient, large) })

	// The other way to retry a large upload: the SDK's retryer, for this
	// call only. httpretry sends the unbuffered body once per SDK attempt,
	// and the SDK rewinds its seekable body: no copy, no multiplying.
	f.Schedule(On(http.MethodPut, large.path()), SlowDown)
	l.step(opPutLargeSDK, f, func(ctx context.Context) (int64, error) {
		return 0, put(ctx, l.client, large, func(o *s3.Options) { o.Retryer = quickSDKRetryer(3) })
	})

	// Downloads, each verified by SHA-256. The 500 is retried only thanks
	// to s3Classifier.
	f.Schedule(On(http.MethodGet, small.path()), InternalError)
	l.step(opGetSmall, f, func(ctx context.Context) (int64, error) { return getVerified(ctx, l.client, small) })

	f.Schedule(On(http.MethodGet, medium.path()), RetryAfter)
	ra := l.step(opGetMedium, f, func(ctx context.Context) (int64, error) { return getVerified(ctx, l.client, medium) })
	sum.retryAfterGap = retryAfterGap(ra.Records)

	f.Schedule(On(http.MethodGet, large.path()), SlowDown, ResetAfter)
	l.step(opGetLarge, f, func(ctx context.Context) (int64, error) { return getVerified(ctx, l.client, large) })

	// Random faults on a batch of small objects.
	l.step(opChaos, f, func(ctx context.Context) (int64, error) {
		f.Chaos(l.cfg.chaosRate, l.cfg.seed)
		defer f.Chaos(0, 0)
		var verified int64
		for i := range l.cfg.chaosObjects {
			o := newObject(fmt.Sprintf("chaos-%d", i), 8<<10, 100+uint64(i))
			if err := put(ctx, l.client, o); err != nil {
				return verified, err
			}
			n, err := getVerified(ctx, l.client, o)
			verified += n
			if err != nil {
				return verified, err
			}
		}
		return verified, nil
	})

	// DeleteObjects is a POST. S3 carries it out, then its answer is lost:
	// httpretry must not send it again, and S3 must have run it once.
	f.Schedule(On(http.MethodPost, "/"+bucket), ResetAfter)
	l.step(opDelete, f, func(ctx context.Context) (int64, error) {
		_, err := l.client.DeleteObjects(ctx, &s3.DeleteObjectsInput{
			Bucket: aws.String(bucket),
			Delete: &types.Delete{Objects: []types.ObjectIdentifier{{Key: aws.String(small.key)}, {Key: aws.String(medium.key)}}},
		})
		return 0, err
	})
	left, err := l.keys()
	if err != nil {
		return nil, fmt.Errorf("listing after DeleteObjects: %w", err)
	}
	sum.leftAfterDel = left

	// The same kind of upload over plain HTTP, where the SDK signs the
	// payload's SHA-256 and sends its CRC32 in a header.
	l.plain.Schedule(On(http.MethodPut, mediumHTTP.path()), ResetAfter)
	l.step(opPutHTTP, l.plain, func(ctx context.Context) (int64, error) { return 0, put(ctx, l.plainCli, mediumHTTP) })
	l.plain.Schedule(On(http.MethodGet, mediumHTTP.path()), ResetBefore)
	l.step(opGetHTTP, l.plain, func(ctx context.Context) (int64, error) { return getVerified(ctx, l.plainCli, mediumHTTP) })

	sum.multiplied, sum.alone = l.multiply()
	sum.results = l.results
	sum.all = append(l.front.Records(0), l.plain.Records(0)...)
	return sum, nil
}

// multiply sends one GetObject to an endpoint that always answers 503,
// first with the SDK's standard retryer (3 attempts) on top of httpretry
// (1+3 attempts), then with httpretry alone. Each transport is new, so
// that the host gate of one does not act on the other.
func (l *lab) multiply() (both, alone *result) {
	hot := On(http.MethodGet, "/"+bucket+"/hot")
	l.front.Always(hot, Unavailable)
	short := httpretry.Policy{MaxRetries: 3, BaseDelay: 10 * time.Millisecond, MaxDelay: 40 * time.Millisecond}
	get := func(c *s3.Client) func(ctx context.Context) (int64, error) {
		return func(ctx context.Context) (int64, error) {
			_, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String("hot")})
			return 0, err
		}
	}

	c := newS3(l.front.URL, &http.Client{Transport: newTransport(l.base, short, 0)}, quickSDKRetryer(3))
	both = l.step(opMultiplied, l.front, get(c))

	c = newS3(l.front.URL, &http.Client{Transport: newTransport(l.base, short, 0)}, aws.NopRetryer{})
	alone = l.step(opAlone, l.front, get(c))
	return both, alone
}

// quickSDKRetryer returns the SDK's standard retryer with n attempts and a
// fixed 10 ms backoff, so that the run stays quick (its default backoff
// is up to 20 s), and no client-side rate limit.
func quickSDKRetryer(n int) aws.Retryer {
	return retry.NewStandard(func(o *retry.StandardOptions) {
		o.MaxAttempts = n
		o.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return 10 * time.Millisecond, nil })
		o.RateLimiter = ratelimit.None
	})
}

// keys lists the bucket's keys, sorted.
func (l *lab) keys() ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := l.client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, o := range out.Contents {
		keys = append(keys, aws.ToString(o.Key))
	}
	slices.Sort(keys)
	return keys, nil
}

// retryAfterGap returns the time from the proxy's 503 with Retry-After to
// the arrival of the next request: the retry. Measured at the server, it
// is the wait the server asked for and got.
func retryAfterGap(recs []Record) time.Duration {
	for i, rec := range recs {
		if rec.Fault == RetryAfter && i+1 < len(recs) {
			return recs[i+1].Arrived.Sub(rec.Answered)
		}
	}
	return 0
}

// bySDKAttempt counts records per SDK attempt ("attempt=1", …).
func bySDKAttempt(recs []Record) map[string]int {
	m := map[string]int{}
	for _, rec := range recs {
		a, _, _ := strings.Cut(rec.SDKAttempt, ";")
		m[a]++
	}
	return m
}
