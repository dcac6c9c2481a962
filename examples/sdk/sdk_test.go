package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/httpretry/httpretry"
	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine outlives them.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// want is the whole report, waits aside: through httpretry the two GET
// calls succeed after their faults and the POST's 503 is returned at once;
// without it every call fails on its first fault.
const want = `== go-github through httpretry
  retry: GET /repos/httpretry/httpretry attempt 1 failed (status 503), retried after <wait>
  retry: GET /repos/httpretry/httpretry attempt 2 failed (connection reset), retried after <wait>
  Repositories.Get   ok: httpretry/httpretry, 42 stars
  retry: GET /repos/httpretry/httpretry/issues attempt 1 failed (status 502), retried after <wait>
  Issues.ListByRepo  ok: 2 open issues, first "Examples and make demo"
  give up: POST /repos/httpretry/httpretry/issues attempt 1 failed (status 503): not replayable
  Issues.Create      failed: API answered 503 Service Unavailable
  the API saw 6 requests

== go-github without httpretry, same failures
  Repositories.Get   failed: API answered 503 Service Unavailable
  Issues.ListByRepo  failed: API answered 502 Bad Gateway
  Issues.Create      failed: API answered 503 Service Unavailable
  the API saw 3 requests
`

var waits = regexp.MustCompile(`retried after \S+`)

func TestRun(t *testing.T) {
	var b strings.Builder
	if err := run(&b, httpretry.Policy{BaseDelay: -1}); err != nil {
		t.Fatal(err)
	}
	if got := waits.ReplaceAllString(b.String(), "retried after <wait>"); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
}
