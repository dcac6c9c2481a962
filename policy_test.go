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
		// decorrelated: base + u·(3·prev − base), prev floored at base and
		// capped at MaxDelay (a Retry-After's 100 s wait before it)
		{JitterDecorrelated, 0, 0, 100 * time.Millisecond},
		{JitterDecorrelated, 0.5, 0, 200 * time.Millisecond},
		{JitterDecorrelated, 0.5, time.Second, 1550 * time.Millisecond},
		{JitterDecorrelated, 0.99, 5 * time.Second, 10 * time.Second},
		{JitterDecorrelated, 0.1, 100 * time.Second, 3090 * time.Millisecond},
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

// TestDecorrelatedJitterNeverGoesBelowBase: a base of decades has more
// digits than float64 keeps, and a wait drawn near it rounded below it
// (a review found one 170 ns short of a 97-year base).
func TestDecorrelatedJitterNeverGoesBelowBase(t *testing.T) {
	base := time.Duration(1<<61 + 1) // float64(base) rounds down
	p := Policy{BaseDelay: base, MaxDelay: time.Duration(math.MaxInt64), Jitter: JitterDecorrelated}
	if got := p.Delay(2, base, 0); got < base {
		t.Errorf("Delay = %v, below BaseDelay %v by %v", got, base, base-got)
	}
}

// TestNegativeBaseDelayWaitsNothingWhateverTheJitter: a negative BaseDelay
// means no wait, decorrelated jitter's previous wait notwithstanding.
func TestNegativeBaseDelayWaitsNothingWhateverTheJitter(t *testing.T) {
	for _, j := range []Jitter{JitterFull, JitterEqual, JitterNone, JitterDecorrelated} {
		p := Policy{BaseDelay: -time.Second, Jitter: j}
		if got := p.Delay(3, time.Second, 0.7); got != 0 {
			t.Errorf("jitter %v: Delay = %v, want 0", j, got)
		}
	}
}
