package storm

import (
	"math/rand/v2"
	"time"
)

// Arrivals returns the arrival times of a Poisson process of rate per
// second over [0, d): exponential gaps drawn from r, so a seed gives the
// same times every run.
func Arrivals(r *rand.Rand, rate float64, d time.Duration) []time.Duration {
	var out []time.Duration
	for t := expGap(r, rate); t < d; t += expGap(r, rate) {
		out = append(out, t)
	}
	return out
}

// expGap draws one exponential gap of mean 1/rate seconds.
func expGap(r *rand.Rand, rate float64) time.Duration {
	return time.Duration(r.ExpFloat64() / rate * float64(time.Second))
}
