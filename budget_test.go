package httpretry

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// budgetStep is one event in a budget table: count requests, then try
// retries, at a time offset.
type budgetStep struct {
	at       time.Duration
	requests int
	retries  int
	granted  int // how many of the retries must be granted
}

func TestBudgetTable(t *testing.T) {
	cases := []struct {
		name   string
		budget *Budget
		steps  []budgetStep
	}{
		{
			name:   "reserve only: no requests counted still allows the reserve",
			budget: &Budget{Reserve: 0.3},
			steps:  []budgetStep{{at: 0, retries: 5, granted: 3}},
		},
		{
			name:   "ratio of the requests plus reserve",
			budget: &Budget{Ratio: 0.5, Reserve: 0.1},
			steps:  []budgetStep{{at: 0, requests: 10, retries: 10, granted: 6}},
		},
		{
			name:   "no reserve, no ratio: nothing",
			budget: &Budget{Ratio: -1, Reserve: -1},
			steps:  []budgetStep{{at: 0, requests: 100, retries: 1, granted: 0}},
		},
		{
			name:   "defaults: 50% plus 10 a second over 10 s",
			budget: &Budget{},
			steps:  []budgetStep{{at: 0, requests: 100, retries: 200, granted: 150}},
		},
		{
			name:   "retries leave the window and are allowed again",
			budget: &Budget{Ratio: -1, Reserve: 0.2, Window: 10 * time.Second},
			steps: []budgetStep{
				{at: 0, retries: 3, granted: 2},
				{at: 5 * time.Second, retries: 1, granted: 0},
				{at: 10 * time.Second, retries: 3, granted: 2},
			},
		},
		{
			name:   "requests leave the window",
			budget: &Budget{Ratio: 1, Reserve: -1, Window: 10 * time.Second},
			steps: []budgetStep{
				{at: 0, requests: 10},
				{at: time.Second, retries: 1, granted: 1}, // starts the window
				{at: 30 * time.Second, retries: 1, granted: 0},
			},
		},
		{
			name:   "requests counted while no retry moved the window are spread over the gap",
			budget: &Budget{Ratio: 1, Reserve: -1, Window: 10 * time.Second},
			steps: []budgetStep{
				{at: 0, retries: 0},
				{at: 0, requests: 1, retries: 1, granted: 1},
				// 100 requests between 0 s and 20 s, read at 20 s: the
				// window (nine whole slots and the current one, which has
				// just begun) holds the 45 of them spread over 11–20 s.
				{at: 20 * time.Second, requests: 100, retries: 100, granted: 45},
			},
		},
		{
			name:   "a clock going back does not move the window back",
			budget: &Budget{Ratio: -1, Reserve: 0.1, Window: 10 * time.Second},
			steps: []budgetStep{
				{at: 20 * time.Second, retries: 1, granted: 1},
				{at: 0, retries: 1, granted: 0},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.budget
			for i, s := range tc.steps {
				for range s.requests {
					b.countRequest()
				}
				granted := 0
				for range s.retries {
					if b.withdraw(t0.Add(s.at)) {
						granted++
					}
				}
				// Interpolated counts may round by one at a slot edge.
				if d := granted - s.granted; d < -1 || d > 1 || (s.at == 0 && d != 0) {
					t.Errorf("step %d at %v: granted %d of %d retries, want %d", i, s.at, granted, s.retries, s.granted)
				}
			}
		})
	}
}

func TestBudgetState(t *testing.T) {
	b := &Budget{Ratio: 0.5, Reserve: 0.2}
	for range 8 {
		b.countRequest()
	}
	b.withdraw(t0)
	got := b.State(t0)
	want := BudgetState{Requests: 8, Retries: 1, Available: 5}
	if got != want {
		t.Fatalf("State = %+v, want %+v", got, want)
	}
}

// TestBudgetWindowSlides checks, on the fake clock, that a budget drained
// in a burst refills as its retries age out of the window, slot by slot.
func TestBudgetWindowSlides(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &Budget{Ratio: -1, Reserve: 10, Window: time.Second} // 10 per window
		for range 10 {
			if !b.withdraw(time.Now()) {
				t.Fatal("reserve refused before it was spent")
			}
		}
		if b.withdraw(time.Now()) {
			t.Fatal("an eleventh retry was granted within the window")
		}
		time.Sleep(500 * time.Millisecond)
		if b.withdraw(time.Now()) {
			t.Fatal("retries left the window before it elapsed")
		}
		time.Sleep(500 * time.Millisecond)
		if !b.withdraw(time.Now()) {
			t.Fatal("retries did not leave the window after it elapsed")
		}
	})
}

// TestBudgetConcurrent charges one budget from many goroutines under -race:
// the total granted never exceeds the allowance.
func TestBudgetConcurrent(t *testing.T) {
	b := &Budget{Ratio: 0.1, Reserve: 0.5}
	var wg sync.WaitGroup
	var mu sync.Mutex
	granted := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				b.countRequest()
				if b.withdraw(t0) {
					mu.Lock()
					granted++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if limit := 5 + 800; granted > limit {
		t.Fatalf("granted %d retries, allowance %d", granted, limit)
	}
	if granted < 700 {
		t.Fatalf("granted only %d retries of an allowance of 805", granted)
	}
}

func BenchmarkBudgetCountRequest(b *testing.B) {
	budget := &Budget{}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			budget.countRequest()
		}
	})
}
