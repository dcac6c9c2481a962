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
// as a connection left open by a server or transport.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// row is one line of a summary table.
type row struct{ attempts, wait, elapsed, final, stop string }

// want is what every run of the demo must report, per request: with
// retries, then without.
var want = map[string][2]row{
	"GET /catalog":                   {{"4", "", "", "200 OK", "-"}, {"1", "0s", "", "503 Service Unavailable", "retries exhausted"}},
	"PUT /carts/7":                   {{"3", "", "", "200 OK", "-"}, {"1", "0s", "", "error: connection closed before a response", "retries exhausted"}},
	"POST /orders (Idempotency-Key)": {{"3", "", "", "201 Created", "-"}, {"1", "0s", "", "503 Service Unavailable", "retries exhausted"}},
	"POST /payments (no key)":        {{"1", "0s", "", "error: connection closed before a response", "not replayable"}, {"1", "0s", "", "error: connection closed before a response", "not replayable"}},
}

func TestDemo(t *testing.T) {
	t.Parallel()
	out := runDemo(t, config{policy: httpretry.Policy{BaseDelay: -1}, retryAfter: 0})
	with, without := sections(t, out)
	checkTable(t, with, 0)
	checkTable(t, without, 1)

	// The per-request log shows each failed attempt with its reason, and
	// the PUT's body arrived whole on its third attempt.
	for _, line := range []string{
		`retry    attempt=1 outcome="503 Service Unavailable" reason="status 503" retry_after=0s wait=0s`,
		`retry    attempt=3 outcome="429 Too Many Requests" reason="status 429" wait=0s`,
		`done     attempt=4 outcome="200 OK" body={"items":3}`,
		`retry    attempt=1 outcome=error reason="connection closed before a response" wait=0s`,
		`done     attempt=3 outcome="200 OK" body={"stored":24}`,
		`done     attempt=3 outcome="201 Created" body={"id":1,"got":10}`,
		`give up  attempt=1 outcome=error reason="connection closed before a response" stop="not replayable"`,
		"Succeeded: 3 of 4 with httpretry, 0 of 4 without.",
	} {
		if !strings.Contains(with+without, line) {
			t.Errorf("output lacks %q", line)
		}
	}
}

// TestDemoRealWaits runs the demo as make demo does, with the default
// policy and a one-second Retry-After: it must honour that floor and still
// finish well within its 15 s.
func TestDemoRealWaits(t *testing.T) {
	t.Parallel()
	start := time.Now()
	out := runDemo(t, config{retryAfter: 1})
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("demo took %v, want under 15s", d)
	}
	with, without := sections(t, out)
	rows := checkTable(t, with, 0)
	checkTable(t, without, 1)
	for _, name := range []string{"GET /catalog", "POST /orders (Idempotency-Key)"} {
		wait, err := time.ParseDuration(rows[name].wait)
		if err != nil || wait < time.Second {
			t.Errorf("%s waited %q in total, want at least the 1s Retry-After", name, rows[name].wait)
		}
	}
	// The waits add up: what OnRetry reported is the elapsed time but for
	// the attempts themselves, a few milliseconds on loopback.
	for name, r := range rows {
		wait, err1 := time.ParseDuration(r.wait)
		elapsed, err2 := time.ParseDuration(r.elapsed)
		if err1 != nil || err2 != nil || elapsed < wait || elapsed-wait > 200*time.Millisecond {
			t.Errorf("%s: total wait %s, elapsed %s; want them within the attempts' own time", name, r.wait, r.elapsed)
		}
	}
}

func runDemo(t *testing.T, cfg config) string {
	t.Helper()
	var b strings.Builder
	if err := run(&b, cfg); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + b.String())
	return b.String()
}

// sections splits the output at the run without retries.
func sections(t *testing.T, out string) (with, without string) {
	t.Helper()
	with, without, ok := strings.Cut(out, "== Without retries")
	if !ok {
		t.Fatalf("no run without retries in:\n%s", out)
	}
	return with, without
}

var columns = regexp.MustCompile(`\s{2,}`)

// checkTable parses the summary table of one section and compares it with
// want[name][i]; an empty wanted wait is not compared, as waits are random.
func checkTable(t *testing.T, section string, i int) map[string]row {
	t.Helper()
	got := map[string]row{}
	for _, line := range strings.Split(section, "\n") {
		f := columns.Split(strings.TrimSpace(line), -1)
		if _, known := want[f[0]]; known && len(f) == 6 {
			got[f[0]] = row{f[1], f[2], f[3], f[4], f[5]}
		}
	}
	for name, w := range want {
		g, ok := got[name]
		if !ok {
			t.Errorf("section %d: no row for %s", i, name)
			continue
		}
		if w[i].wait == "" {
			g.wait = ""
		}
		g.elapsed = "" // varies
		if g != w[i] {
			t.Errorf("section %d, %s: got %+v, want %+v", i, name, g, w[i])
		}
	}
	return got
}
