package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"

	"github.com/google/go-github/v74/github"
	"github.com/httpretry/httpretry"
)

// TestPerCallControlThroughGoGithub: go-github passes the context of each
// call down to its requests, so WithoutRetries and WithPolicy change the
// retries of that one call.
func TestPerCallControlThroughGoGithub(t *testing.T) {
	var requests atomic.Int32
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		http.Error(w, `{"message":"busy"}`, http.StatusServiceUnavailable)
	}))
	defer api.Close()
	gh := github.NewClient(&http.Client{Transport: &httpretry.Transport{Base: api.Client().Transport, Policy: httpretry.Policy{MaxRetries: 3, BaseDelay: -1}}})
	gh.BaseURL, _ = url.Parse(api.URL + "/")
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want int32
	}{
		{"the Transport's policy", context.Background(), 4},
		{"WithoutRetries", httpretry.WithoutRetries(context.Background()), 1},
		{"WithPolicy", httpretry.WithPolicy(context.Background(), httpretry.Policy{MaxRetries: 1, BaseDelay: -1}), 2},
	} {
		requests.Store(0)
		_, resp, err := gh.Repositories.Get(tc.ctx, "httpretry", "httpretry")
		if err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("%s: got %v, %v; want the API's 503", tc.name, resp, err)
		}
		if got := requests.Load(); got != tc.want {
			t.Errorf("%s: the API saw %d requests, want %d", tc.name, got, tc.want)
		}
	}
}
