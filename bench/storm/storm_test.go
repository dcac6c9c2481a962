package storm

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestBucket(t *testing.T) {
	b := NewBucket(10, 2) // 10 tokens/s, depth 2
	steps := []struct {
		at   time.Duration
		want bool
	}{
		{0, true}, {0, true}, {0, false}, // the full depth, then empty
		{50 * time.Millisecond, false}, // half a token
		{100 * time.Millisecond, true}, // one token after 100 ms
		{90 * time.Millisecond, false}, // time going back refills nothing
		{10 * time.Second, true},       // refilled to the depth only
		{10 * time.Second, true},
		{10 * time.Second, false},
	}
	for i, s := range steps {
		if got := b.Take(s.at); got != s.want {
			t.Fatalf("step %d: Take(%v) = %v, want %v", i, s.at, got, s.want)
		}
	}
}

func TestArrivals(t *testing.T) {
	a := Arrivals(rand.New(rand.NewPCG(1, 0)), 1000, 10*time.Second)
	if n := len(a); n < 9700 || n > 10300 { // Poisson: sd ≈ 100
		t.Fatalf("got %d arrivals in 10 s at 1000/s", n)
	}
	for i := 1; i < len(a); i++ {
		if a[i] < a[i-1] || a[i] >= 10*time.Second {
			t.Fatalf("arrival %d at %v after %v", i, a[i], a[i-1])
		}
	}
	b := Arrivals(rand.New(rand.NewPCG(1, 0)), 1000, 10*time.Second)
	if len(a) != len(b) || a[len(a)-1] != b[len(b)-1] {
		t.Fatal("the same seed gave other arrivals")
	}
}

// scenario is a small scenario for the pure parts: outage [1 s, 2 s),
// arrivals for 3 s, capacity 100/s, so 10 per window.
func scenario() Scenario {
	s := Default()
	s.Capacity = 100
	s.OutageStart, s.OutageEnd, s.Duration = time.Second, 2*time.Second, 3*time.Second
	s.RequestTimeout = time.Second
	return s
}

func TestRecorderOutageAndBucket(t *testing.T) {
	sc := scenario()
	r := newRecorder(sc) // burst 10
	for i := range 10 {
		if v := r.Admit(time.Duration(i) * time.Millisecond); v != Served {
			t.Fatalf("attempt %d: %v", i, v)
		}
	}
	if v := r.Admit(10 * time.Millisecond); v != Shed {
		t.Fatalf("past the burst: %v, want Shed", v)
	}
	if v := r.Admit(1500 * time.Millisecond); v != Down {
		t.Fatalf("in the outage: %v, want Down", v)
	}
	if v := r.Admit(2 * time.Second); v != Served {
		t.Fatalf("after the outage: %v, want Served", v)
	}
	w := r.Windows()
	if len(w) != 21 || w[0].Attempts != 11 || w[0].Served != 10 || w[0].ShedCount != 1 || w[15].DownCount != 1 || w[20].Served != 1 {
		t.Fatalf("windows: %+v", w)
	}
	if r.lastDown != 1500*time.Millisecond {
		t.Fatalf("last down %v", r.lastDown)
	}
}

func TestRecorderCollapse(t *testing.T) {
	sc := scenario()
	sc.Mode = Collapse // above 2 × 100/s over 500 ms: down for 1 s
	sc.OutageStart, sc.OutageEnd = 0, 0
	r := newRecorder(sc)
	// 101 attempts in the first 500 ms: over 2 × 100/s × 0.5 s.
	for i := range 101 {
		r.Admit(time.Duration(i) * 4 * time.Millisecond)
	}
	if v := r.Admit(500 * time.Millisecond); v != Down {
		t.Fatalf("after 500 ms of overload: %v, want Down", v)
	}
	if v := r.Admit(1499 * time.Millisecond); v != Down {
		t.Fatalf("within the collapse: %v, want Down", v)
	}
	if v := r.Admit(1500 * time.Millisecond); v != Served {
		t.Fatalf("after the collapse, under load: %v, want Served", v)
	}
}

func TestCompute(t *testing.T) {
	sc := scenario()
	w := func(i, arrivals, attempts, served int) Window {
		return Window{Start: time.Duration(i) * sc.Window, Arrivals: arrivals, Attempts: attempts, Served: served}
	}
	var windows []Window
	for i := range 10 { // healthy
		windows = append(windows, w(i, 7, 7, 7))
	}
	for i := 10; i < 20; i++ { // outage: 3 attempts per arrival
		windows = append(windows, w(i, 7, 21, 0))
	}
	windows = append(windows, w(20, 7, 40, 10), w(21, 7, 30, 10), w(22, 7, 10, 10)) // the storm, then calm
	for i := 23; i < 30; i++ {
		windows = append(windows, w(i, 7, 7, 7))
	}
	reqs := []Request{{Latency: 1 * time.Millisecond, OK: true}, {Latency: 2 * time.Millisecond, OK: true},
		{Latency: 3 * time.Millisecond, OK: false}, {Latency: 400 * time.Millisecond, OK: true}}
	m := compute(sc, windows, reqs, 5, 1900*time.Millisecond)
	if m.OutageAmplification != 3 {
		t.Errorf("outage amplification %v, want 3", m.OutageAmplification)
	}
	if m.Peak != 40 || m.PeakAfter != 40 || m.PeakAfterRatio != 4 {
		t.Errorf("peak %d, after %d (%v×), want 40, 40 (4×)", m.Peak, m.PeakAfter, m.PeakAfterRatio)
	}
	if !m.Recovered || m.Recovery != 200*time.Millisecond {
		t.Errorf("recovery %v %v, want 200ms", m.Recovery, m.Recovered)
	}
	if m.Success != 0.75 || m.P50 != 2*time.Millisecond || m.P99 != 400*time.Millisecond {
		t.Errorf("success %v p50 %v p99 %v", m.Success, m.P50, m.P99)
	}
	if m.Requests != 4 || m.Conns != 5 || m.DownUntil != 1900*time.Millisecond {
		t.Errorf("requests %d conns %d down until %v", m.Requests, m.Conns, m.DownUntil)
	}
}

func TestRecoveryNever(t *testing.T) {
	sc := scenario()
	windows := []Window{{Start: 2900 * time.Millisecond, Attempts: 10, Served: 5}}
	if _, ok := recovery(sc, windows); ok {
		t.Fatal("a failing last window counted as recovered")
	}
}

func TestValidate(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Fatal(err)
	}
	bad := Default()
	bad.Mode = "sideways"
	if bad.Validate() == nil {
		t.Fatal("an unknown mode passed")
	}
}

// admitFlaky admits n attempts 100 µs apart, all of which must be served
// or failed at random, and returns how many failed.
func admitFlaky(t *testing.T, r *recorder, n int) int {
	t.Helper()
	flaky := 0
	for i := range n {
		switch v := r.Admit(time.Duration(i) * 100 * time.Microsecond); v {
		case Flaky:
			flaky++
		case Served:
		default:
			t.Fatalf("attempt %d: %v, want Served or Flaky", i, v)
		}
	}
	return flaky
}

func TestRecorderRandomFailures(t *testing.T) {
	sc := RandomFailures()
	sc.Capacity = 1e9 // never shed: only the random failures fail
	r := newRecorder(sc)
	const n = 20000
	flaky := admitFlaky(t, r, n)
	// 5% of 20000: 1000, with a standard deviation of about 31.
	if flaky < 880 || flaky > 1120 {
		t.Fatalf("%d of %d attempts failed at random, want about 1000", flaky, n)
	}
	total := 0
	for _, w := range r.Windows() {
		total += w.FlakyCount
	}
	if total != flaky || r.anyDown {
		t.Fatalf("windows count %d random failures of %d; anyDown=%v", total, flaky, r.anyDown)
	}
	// Other modes never fail at random, whatever FailRate says.
	open := Default()
	open.FailRate = 0.5
	if open.failRate() != 0 {
		t.Fatal("an open-loop scenario failed at random")
	}
	bad := RandomFailures()
	bad.FailRate = 1
	if bad.Validate() == nil {
		t.Fatal("a fail rate of 1 passed")
	}
}

// TestPercentileIsTheNearestRank: the q-quantile of n values is the
// ⌈q·n⌉-th; rounding q·n to the nearest instead gave the p99 of 51 values
// as the 50th (a review's find).
func TestPercentileIsTheNearestRank(t *testing.T) {
	for n := 1; n <= 1000; n++ {
		sorted := make([]time.Duration, n)
		for i := range sorted {
			sorted[i] = time.Duration(i + 1)
		}
		for _, pct := range []int{50, 95, 99} {
			want := time.Duration((pct*n + 99) / 100) // ⌈pct·n/100⌉ in integers
			if got := percentile(sorted, float64(pct)/100); got != want {
				t.Fatalf("p%d of 1..%d = %d, want %d", pct, n, got, want)
			}
		}
	}
}
