package httpretry

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestPolicyResolvesZeroAndNegativeValues(t *testing.T) {
	tests := []struct {
		name              string
		p                 Policy
		retries           int
		base, limit       time.Duration
		firstNoJitterWait time.Duration
	}{
		{"zero value is the default", Policy{}, 5, 200 * time.Millisecond, 10 * time.Second, 200 * time.Millisecond},
		{"NoRetries", Policy{MaxRetries: NoRetries}, 0, 200 * time.Millisecond, 10 * time.Second, 200 * time.Millisecond},
		{"any negative MaxRetries means none", Policy{MaxRetries: -42}, 0, 200 * time.Millisecond, 10 * time.Second, 200 * time.Millisecond},
		{"negative BaseDelay means no wait", Policy{BaseDelay: -1}, 5, 0, 10 * time.Second, 0},
		{"negative MaxDelay means the default cap", Policy{MaxDelay: -time.Second}, 5, 200 * time.Millisecond, 10 * time.Second, 200 * time.Millisecond},
		{"base above cap is clamped", Policy{BaseDelay: time.Hour, MaxDelay: time.Second}, 5, time.Second, time.Second, time.Second},
		{"explicit values", Policy{MaxRetries: 2, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond}, 2, time.Millisecond, 5 * time.Millisecond, time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.retries, tt.p.retries())
			base, limit := tt.p.bounds()
			assert.Equal(t, tt.base, base)
			assert.Equal(t, tt.limit, limit)
			tt.p.Jitter = JitterNone
			assert.Equal(t, tt.firstNoJitterWait, tt.p.Delay(1, 0, 0.5))
		})
	}
}

func TestDelayGrowsExponentiallyUpToTheCap(t *testing.T) {
	p := Policy{BaseDelay: 100 * time.Millisecond, MaxDelay: time.Second, Jitter: JitterNone}
	want := []time.Duration{100, 200, 400, 800, 1000, 1000}
	for i, w := range want {
		assert.Equal(t, w*time.Millisecond, p.Delay(i+1, 0, 0.3), "retry %d", i+1)
	}
	assert.Equal(t, 100*time.Millisecond, p.Delay(0, 0, 0), "n below 1 counts as 1")
	assert.Equal(t, 100*time.Millisecond, p.Delay(-5, 0, 0), "n below 1 counts as 1")
}

func TestDelayNeverOverflows(t *testing.T) {
	limits := []time.Duration{time.Nanosecond, time.Second, math.MaxInt64 / 3, math.MaxInt64}
	attempts := []int{1, 2, 62, 63, 64, 1000, math.MaxInt32, math.MaxInt}
	us := []float64{0, 0.5, math.Nextafter(1, 0), 1, 2, -1, math.NaN(), math.Inf(1)}
	for _, j := range []Jitter{JitterFull, JitterEqual, JitterDecorrelated, JitterNone, Jitter(99)} {
		for _, limit := range limits {
			p := Policy{BaseDelay: time.Nanosecond, MaxDelay: limit, Jitter: j}
			for _, n := range attempts {
				for _, u := range us {
					for _, prev := range []time.Duration{-1, 0, limit, math.MaxInt64} {
						d := p.Delay(n, prev, u)
						if d < 0 || d > limit {
							t.Fatalf("jitter %d limit %v n %d u %v prev %v: wait %v outside [0, %v]", j, limit, n, u, prev, d, limit)
						}
					}
				}
			}
		}
	}
}

func TestJitterFormulas(t *testing.T) {
	p := Policy{BaseDelay: 100 * time.Millisecond, MaxDelay: 10 * time.Second}
	// retry 3: exponential step 400 ms
	tests := []struct {
		jitter Jitter
		u      float64
		prev   time.Duration
		want   time.Duration
	}{
		{JitterFull, 0, 0, 0},
		{JitterFull, 0.5, 0, 200 * time.Millisecond},
		{JitterFull, 0.25, 0, 100 * time.Millisecond},
		{JitterEqual, 0, 0, 200 * time.Millisecond},
		{JitterEqual, 0.5, 0, 300 * time.Millisecond},
		{JitterNone, 0.9, 0, 400 * time.Millisecond},
		// decorrelated: base + u·(3·prev − base), prev floored at base
		{JitterDecorrelated, 0, 0, 100 * time.Millisecond},
		{JitterDecorrelated, 0.5, 0, 200 * time.Millisecond},
		{JitterDecorrelated, 0.5, time.Second, 1550 * time.Millisecond},
		{JitterDecorrelated, 0.99, 5 * time.Second, 10 * time.Second},
		{Jitter(42), 0.5, 0, 200 * time.Millisecond}, // unknown means full
	}
	for _, tt := range tests {
		p.Jitter = tt.jitter
		assert.Equal(t, tt.want, p.Delay(3, tt.prev, tt.u), "jitter %d u %v prev %v", tt.jitter, tt.u, tt.prev)
	}
}

func TestFullJitterStaysBelowTheStep(t *testing.T) {
	p := Policy{BaseDelay: 100 * time.Millisecond}
	for n := 1; n <= 10; n++ {
		step := exponential(n, 100*time.Millisecond, 10*time.Second)
		assert.Less(t, p.Delay(n, 0, math.Nextafter(1, 0)), step+1, "retry %d", n)
	}
}

func TestScaleNearMaxInt64(t *testing.T) {
	near := scale(math.MaxInt64, math.Nextafter(1, 0))
	assert.LessOrEqual(t, near, time.Duration(math.MaxInt64))
	assert.Greater(t, near, time.Duration(math.MaxInt64-1<<12), "float rounding costs at most a few ulps")
	assert.Equal(t, time.Duration(0), scale(math.MaxInt64, 0))
	assert.Equal(t, time.Duration(math.MaxInt64), spreadUp(math.MaxInt64, 0.99))
	assert.Equal(t, 105*time.Second, spreadUp(100*time.Second, 0.5))
	assert.Equal(t, 100*time.Second, spreadUp(100*time.Second, -3), "u clamped to 0")
}

func TestPolicyRest(t *testing.T) {
	half := func() float64 { return 0.5 }
	waits := func(s ownSteps) time.Duration { return s.at(s.count, 0) }
	p := Policy{MaxRetries: 4, BaseDelay: 100 * time.Millisecond, MaxDelay: time.Second}
	s := p.rest(1, 0, 0, half, maxDuration, 0)
	if got := waits(s); got != 700*time.Millisecond || s.count != 3 { // 100+200+400 ms, the mean of full jitter
		t.Errorf("rest after retry 1 at the mean: %v in %d waits, want 700ms in 3", got, s.count)
	}
	if got := s.at(2, 10*time.Millisecond); got != 320*time.Millisecond { // 100+200 ms of waits, two attempts of 10 ms
		t.Errorf("second step after retry 1: %v, want 320ms", got)
	}
	if got := (ownSteps{count: 2, tail: time.Second}).at(2, time.Millisecond); got != 2002*time.Millisecond { // steps at their mean only
		t.Errorf("two steps of 1 s at the mean, attempts of 1 ms: %v, want 2.002s", got)
	}
	if got := waits(p.rest(4, 0, 0, half, maxDuration, 0)); got != 0 || p.waitsAfter(4) {
		t.Errorf("rest after the last retry: %v, waitsAfter %v", got, p.waitsAfter(4))
	}
	if (Policy{BaseDelay: -1}).waitsAfter(1) {
		t.Error("a Policy without waits has waits left")
	}
	// A MaxRetries of a billion saturates without drawing a billion waits.
	huge := Policy{MaxRetries: 1 << 30, BaseDelay: time.Millisecond, MaxDelay: time.Hour}
	draws := 0
	hs := huge.rest(1, 0, 0, func() float64 { draws++; return 0.999 }, maxDuration, time.Millisecond)
	if got := waits(hs); got < 1000*time.Hour || draws > drawnSteps || hs.at(hs.count, time.Hour) != maxDuration {
		t.Errorf("huge MaxRetries: rest %v after %d draws, %v with hour-long attempts", got, draws, hs.at(hs.count, time.Hour))
	}
	if got := waits((Policy{MaxRetries: 1 << 30, BaseDelay: time.Hour, MaxDelay: maxDuration}).rest(1, 0, 0, half, maxDuration, time.Second)); got < 100*365*24*time.Hour {
		t.Errorf("rest that would overflow: %v, want it saturated", got)
	}
	// A deadline 500 ms away: the waits of 100 and 200 ms fit, 400 does not.
	if s := p.rest(1, 0, 0, half, 500*time.Millisecond, 0); waits(s) != 300*time.Millisecond || s.count != 2 || !s.cut {
		t.Errorf("rest within 500ms: %v in %d waits, cut %v; want 300ms in 2, the last retry a deadline lets start, cut by it", waits(s), s.count, s.cut)
	}
	if s := p.rest(1, 0, 0, half, 800*time.Millisecond, 0); s.count != 3 || s.cut {
		t.Errorf("rest within 800ms: %d waits, cut %v; want all 3, not cut", s.count, s.cut)
	}
	// Past drawnSteps steps at their mean: 1 ms waits, 2,000 of them fit
	// in 2 s but not the other 2,999.
	many := Policy{MaxRetries: 5000, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond, Jitter: JitterNone}
	if s := many.rest(1, 0, 0, half, 2*time.Second, 0); s.count >= 4999 || s.count < drawnSteps || !s.cut {
		t.Errorf("5000 retries within 2s: %d steps, cut %v; want fewer than 4999, past the drawn ones, cut", s.count, s.cut)
	}
	if s := many.rest(1, 0, 0, half, time.Hour, 0); s.count != 4999 || s.cut {
		t.Errorf("5000 retries within an hour: %d steps, cut %v; want 4999, not cut", s.count, s.cut)
	}
	// Attempts of 100 ms count too: 100+100 and 200+100 ms fit in 500, but
	// not without the first attempt's 100 ms, so one wait fits in 400.
	if s := p.rest(1, 0, 0, half, 400*time.Millisecond, 100*time.Millisecond); waits(s) != 100*time.Millisecond || s.count != 1 {
		t.Errorf("rest within 400ms, attempts of 100ms: %v in %d waits, want 100ms in 1", waits(s), s.count)
	}
}

// TestOwnStepsRefloor: steps drawn above a Retry-After of 3 s wait at
// least the one told later from the step named on, and those before keep
// theirs; drawn without one, they are floored at the Retry-After itself.
func TestOwnStepsRefloor(t *testing.T) {
	half := func() float64 { return 0.5 }
	p := Policy{MaxRetries: 4, BaseDelay: 100 * time.Millisecond, MaxDelay: time.Second}
	s := p.rest(1, 0, 3*time.Second, half, maxDuration, 0)
	if got := s.at(3, 0); got != 3*3150*time.Millisecond { // each 3 s spread up by half of 10%
		t.Fatalf("steps above 3 s: %v, want 9.45s", got)
	}
	s.refloor(2, time.Second)
	if got := []time.Duration{s.at(1, 0), s.at(2, 0), s.at(3, 0)}; got[0] != 3150*time.Millisecond || got[1] != 4200*time.Millisecond || got[2] != 5250*time.Millisecond {
		t.Errorf("steps re-timed above 1 s from step 2: %v, want [3.15s 4.2s 5.25s]", got)
	}
	s.refloor(1, 0)
	if got := s.at(3, 0); got != 700*time.Millisecond { // its own backoff alone: 100+200+400 ms
		t.Errorf("steps re-timed with no floor: %v, want 700ms", got)
	}
	bare := p.rest(1, 0, 0, half, maxDuration, 0)
	if bare.refloor(1, 2*time.Second); bare.at(3, 0) != 6*time.Second {
		t.Errorf("steps drawn without a Retry-After, floored at 2 s: %v, want 6s", bare.at(3, 0))
	}
}

func TestTimesSaturates(t *testing.T) {
	for _, tc := range []struct {
		n    int
		d    time.Duration
		want time.Duration
	}{
		{3, 2 * time.Second, 6 * time.Second},
		{0, maxDuration, 0},
		{math.MaxInt, time.Millisecond, maxDuration},
		{2, maxDuration/2 + 1, maxDuration},
	} {
		if got := times(tc.n, tc.d); got != tc.want {
			t.Errorf("times(%d, %v) = %v, want %v", tc.n, tc.d, got, tc.want)
		}
	}
}
