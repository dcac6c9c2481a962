package main

import (
	"net/http"

	"github.com/httpretry/httpretry"
)

// gitHubClassifier retries what the default classifier retries, and
// GitHub's secondary rate limit, which may come as a 403 with Retry-After
// (the Transport waits it out); it does not retry a primary rate limit
// (X-RateLimit-Remaining: 0, no Retry-After), whose reset is often an hour
// away, so that go-github's error for it comes back at once instead of
// after every retry has failed.
func gitHubClassifier(req *http.Request, resp *http.Response, err error) (bool, string) {
	if resp != nil && resp.Header.Get("Retry-After") == "" && resp.Header.Get("X-RateLimit-Remaining") == "0" {
		return false, ""
	}
	if resp != nil && resp.StatusCode == http.StatusForbidden && resp.Header.Get("Retry-After") != "" {
		return true, "secondary rate limit"
	}
	return httpretry.DefaultClassifier(req, resp, err)
}
