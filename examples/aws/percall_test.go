package main

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/httpretry/httpretry"
)

// TestPerCallControlThroughTheAWSSDK: the SDK passes an operation's context
// down to its *http.Request, so WithoutRetries and WithPolicy set on the
// context of one S3 call change that call's retries only.
func TestPerCallControlThroughTheAWSSDK(t *testing.T) {
	l := newLab(defaultConfig)
	defer l.close()
	l.front.Always(On(http.MethodGet, "/"+bucket+"/percall"), Unavailable)
	short := httpretry.Policy{MaxRetries: 3, BaseDelay: 5 * time.Millisecond, MaxDelay: 10 * time.Millisecond}
	c := newS3(l.front.URL, &http.Client{Transport: newTransport(l.base, short, 0)}, aws.NopRetryer{})

	for _, tc := range []struct {
		name string
		ctx  func(context.Context) context.Context
		want int
	}{
		{"the Transport's Policy", func(ctx context.Context) context.Context { return ctx }, 4},
		{"WithoutRetries", httpretry.WithoutRetries, 1},
		{"WithPolicy", func(ctx context.Context) context.Context {
			return httpretry.WithPolicy(ctx, httpretry.Policy{MaxRetries: 1, BaseDelay: time.Millisecond})
		}, 2},
		{"the Transport's Policy again", func(ctx context.Context) context.Context { return ctx }, 4},
	} {
		r := l.step(tc.name, l.front, func(ctx context.Context) (int64, error) {
			_, err := c.GetObject(tc.ctx(ctx), &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String("percall")})
			return 0, err
		})
		if r.Err == nil || r.Attempts != tc.want || len(r.Records) != tc.want {
			t.Errorf("%s: %d attempts, %d at the proxy, err %v; want %d of each and the 503's error",
				tc.name, r.Attempts, len(r.Records), r.Err, tc.want)
		}
	}
}
