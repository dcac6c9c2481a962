package bench

import (
	"slices"
	"testing"
	"time"

	"github.com/httpretry/httpretry"
)

func TestLoopDelay(t *testing.T) {
	l := &loop{base0: 20 * time.Millisecond, cap: time.Second}
	want := []time.Duration{20, 40, 80, 160, 320, 640, 1000, 1000}
	for n, w := range want {
		if got := l.delay(n + 1); got != w*time.Millisecond {
			t.Errorf("delay(%d) = %v, want %v", n+1, got, w*time.Millisecond)
		}
	}
	if d := (&loop{}).delay(3); d != 0 {
		t.Errorf("naive delay %v", d)
	}
}

func TestLookup(t *testing.T) {
	s, ok := Lookup([]string{"httpretry", "bare"})
	if !ok || len(s) != 2 || s[0].Name != "httpretry" {
		t.Fatalf("Lookup: %v %v", s, ok)
	}
	if _, ok := Lookup([]string{"nope"}); ok {
		t.Fatal("an unknown name was found")
	}
}

// TestHTTPRetryVariantsShareTheirDraws checks that every httpretry variant
// built with one seed draws the same jitter, and that a zero seed leaves
// httpretry its own source.
func TestHTTPRetryVariantsShareTheirDraws(t *testing.T) {
	p := DefaultParams
	p.RandomSeed = 42
	var first []float64
	for _, s := range Systems {
		rt, ok := s.New(nil, p).(*httpretry.Transport)
		if !ok {
			continue
		}
		if rt.Random == nil {
			t.Fatalf("%s: seeded, but Random is nil", s.Name)
		}
		var got []float64
		for range 5 {
			got = append(got, rt.Random())
		}
		if first == nil {
			first = got
		} else if !slices.Equal(got, first) {
			t.Errorf("%s draws %v, httpretry %v", s.Name, got, first)
		}
	}
	if other := seededRandom(43); other() == first[0] {
		t.Error("seeds 42 and 43 draw the same first value")
	}
	if rt := newHTTPRetry(nil, DefaultParams).(*httpretry.Transport); rt.Random != nil {
		t.Error("unseeded, Random is set")
	}
}
