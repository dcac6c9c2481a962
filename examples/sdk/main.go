// Command sdk runs an unchanged SDK, google/go-github, through httpretry:
// its client takes an *http.Client, so handing it one whose Transport is an
// httpretry.Transport makes its calls survive the 503s, 502s and
// connection resets of a local fake GitHub API (but for the POST that
// creates an issue, which is not retried once it may have reached the
// server). Then the same calls go through a client without httpretry, for
// contrast. percall_test.go controls retries per call through the SDK;
// ratelimit.go retries GitHub's secondary rate limit, not its primary one.
//
// Run it with:
//
//	cd examples && go run ./sdk
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"

	"github.com/google/go-github/v74/github"
	"github.com/httpretry/httpretry"
)

func main() {
	if err := run(os.Stdout, httpretry.Policy{}); err != nil {
		fmt.Fprintln(os.Stderr, "sdk:", err)
		os.Exit(1)
	}
}

// run makes the SDK calls with and without httpretry, using policy for the
// retries (a test passes one without waits), and writes what happened to w.
func run(w io.Writer, policy httpretry.Policy) error {
	fmt.Fprintln(w, "== go-github through httpretry")
	retrying := func(base http.RoundTripper) http.RoundTripper {
		return &httpretry.Transport{
			Base:       base,
			Policy:     policy,
			Classifier: gitHubClassifier, // GitHub's rate limits (ratelimit.go)
			OnRetry: func(e httpretry.RetryEvent) {
				fmt.Fprintf(w, "  retry: %s %s attempt %d failed (%s), retried after %v\n",
					e.Request.Method, e.Request.URL.Path, e.Attempt, e.Reason, e.Wait.Round(1e6))
			},
			OnGiveUp: func(e httpretry.RetryEvent) {
				fmt.Fprintf(w, "  give up: %s %s attempt %d failed (%s): %s\n",
					e.Request.Method, e.Request.URL.Path, e.Attempt, e.Reason, e.Stop)
			},
		}
	}
	if err := calls(w, retrying); err != nil {
		return err
	}
	fmt.Fprintln(w, "\n== go-github without httpretry, same failures")
	return calls(w, func(base http.RoundTripper) http.RoundTripper { return base })
}

// calls starts a fake API, builds a go-github client on a transport made by
// wrap from the plain one, and makes three API calls.
func calls(w io.Writer, wrap func(http.RoundTripper) http.RoundTripper) error {
	api := newFakeAPI()
	defer api.Close()
	base := api.Client().Transport // a plain *http.Transport, closed with the server

	// This is all the SDK needs: a client of our own, and a base URL.
	gh := github.NewClient(&http.Client{Transport: wrap(base)})
	baseURL, err := url.Parse(api.URL + "/")
	if err != nil {
		return err
	}
	gh.BaseURL = baseURL

	ctx := context.Background()
	repo, _, err := gh.Repositories.Get(ctx, "httpretry", "httpretry")
	report(w, "Repositories.Get", err, func() string {
		return fmt.Sprintf("%s, %d stars", repo.GetFullName(), repo.GetStargazersCount())
	})
	issues, _, err := gh.Issues.ListByRepo(ctx, "httpretry", "httpretry", nil)
	report(w, "Issues.ListByRepo", err, func() string {
		return fmt.Sprintf("%d open issues, first %q", len(issues), issues[0].GetTitle())
	})
	// A POST is not idempotent: httpretry returns its 503 at once rather
	// than risk creating the issue twice.
	issue, _, err := gh.Issues.Create(ctx, "httpretry", "httpretry", &github.IssueRequest{Title: github.Ptr("Flaky CI")})
	report(w, "Issues.Create", err, func() string { return fmt.Sprintf("created #%d", issue.GetNumber()) })

	fmt.Fprintf(w, "  the API saw %d requests\n", api.requests())
	return nil
}

// report prints one SDK call's result: ok() on success, else the error,
// its HTTP status when the API answered.
func report(w io.Writer, call string, err error, ok func() string) {
	var apiErr *github.ErrorResponse
	switch {
	case err == nil:
		fmt.Fprintf(w, "  %-18s ok: %s\n", call, ok())
	case errors.As(err, &apiErr):
		fmt.Fprintf(w, "  %-18s failed: API answered %s\n", call, apiErr.Response.Status)
	default:
		fmt.Fprintf(w, "  %-18s failed: %v\n", call, errors.Unwrap(err))
	}
}
