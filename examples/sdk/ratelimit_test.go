package main

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"

	"github.com/google/go-github/v74/github"
	"github.com/httpretry/httpretry"
)

// TestGitHubRateLimits: with gitHubClassifier, a secondary rate limit
// answered 403 with Retry-After is waited out and retried, where the
// default classifier returns it at once; a primary rate limit is returned
// at once, where the default classifier retries its 429 five times, each
// answered the same.
func TestGitHubRateLimits(t *testing.T) {
	for _, tc := range []struct {
		name       string
		limit      func(http.ResponseWriter)
		classifier httpretry.Classifier
		requests   int32
		ok         bool
	}{
		{"secondary, default", secondaryLimit, nil, 1, false},
		{"secondary, gitHubClassifier", secondaryLimit, gitHubClassifier, 2, true},
		{"primary, default", primaryLimit, nil, 6, false},
		{"primary, gitHubClassifier", primaryLimit, gitHubClassifier, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var requests atomic.Int32
			api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				// A secondary limit is over after its Retry-After; a primary
				// one lasts past every retry.
				if requests.Add(1) == 1 || !tc.ok {
					tc.limit(w)
					return
				}
				w.Write([]byte(`{"full_name":"o/r"}`))
			}))
			defer api.Close()
			tr := &httpretry.Transport{Base: api.Client().Transport, Classifier: tc.classifier, Policy: httpretry.Policy{BaseDelay: -1}}
			gh := github.NewClient(&http.Client{Transport: tr})
			gh.BaseURL, _ = url.Parse(api.URL + "/")
			_, _, err := gh.Repositories.Get(context.Background(), "o", "r")
			if got := requests.Load(); got != tc.requests || (err == nil) != tc.ok {
				t.Errorf("%d requests, err %v; want %d, success %v", got, err, tc.requests, tc.ok)
			}
			var ghErr *github.ErrorResponse
			if !tc.ok && !errors.As(err, &ghErr) && !errors.As(err, new(*github.AbuseRateLimitError)) {
				t.Errorf("err %v, want go-github's error for the limit", err)
			}
		})
	}
}

// secondaryLimit answers as GitHub does a secondary rate limit: 403 with a
// one-second Retry-After.
func secondaryLimit(w http.ResponseWriter) {
	w.Header().Set("Retry-After", "1")
	http.Error(w, `{"message":"You have exceeded a secondary rate limit."}`, http.StatusForbidden)
}

// primaryLimit answers as GitHub does a spent primary rate limit: 429, no
// requests left, reset in an hour.
func primaryLimit(w http.ResponseWriter) {
	w.Header().Set("X-RateLimit-Limit", "5000")
	w.Header().Set("X-RateLimit-Remaining", "0")
	w.Header().Set("X-RateLimit-Reset", "4102444800")
	http.Error(w, `{"message":"API rate limit exceeded."}`, http.StatusTooManyRequests)
}
