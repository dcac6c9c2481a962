package bench

import (
	"testing"
	"time"
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
