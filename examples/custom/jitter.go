package main

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/httpretry/httpretry"
)

// jitters are the kinds compared, in the order printed.
var jitters = []struct {
	name string
	kind httpretry.Jitter
}{
	{"JitterFull", httpretry.JitterFull},
	{"JitterEqual", httpretry.JitterEqual},
	{"JitterDecorrelated", httpretry.JitterDecorrelated},
	{"JitterNone", httpretry.JitterNone},
}

// tablePolicy is the policy whose waits the jitter table shows.
var tablePolicy = httpretry.Policy{BaseDelay: 100 * time.Millisecond, MaxDelay: 2 * time.Second}

// jitterTable returns the waits before retries 1 to n under each jitter
// kind, drawn from a source seeded with seed. Policy.Delay is a pure
// function, so this costs no sleep.
func jitterTable(n int, seed uint64) [][]time.Duration {
	rows := make([][]time.Duration, len(jitters))
	for i, j := range jitters {
		p := tablePolicy
		p.Jitter = j.kind
		rng := rand.New(rand.NewPCG(seed, seed))
		var prev time.Duration
		for retry := 1; retry <= n; retry++ {
			prev = p.Delay(retry, prev, rng.Float64())
			rows[i] = append(rows[i], prev)
		}
	}
	return rows
}

// seeded returns a Random for Transport: a seeded source, made safe for
// concurrent use as Transport requires.
func seeded(seed uint64) func() float64 {
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(seed, seed))
	return func() float64 {
		mu.Lock()
		defer mu.Unlock()
		return rng.Float64()
	}
}

func jitterSection(w io.Writer) error {
	fmt.Fprintf(w, "== 2. Jitter: waits before retries 1-6, BaseDelay %v, MaxDelay %v\n", tablePolicy.BaseDelay, tablePolicy.MaxDelay)
	for i, row := range jitterTable(6, 1) {
		cells := make([]string, len(row))
		for k, d := range row {
			cells[k] = fmt.Sprintf("%7v", d.Round(time.Millisecond))
		}
		fmt.Fprintf(w, "  %-18s %s\n", jitters[i].name, strings.Join(cells, " "))
	}

	fmt.Fprintln(w, "  A client with JitterEqual (never less than half the backoff) and a seeded Random:")
	srv := scripted(map[string][]http.HandlerFunc{
		"GET /feed": {status(503, `{}`), status(503, `{}`), status(503, `{}`), status(200, `{"items":[]}`)},
	})
	defer srv.Close()
	tr := withHooks(w, &httpretry.Transport{
		Policy: httpretry.Policy{BaseDelay: 4 * time.Millisecond, Jitter: httpretry.JitterEqual},
		Random: seeded(1),
	})
	defer tr.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodGet, srv.URL+"/feed", nil)
	if err != nil {
		return err
	}
	_, err = do(w, &http.Client{Transport: tr}, req)
	return err
}
