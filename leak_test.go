package httpretry

import (
	"runtime"
	"strings"
	"testing"
	"time"
)

// A small goroutine-leak checker, so the library's go.mod needs no
// dependency for it: TestMain runs it after all tests, and relNoLeaks after
// one test.

// relIgnoredFuncs are goroutines that belong to the runtime or the testing
// package, not to the code under test.
var relIgnoredFuncs = []string{
	"testing.(*M).",
	"testing.(*T).Run",
	"testing.(*F).Fuzz",
	"testing.runFuzzing",
	"testing.runFuzzTests",
	"testing.tRunner",
	"testing.(*T).Parallel",
	"testing/synctest.",
	"runtime.goexit",
	"runtime.gc",
	"runtime.MHeap_Scavenger",
	"runtime.ReadTrace",
	"os/signal.signal_recv",
	"os/signal.loop",
	"internal/fuzz.",
	"main.main",
}

// relGoroutine is one goroutine of a stack dump.
type relGoroutine struct {
	id    string
	stack string
}

// relGoroutines returns the goroutines other than the caller's and those
// of the runtime and the testing package.
func relGoroutines() []relGoroutine {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []relGoroutine
	for i, g := range strings.Split(string(buf), "\n\n") {
		if i == 0 || strings.TrimSpace(g) == "" {
			continue // the first is the caller's own
		}
		header, rest, _ := strings.Cut(g, "\n")
		id, _, _ := strings.Cut(strings.TrimPrefix(header, "goroutine "), " ")
		top, _, _ := strings.Cut(rest, "\n")
		if relIgnored(top) || strings.Contains(g, "\ncreated by testing.") || strings.Contains(g, "\ncreated by runtime.") {
			continue // a test itself, or the testing package's or runtime's own
		}
		out = append(out, relGoroutine{id: id, stack: g})
	}
	return out
}

func relIgnored(top string) bool {
	for _, f := range relIgnoredFuncs {
		if strings.HasPrefix(top, f) {
			return true
		}
	}
	return false
}

// relLeaks polls for up to wait until no goroutine outside known remains,
// and returns the stacks of those that do.
func relLeaks(known map[string]bool, wait time.Duration) []string {
	deadline := time.Now().Add(wait)
	for {
		var left []string
		for _, g := range relGoroutines() {
			if !known[g.id] {
				left = append(left, g.stack)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// relNoLeaks fails t when goroutines started during the test outlive it.
// Call it first, so that its check runs after every other cleanup.
func relNoLeaks(t *testing.T) {
	t.Helper()
	known := map[string]bool{}
	for _, g := range relGoroutines() {
		known[g.id] = true
	}
	t.Cleanup(func() {
		if left := relLeaks(known, 3*time.Second); len(left) > 0 {
			t.Errorf("%d goroutines leaked:\n\n%s", len(left), strings.Join(left, "\n\n"))
		}
	})
}
