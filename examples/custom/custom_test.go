package main

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/httpretry/httpretry"
	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine outlives them, such
// as the handler of a hung attempt that was never released.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func runCustom(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	if err := run(&b); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + b.String())
	return b.String()
}

func TestRun(t *testing.T) {
	out := runCustom(t)
	for _, line := range []string{
		// 1. The classifier retries a 500 on GET, not on DELETE, and a 409
		// by its body, which reaches the caller whole when not retried.
		"GET /report: attempt 1 failed (status 500 on GET), retried after 0s\n  GET /report -> 200 OK {\"rows\":12}\n",
		"\n  DELETE /report -> 500 Internal Server Error {\"error\":\"internal\"}\n",
		"PUT /doc/1: attempt 2 failed (lock timeout), retried after 0s\n  PUT /doc/1 -> 200 OK {\"version\":8}\n",
		"\n  PUT /doc/2 -> 409 Conflict {\"error\":\"version_conflict\",\"current\":7}\n",
		// 2. JitterNone is the plain exponential backoff, capped.
		"JitterNone           100ms   200ms   400ms   800ms    1.6s      2s\n",
		"GET /feed -> 200 OK",
		// 3. The hung attempt is cut short and the retry answers.
		"GET /quote: attempt 1 failed (attempt timeout), retried after 0s\n  GET /quote -> 200 OK {\"price\":42}\n",
		// 4. The deadline stops retries after one wait, before it passes.
		"GET /status: attempt 1 failed (status 503), retried after 100ms\n" +
			"  GET /status: attempt 2 failed (status 503), giving up: stopped by the deadline\n" +
			"  GET /status -> 503 Service Unavailable {\"error\":\"down\"}\n" +
			"  returned before the deadline: true\n",
	} {
		if !strings.Contains(out, line) {
			t.Errorf("output lacks %q", line)
		}
	}
	if strings.Contains(out, "DELETE /report: attempt") {
		t.Error("a 500 on DELETE was retried")
	}

	// The equal-jitter client's waits lie in [d/2, d) for d = 4ms·2^(n-1).
	waits := regexp.MustCompile(`GET /feed: attempt (\d) failed \(status 503\), retried after (\S+)`).FindAllStringSubmatch(out, -1)
	if len(waits) != 3 {
		t.Fatalf("%d retries of /feed, want 3", len(waits))
	}
	for i, m := range waits {
		d := 4 * time.Millisecond << i
		wait, err := time.ParseDuration(m[2])
		if err != nil || wait < d/2 || wait > d {
			t.Errorf("retry %s waited %s, want in [%v, %v)", m[1], m[2], d/2, d)
		}
	}
}

// TestJitterTable checks each printed kind against its formula's range.
func TestJitterTable(t *testing.T) {
	rows := jitterTable(6, 1)
	base, limit := tablePolicy.BaseDelay, tablePolicy.MaxDelay
	for i, row := range rows {
		prev := time.Duration(0)
		for n, got := range row {
			d := min(base<<n, limit)
			lo, hi := time.Duration(0), d
			switch jitters[i].kind {
			case httpretry.JitterEqual:
				lo = d / 2
			case httpretry.JitterDecorrelated:
				lo, hi = base, min(3*max(prev, base), limit)
			case httpretry.JitterNone:
				lo = d
			}
			if got < lo || got > hi {
				t.Errorf("%s retry %d: %v, want in [%v, %v]", jitters[i].name, n+1, got, lo, hi)
			}
			prev = got
		}
	}
	if again := jitterTable(6, 1); again[0][5] != rows[0][5] {
		t.Error("the same seed gave different waits")
	}
}
